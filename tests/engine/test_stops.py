"""Stop rules on hand-written token streams (one token = the bytes we say it is)."""

from __future__ import annotations

from daemon.stops import StopChecker, StopConfig


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
    from daemon.stops import FenceNesting

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
