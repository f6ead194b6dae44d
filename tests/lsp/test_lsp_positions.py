"""lsp/positions.py: LSP positions <-> character offsets, on non-ASCII text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.lsp import positions as P

EMOJI = "\U0001F600"  # 😀: 1 code point, 2 UTF-16 units, 4 UTF-8 bytes
CJK = "漢字"  # 2 code points, 2 UTF-16 units, 6 UTF-8 bytes
COMBINING = "e\u0301"  # é as e + combining acute: 2 code points, 2 units, 3 bytes


def test_module_doc_example():
    text = f"a{EMOJI}b\nc"
    assert P.offset_at(text, 0, 3, P.UTF16) == 2
    assert P.offset_at(text, 0, 5, P.UTF8) == 2
    assert P.offset_at(text, 0, 2, P.UTF32) == 2
    assert P.position_at(text, 2, P.UTF16) == (0, 3)
    assert P.position_at(text, 2, P.UTF8) == (0, 5)
    assert P.position_at(text, 2, P.UTF32) == (0, 2)
    assert text[P.offset_at(text, 1, 0)] == "c"


@pytest.mark.parametrize("encoding, after", [(P.UTF16, 2), (P.UTF8, 4), (P.UTF32, 1)])
def test_emoji_widths(encoding, after):
    text = f"{EMOJI}x"
    assert P.units(EMOJI, encoding) == after
    assert P.offset_at(text, 0, after, encoding) == 1  # before x
    assert P.position_at(text, 1, encoding) == (0, after)


def test_inside_a_surrogate_pair_rounds_down():
    text = f"a{EMOJI}b"
    # UTF-16 column 2 is the low half of the emoji: it means the emoji's start
    assert P.offset_at(text, 0, 2, P.UTF16) == 1
    # UTF-8 columns 2..4 are inside the emoji's four bytes
    assert [P.offset_at(text, 0, c, P.UTF8) for c in range(1, 7)] == [1, 1, 1, 1, 2, 3]


def test_cjk_and_combining_marks():
    text = f"{CJK}{COMBINING}z"
    assert P.offset_at(text, 0, 2, P.UTF16) == 2  # after 漢字
    assert P.offset_at(text, 0, 4, P.UTF16) == 4  # after e + U+0301: two characters
    assert P.offset_at(text, 0, 6, P.UTF8) == 2
    assert P.offset_at(text, 0, 9, P.UTF8) == 4  # 6 + 1 (e) + 2 (U+0301)
    assert P.position_at(text, 4, P.UTF8) == (0, 9)
    assert P.units(text, P.UTF16) == 5 and P.units(text, P.UTF8) == 10


def test_line_breaks_are_lsp_ones_only():
    text = "a\r\nb\rc\nd\u2028e\x0cf"
    assert [P.offset_at(text, line, 0) for line in range(4)] == [0, 3, 5, 7]
    # U+2028 and form feed are characters inside line 3, not breaks
    assert P.position_at(text, len(text), P.UTF16) == (3, 5)
    assert P.line_span(text, 0) == (0, 1)


def test_clamping():
    text = "ab\ncd"
    assert P.offset_at(text, 0, 99) == 2  # past the end of line 0: its end, not the next line
    assert P.offset_at(text, 7, 0) == len(text)  # past the last line: end of text
    assert P.position_at(text, 99) == (1, 2)
    assert P.position_at("ab\r\ncd", 3) == (0, 2)  # between CR and LF: end of line 0
    with pytest.raises(ValueError):
        P.offset_at(text, -1, 0)
    with pytest.raises(ValueError):
        P.units("x", "utf-7")


def test_line_start_agrees_with_positions():
    text = f"a{EMOJI}\r\nb\rc\nd\u2028e"
    for offset in range(len(text) + 1):
        if text[offset - 1:offset + 1] == "\r\n":
            continue  # between CR and LF: see line_start's doc
        line = P.position_at(text, offset)[0]
        assert P.line_start(text, offset) == P.offset_at(text, line, 0), offset


def test_range_offsets_ordered():
    text = f"x{EMOJI}y\nz"
    assert P.range_offsets(text, (0, 3), (1, 1)) == (2, 5)
    assert P.range_offsets(text, (1, 1), (0, 3)) == (2, 5)


def test_trailing_newline_line():
    text = "ab\n"
    assert P.offset_at(text, 1, 0) == 3
    assert P.position_at(text, 3) == (1, 0)


_chars = st.sampled_from(["a", "Z", " ", "\n", "\r", "\r\n", EMOJI, "漢", "\u0301", "é", "\t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_chars, max_size=30), st.sampled_from(P.ENCODINGS), st.data())
def test_round_trip(chunks, encoding, data):
    """offset -> position -> offset is the identity (except inside a CRLF)."""
    text = "".join(chunks)
    offset = data.draw(st.integers(0, len(text)))
    line, col = P.position_at(text, offset, encoding)
    back = P.offset_at(text, line, col, encoding)
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        assert back == offset - 1
    else:
        assert back == offset
    # the column is what the line's prefix measures in the encoding
    start, _ = P.line_span(text, line)
    assert col == P.units(text[start:back], encoding)


@settings(max_examples=200, deadline=None)
@given(st.lists(_chars, max_size=30), st.sampled_from(P.ENCODINGS), st.data())
def test_range_offsets_agrees_with_offset_at(chunks, encoding, data):
    """The one-line shortcut (a keystroke's range) gives what two offset_at calls give."""
    text = "".join(chunks)
    line = data.draw(st.integers(0, text.count("\n") + 1))
    end_line = data.draw(st.sampled_from([line, line + 1]))
    a, b = data.draw(st.integers(0, 12)), data.draw(st.integers(0, 12))
    s, e = P.offset_at(text, line, a, encoding), P.offset_at(text, end_line, b, encoding)
    assert P.range_offsets(text, (line, a), (end_line, b), encoding) == (min(s, e), max(s, e))
