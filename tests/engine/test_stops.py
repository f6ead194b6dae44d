"""Stop rules on hand-written token streams (one token = the bytes we say it is)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.engine.stops import StopChecker, StopConfig


def _run(pieces, eos=frozenset(), skip=b"", **cfg):
    table = [p if isinstance(p, bytes) else p.encode() for p in pieces]
    checker = StopChecker(StopConfig(max_tokens=cfg.pop("max_tokens", 100), eos_ids=eos, **cfg),
                          lambda t: table[t], skip=skip)
    used = checker.push_many(range(len(table)))
    return checker, used


def test_max_tokens():
    c, used = _run(["a", "b", "c", "d"], max_tokens=3)
    assert (c.text, c.reason, used) == ("abc", "max_tokens", 3)


def test_stop_string_cuts_before_it():
    c, used = _run(["x = 1", "\n#", " end", "more"], stop_strings=("# end",))
    assert (c.text, c.reason, used) == ("x = 1\n", "stop_string", 3)


def test_single_line_stops_at_newline():
    c, _ = _run(["foo(", "a)\n", "bar"], single_line=True)
    assert (c.text, c.reason) == ("foo(a)", "end_of_line")


def test_single_line_stops_before_a_crlf():
    c, _ = _run(["foo()", "\r\n", "bar"], single_line=True)
    assert (c.text, c.reason) == ("foo()", "end_of_line")
    c, _ = _run(["foo()\r", "\n"], single_line=True)  # the \r and \n in different tokens
    assert (c.text, c.reason) == ("foo()", "end_of_line")


def test_block_end_in_a_crlf_file_leaves_no_stray_cr():
    c, _ = _run(["ab", "\r\n", "\r\n", "x"], line_prefix="    ")
    assert (c.text, c.reason) == ("ab", "block_end")
    lf, _ = _run(["ab", "\n", "\n", "x"], line_prefix="    ")
    assert lf.text == "ab"


def test_multibyte_char_split_across_tokens_is_never_emitted_half():
    arrow = "→".encode()
    c = StopChecker(StopConfig(max_tokens=10), lambda t: [b"a", arrow[:1], arrow[1:], b"b"][t])
    texts = []
    for t in range(4):
        c.push(t)
        texts.append(c.text)
    assert texts == ["a", "a", "a→", "a→b"]


def test_an_undecodable_byte_does_not_swallow_the_text_after_it():
    c, _ = _run(["ab", b"\x80", "ab"], max_tokens=3)
    assert (c.text, c.reason) == ("ab\ufffdab", "max_tokens")
    arrow = "→".encode()
    c, _ = _run(["a", arrow[:2], "b"], max_tokens=3)  # a character cut short, then text
    assert c.text == "a\ufffdb"


def test_eos_stops_without_text():
    c, used = _run(["x", "<eos>", "y"], eos=frozenset({1}))
    assert (c.text, c.reason, used) == ("x", "eos", 2)


def test_block_end_on_dedent_below_cursor_line():
    c, _ = _run(["return a", "\n", "    ", "x = 1", "\n", "def", " g"], line_prefix="        ")
    assert (c.text, c.reason) == ("return a", "block_end")


def test_blank_line_then_dedent_ends_block():
    # cursor at col 0 on a blank line inside a function: the block is the generated body
    c, _ = _run(["    a = 1\n", "    if a:\n", "        b = 2\n", "\n", "    c", " = 3"])
    assert (c.text, c.reason) == ("    a = 1\n    if a:\n        b = 2", "block_end")


def test_nested_block_without_blank_line_continues():
    c, _ = _run(["    a = 1\n", "    if a:\n", "        b = 2\n", "    c = 3\n"], max_tokens=4)
    assert c.reason == "max_tokens" and c.text.endswith("c = 3\n")


def test_skip_bytes_are_consumed_not_emitted():
    c, _ = _run([" ret", "urn", " x"], skip=b" retu", single_line=True)
    assert c.text == "rn x"


def test_fence_nesting_finds_the_line_that_closes_the_answer_as_the_text_streams():
    from ngramd.daemon.engine.stops import FenceNesting

    text = "intro\n```python\nx = 1\n```\n\n```\nafter\n"
    whole = FenceNesting("```").closing_line(text)
    assert text[whole:] == "```\nafter\n"  # the first bare fence closes the block ```python opened
    streamed, nesting = None, FenceNesting("```")
    for end in range(len(text) + 1):  # as generation grows the text
        streamed = nesting.closing_line(text[:end])
        if streamed is not None:
            break
    assert streamed == whole and end == whole + 4  # judged once its line break came
    # a shorter run is text as often as the selection has one to copy, then it closes
    assert FenceNesting("````", short_text=1).closing_line("a\n```\nb\n````\n") == 8
    assert FenceNesting("````", short_text=1).closing_line("a\n```\nb\n```\n") == 8
    assert FenceNesting("````").closing_line("a\n```\nb\n````\n") == 2
    assert FenceNesting("```").closing_line("```\n") == 0  # no text at all
    assert FenceNesting("```").closing_line("a\n```") is None  # not complete yet


# --- several rules completed by one token: the first in the text wins, whatever the token boundaries


def test_stop_strings_in_one_token_cut_at_the_first_in_the_text_not_the_first_listed():
    for stops in (("b", "a"), ("a", "b")):
        c, _ = _run(["ab"], stop_strings=stops, block_end=False)
        assert (c.text, c.reason) == ("", "stop_string"), stops


def test_single_line_ends_at_the_newline_before_a_stop_string_in_the_same_token():
    for token in ("x\n}", "x\r\n}"):
        c, _ = _run([token], stop_strings=("}",), single_line=True)
        assert (c.text, c.reason) == ("x", "end_of_line"), token  # a single line holds no newline


def test_block_end_cuts_before_a_stop_string_on_the_dedented_line_in_the_same_token():
    alone, _ = _run(["x\n}"], line_prefix="    ")
    c, _ = _run(["x\n}"], stop_strings=("}",), line_prefix="    ")
    assert (alone.text, alone.reason) == (c.text, c.reason) == ("x", "block_end")


def test_a_stop_string_completed_first_wins_over_one_that_begins_before_it():
    """As the text comes a character at a time: ``b`` ends generation before ``abc`` can be complete."""
    for pieces in (["abc"], ["ab", "c"], ["a", "b", "c"]):
        c, _ = _run(pieces, stop_strings=("abc", "b"), block_end=False)
        assert (c.text, c.reason) == ("a", "stop_string"), pieces


def test_a_stop_string_before_the_closing_fence_in_the_same_token_cuts_there():
    c, _ = _run(["a END\n```\n"], stop_strings=("END",), closing_fence="```", block_end=False)
    assert (c.text, c.reason) == ("a ", "stop_string")
    c, _ = _run(["a\n```\nEND"], stop_strings=("END",), closing_fence="```", block_end=False)
    assert (c.text, c.reason) == ("a", "stop_string")


_CHARS = "ab} \n\r`→"  # → is three bytes: splits inside a character too


@st.composite
def _streams(draw):
    """(config, skip, stream bytes, token boundaries): a random split of the stream into tokens."""
    cfg = dict(
        stop_strings=tuple(draw(st.lists(st.text("ab} \n`", min_size=1, max_size=3), max_size=3))),
        single_line=draw(st.booleans()),
        line_prefix=draw(st.sampled_from(["", "  ", "    "])),
        block_end=draw(st.booleans()),
        closing_fence=draw(st.sampled_from([None, "```"])),
    )
    skip = draw(st.sampled_from(["", "a", " b"])).encode()
    stream = skip + draw(st.text(_CHARS, max_size=30)).encode()
    cuts = draw(st.sets(st.integers(1, max(len(stream) - 1, 1)), max_size=len(stream)))
    bounds = sorted({0, len(stream)} | {c for c in cuts if c < len(stream)})
    return cfg, skip, stream, bounds


@settings(max_examples=400, deadline=None)
@given(_streams())
def test_where_generation_stops_does_not_depend_on_how_the_stream_is_split_into_tokens(case):
    """A speculative pass pushes several tokens at once, and a token holds several characters:
    the result must be that of the text pushed a byte at a time."""
    cfg, skip, stream, bounds = case
    tokens = [stream[a:b] for a, b in zip(bounds, bounds[1:])]

    def checker(table):
        return StopChecker(StopConfig(max_tokens=10_000, **cfg), lambda t: table[t], skip=skip)

    by_byte = checker([bytes([b]) for b in stream])
    stopped_at = by_byte.push_many(range(len(stream)))  # bytes consumed
    many = checker(tokens)
    used = many.push_many(range(len(tokens)))
    one_by_one = checker(tokens)
    pushed = next((i + 1 for i in range(len(tokens)) if one_by_one.push(i)), len(tokens))
    assert (many.text, many.reason, used) == (one_by_one.text, one_by_one.reason, pushed)
    assert (many.text, many.reason) == (by_byte.text, by_byte.reason)
    if by_byte.reason:  # the same token stops it: the one holding the byte that stopped it
        assert bounds[used - 1] < stopped_at <= bounds[used]
    else:
        assert used == len(tokens)


@settings(max_examples=300, deadline=None)
@given(_streams(), st.integers(0, 30))
def test_tokens_before_stop_foresees_where_pushing_would_stop_and_changes_nothing(case, fed):
    """A draft is cut where ``tokens_before_stop`` says: it must name the token that stops the
    answer when the stream is pushed, and leave the checker as it was."""
    cfg, skip, stream, bounds = case
    tokens = [stream[a:b] for a, b in zip(bounds, bounds[1:])]
    fed = min(fed, len(tokens))

    def checker():
        c = StopChecker(StopConfig(max_tokens=10_000, **cfg), lambda t: tokens[t], skip=skip)
        c.push_many(range(fed))
        return c

    probed, fresh = checker(), checker()
    ahead = probed.tokens_before_stop(range(fed, len(tokens)))
    used = probed.push_many(range(fed, len(tokens)))
    fresh_used = fresh.push_many(range(fed, len(tokens)))
    assert (probed.text, probed.reason, used) == (fresh.text, fresh.reason, fresh_used)
    if fresh.reason and used:
        assert ahead == used - 1  # the tokens before the one that stopped it
    else:
        assert ahead == (0 if fresh.reason else len(tokens) - fed)


def test_tokens_before_stop_sees_eos_max_tokens_and_a_character_split_across_tokens():
    arrow = "→".encode()
    table = [b"a", arrow[:1], arrow[1:], b"\n", b"x", b"y"]
    c = StopChecker(StopConfig(max_tokens=5, eos_ids=frozenset({5}), single_line=True), lambda t: table[t])
    c.push_many([0, 1])  # half the arrow is in the decoder
    assert c.tokens_before_stop([2, 0, 0, 0]) == 2  # the fifth token is max_tokens'
    assert c.tokens_before_stop([2, 5]) == 1  # eos
    assert c.tokens_before_stop([2, 3, 4]) == 1  # the newline, once the arrow is whole
    assert c.tokens_before_stop([2]) == 1
    assert (c.push_many([2, 4]), c.text, c.reason) == (2, "a→x", "")
    c.push(3)
    assert c.tokens_before_stop([0]) == 0  # stopped already: nothing more is emitted


def test_tokens_before_stop_leaves_the_loop_guard_as_it_was():
    """The probe skips the loop guard (a loop caught in a draft only leaves the draft whole); the
    checker's own guard must see the stream as if no probe had run."""
    table = [b"x = 0\n", b"x += 1\n"]
    stream = [0] + [1] * 150

    def checker():
        return StopChecker(StopConfig(max_tokens=1_000, block_end=False, loop_allowed=b"x = 0\n"), lambda t: table[t])

    probed, fresh = checker(), checker()
    probed.push_many(stream[:60])
    fresh.push_many(stream[:60])
    assert probed.tokens_before_stop(stream[60:]) == len(stream) - 60  # no text rule fires
    used = probed.push_many(stream[60:])
    assert (used, probed.reason, probed.text) == (fresh.push_many(stream[60:]), fresh.reason, fresh.text)
    assert probed.reason == "repetition" and used < len(stream) - 60
