"""The loop guard (daemon/engine/repetition.py) on hand-made token streams, and as a stop rule."""

from __future__ import annotations

import pytest

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.engine.repetition import MAX_PERIOD, MIN_REPEATS, MIN_SPAN, RepetitionGuard, without_line_edges
from ngramd.daemon.engine.stops import StopChecker, StopConfig


def _bytes_of(t: int) -> bytes:
    return f"<{t}>".encode()  # every token its own text: a run's text is its tokens'


def _stops_at(tokens: list[int], allowed: bytes = b"", token_bytes=_bytes_of) -> int | None:
    """1-based index of the token after which the guard fires; None when it never does."""
    guard = RepetitionGuard(allowed, token_bytes)
    return next((i + 1 for i, t in enumerate(tokens) if guard.push(t)), None)


def _text(tokens: list[int]) -> bytes:
    return b"".join(map(_bytes_of, tokens))


def test_a_short_cycle_stops_once_the_run_covers_min_span_tokens():
    prefix = [100, 101, 102]
    cycle = [1, 2, 3, 4]
    tokens = prefix + cycle * 60
    # the periodic run starts at the cycle: its span reaches MIN_SPAN tokens at that token
    assert _stops_at(tokens) == len(prefix) + MIN_SPAN


def test_a_long_cycle_must_come_min_repeats_times():
    cycle = list(range(1, 41))  # 40 tokens: 3 x 40 > MIN_SPAN
    assert MIN_REPEATS * len(cycle) > MIN_SPAN
    assert _stops_at(cycle * 5) == MIN_REPEATS * len(cycle)


def test_period_and_state_after_firing():
    guard = RepetitionGuard(b"", _bytes_of)
    fired = [guard.push(t) for t in [7, 8] * MIN_SPAN]
    assert fired.index(True) == MIN_SPAN - 1 and all(fired[MIN_SPAN - 1:])
    assert guard.period == 2  # the shortest cycle, not a multiple of it


def test_a_cycle_longer_than_max_period_is_not_looked_for():
    cycle = list(range(1, MAX_PERIOD + 2))
    assert _stops_at(cycle * 4) is None


