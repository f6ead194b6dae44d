"""The loop guard (daemon/repetition.py) on hand-made token streams, and as a stop rule."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.repetition import MAX_PERIOD, MIN_REPEATS, MIN_SPAN, RepetitionGuard
from daemon.stops import StopChecker, StopConfig


def _bytes_of(t: int) -> bytes:
    return f"<{t}>".encode()  # every token its own text: a run's text is its tokens'


def _stops_at(tokens: list[int], allowed: bytes = b"") -> int | None:
    """1-based index of the token after which the guard fires; None when it never does."""
    guard = RepetitionGuard(allowed, _bytes_of)
    return next((i + 1 for i, t in enumerate(tokens) if guard.push(t)), None)


def _text(tokens: list[int]) -> bytes:
    return b"".join(map(_bytes_of, tokens))


def test_a_short_cycle_stops_once_the_run_covers_min_span_tokens():
    prefix = [100, 101, 102]
    cycle = [1, 2, 3, 4]
    tokens = prefix + cycle * 40
    # the periodic run starts at the cycle: its span reaches MIN_SPAN tokens at that token
    assert _stops_at(tokens) == len(prefix) + MIN_SPAN


def test_a_long_cycle_must_come_min_repeats_times():
    cycle = list(range(1, 31))  # 30 tokens: 3 x 30 > MIN_SPAN
    assert _stops_at(cycle * 5) == MIN_REPEATS * len(cycle)


def test_period_and_state_after_firing():
    guard = RepetitionGuard(b"", _bytes_of)
    fired = [guard.push(t) for t in [7, 8] * 30]
    assert fired.index(True) == MIN_SPAN - 1 and all(fired[MIN_SPAN - 1:])
    assert guard.period == 2  # the shortest cycle, not a multiple of it


def test_a_cycle_longer_than_max_period_is_not_looked_for():
    cycle = list(range(1, MAX_PERIOD + 2))
    assert _stops_at(cycle * 4) is None


def test_repetition_the_prompt_holds_is_copying_not_a_loop():
    table = [5, 6] * 40  # e.g. a table of 0x00, 0x00, ... in the selection
    assert _stops_at(table, allowed=b"x = [" + _text(table) + b"]") is None
    # the same table, then more of it than the prompt has: a loop once the run outgrows it
    longer = [5, 6] * 60
    assert _stops_at(longer, allowed=_text(table)) == len(table) + 1


def test_a_run_shorter_than_min_span_is_code():
    assert _stops_at([1, 2, 3] * 15 + [9]) is None  # 45 tokens of a 3-cycle, then on


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_streams_without_a_long_periodic_run_never_stop(seed):
    rng = random.Random(seed)
    # bursts of short cycles (under MIN_SPAN tokens each) between random tokens
    tokens: list[int] = []
    while len(tokens) < 400:
        cycle = [rng.randrange(50) for _ in range(rng.randint(1, 8))]
        tokens += (cycle * 100)[:rng.randint(1, MIN_SPAN - 1 - len(cycle))]
        tokens.append(1000 + len(tokens))  # never seen before: breaks every period
    assert _stops_at(tokens) is None


def test_stop_checker_reason_repetition_only_when_enabled():
    table = [b"x", b"y"]
    tokens = [0, 1] * 40

    def run(**cfg):
        checker = StopChecker(StopConfig(max_tokens=1000, **cfg), lambda t: table[t])
        return checker, checker.push_many(tokens)

    checker, used = run(loop_allowed=b"")
    assert (checker.reason, used) == ("repetition", MIN_SPAN)
    assert checker.text == "xy" * (MIN_SPAN // 2)  # the text is kept whole, as at max_tokens
    checker, used = run()
    assert (checker.reason, used) == ("", len(tokens))