def test_a_run_shorter_than_min_span_is_code():
    assert _stops_at([1, 2, 3] * (MIN_SPAN // 3 - 1) + [9]) is None


def test_repetition_the_prompt_holds_is_copying_not_a_loop():
    table = [5] * 200  # e.g. a table of 0x00, 0x00, ... in the selection
    assert _stops_at(table, allowed=b"x = [" + _text(table) + b"]") is None
    # more of it than the prompt holds: a loop once it goes MIN_SPAN tokens beyond
    assert _stops_at([5] * 400, allowed=_text(table)) == len(table) + MIN_SPAN


def test_a_table_given_one_more_row_is_not_a_loop():
    row = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 10]  # 12 tokens, one line
    assert _stops_at(row * 21, allowed=_text(row * 20)) is None
    # 20 rows held: a loop MIN_SPAN tokens further, less up to a row (the prompt's 20 rows end
    # where a row ends; the output's latest tokens may end inside one)
    at = _stops_at(row * 60, allowed=_text(row * 20))
    assert 20 * len(row) + MIN_SPAN - len(row) < at <= 20 * len(row) + MIN_SPAN


def test_the_prompts_indentation_does_not_count():
    """The selection is shown dedented; the file around it is not: a block copied from the
    file comes back at another indentation, and is still the prompt's."""
    table = {0: b"        [0, 0],\n", 1: b"    [0, 0],\n"}
    allowed = b"rows = [\n" + table[0] * 2 * MIN_SPAN
    assert _stops_at([1] * 2 * MIN_SPAN, allowed=allowed, token_bytes=table.__getitem__) is None
    assert _stops_at([1] * 2 * MIN_SPAN, allowed=b"", token_bytes=table.__getitem__) == MIN_SPAN


def test_trailing_whitespace_the_answer_drops_does_not_count():
    """A table whose rows end in a space, copied without it (as a model writes code): copying."""
    table = {0: b"    0x00, 0x00, \n", 1: b"    0x00, 0x00,\n"}
    allowed = b"TABLE = [\n" + table[0] * 2 * MIN_SPAN
    assert _stops_at([1] * 2 * MIN_SPAN, allowed=allowed, token_bytes=table.__getitem__) is None
    assert _stops_at([1] * 2 * MIN_SPAN, allowed=b"", token_bytes=table.__getitem__) == MIN_SPAN


# tokens with spaces, tabs and line breaks, so that indentation is in play
_PIECES = [b"a", b"b", b" ", b"\n", b"\t", b"  c", b"\n    ", b"d\n", b"[0, ", b"0],\n"]


def _brute_force_stop(tokens: list[int], allowed: bytes) -> int | None:
    """The first token that ends a loop, straight from the definition: a run of period
    p <= MAX_PERIOD over at least max(MIN_SPAN, MIN_REPEATS * p) tokens (its whole length L),
    that goes MIN_SPAN tokens beyond the longest suffix of the output the prompt holds."""
    prompt = without_line_edges(allowed)
    for k in range(1, len(tokens) + 1):
        held = max(m for m in range(k + 1)
                   if without_line_edges(b"".join(_PIECES[t] for t in tokens[k - m:k])) in prompt)
        for p in range(1, MAX_PERIOD + 1):
            length = p
            while length < k and tokens[k - 1 - length] == tokens[k - 1 - length + p]:
                length += 1
            if length >= max(MIN_SPAN, MIN_REPEATS * p) and length - min(length, held) >= MIN_SPAN:
                return k
    return None


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.booleans())
def test_it_stops_where_a_brute_force_search_finds_the_first_loop(seed, prompt_holds_some):
    """Random streams of cycles of random lengths; the prompt empty, or holding a stretch of
    the stream at another indentation."""
    rng = random.Random(seed)
    tokens: list[int] = []
    while len(tokens) < 360:
        cycle = [rng.randrange(len(_PIECES)) for _ in range(rng.randint(1, MAX_PERIOD + 8))]
        tokens += (cycle * 400)[:rng.choice([rng.randint(1, 60), rng.randint(60, 220)])]
    allowed = b""
    if prompt_holds_some:
        lo = rng.randrange(len(tokens))
        stretch = b"".join(_PIECES[t] for t in tokens[lo:lo + rng.randint(1, 250)])
        allowed = b"x = 1\n" + stretch.replace(b"\n", b"\n" + b" " * rng.randint(0, 8))
    assert _stops_at(tokens, allowed, _PIECES.__getitem__) == _brute_force_stop(tokens, allowed)


@given(st.binary(max_size=40).map(lambda b: bytes(b" \t\na"[x % 4] for x in b)))
def test_without_line_edges_keeps_suffixes_suffixes(text):
    for i in range(len(text) + 1):
        assert without_line_edges(text).endswith(without_line_edges(text[i:]))


def test_stop_checker_reason_repetition_only_when_enabled():
    table = [b"x", b"y"]
    tokens = [0, 1] * MIN_SPAN

    def run(**cfg):
        checker = StopChecker(StopConfig(max_tokens=1000, **cfg), lambda t: table[t])
        return checker, checker.push_many(tokens)

    checker, used = run(loop_allowed=b"")
    assert (checker.reason, used) == ("repetition", MIN_SPAN)
    assert checker.text == "xy" * (MIN_SPAN // 2)  # the text is kept whole, as at max_tokens
    checker, used = run()
    assert (checker.reason, used) == ("", len(tokens))


def test_a_stop_string_on_the_token_that_completes_a_loop_wins():
    """The closing fence ends a finished answer: read before the loop on the same token."""
    table = [b"x", b"y"]
    stop = "xy" * (MIN_SPAN // 2)  # complete at token MIN_SPAN, as the loop is
    checker = StopChecker(StopConfig(max_tokens=1000, stop_strings=(stop,), loop_allowed=b""),
                          lambda t: table[t])
    assert checker.push_many([0, 1] * MIN_SPAN) == MIN_SPAN
    assert (checker.reason, checker.text) == ("stop_string", "")
