"""The typing replay's user and clock (daemon/bench/typing_replay.py), on engines of known cost."""

from __future__ import annotations

import threading

import pytest

from ngramd.daemon.bench.typing_replay import Answer, UserModel, percentile, replay, summarize

TEXT = "def f(x):\n    return x + 1\n\n"
START, END = TEXT.index("    return"), len(TEXT) - 1
USER = UserModel(ms_per_char=100.0, jitter=0.0, line_end_pause_ms=(0.0, 0.0), debounce_ms=50.0, accept_ms=200.0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Engine:
    """Suggests the true text's next ``ahead`` characters (an oracle), or ``wrong``; costs ``cost_ms``."""

    def __init__(self, clock: FakeClock, cost_ms: float, ahead: int = 0, wrong: str = "", passes: int = 3):
        self.name, self.clock, self.cost_ms, self.ahead, self.wrong, self.passes = "fake", clock, cost_ms, ahead, wrong, passes
        self.asked: list[int] = []
        self.idle_calls = 0

    def complete(self, uri: str, text: str, offset: int, cancel: threading.Event) -> Answer:
        self.asked.append(offset)
        self.clock.t += self.cost_ms / 1000
        suggestion = self.wrong or TEXT[offset:offset + self.ahead]
        return Answer(suggestion, self.passes)

    def idle(self, uri, text, offset, answer, cancel) -> int:
        self.idle_calls += 1
        return 1


def _buffer_is_right(engine: Engine) -> None:
    # every request was asked at an offset inside the typed region
    assert all(START <= o <= END for o in engine.asked)


def test_a_fast_engine_shows_every_suggestion_after_the_debounce_and_its_cost():
    clock = FakeClock()
    engine = Engine(clock, cost_ms=20.0, wrong="zzz")
    result = replay(engine, "u", TEXT, START, END, USER, clock=clock)
    assert result.typed_chars == END - START and result.accepted_chars == 0
    assert [r.ready_ms for r in result.requests] == [pytest.approx(70.0)] * (END - START)
    assert engine.idle_calls == END - START  # idle time after each answer
    _buffer_is_right(engine)


def test_a_suggestion_of_the_true_text_is_accepted_with_tab():
    clock = FakeClock()
    engine = Engine(clock, cost_ms=20.0, ahead=5)
    result = replay(engine, "u", TEXT, START, END, USER, clock=clock)
    assert result.tabs > 0 and result.accepted_chars + result.typed_chars == END - START
    assert result.typed_chars == 0 and result.accepted_chars <= 5 * result.tabs  # the last up to its line end
    _buffer_is_right(engine)


def test_a_request_slower_than_typing_is_superseded_and_never_shown():
    clock = FakeClock()
    engine = Engine(clock, cost_ms=500.0)
    result = replay(engine, "u", TEXT, START, END, USER, clock=clock)
    assert all(r.ready_ms is None for r in result.requests[:-1])  # each one overtaken by the next keystroke
    summary = summarize([result])
    assert summary["superseded"] >= len(result.requests) - 1
    assert summary["shown"] + summary["superseded"] == summary["requests"]


def test_the_summary_counts_passes_per_keystroke_and_zero_pass_answers():
    clock = FakeClock()
    engine = Engine(clock, cost_ms=10.0, wrong="q", passes=0)
    result = replay(engine, "u", TEXT, START, END, USER, clock=clock)
    summary = summarize([result])
    assert summary["zero_pass_share"] == 1.0
    assert summary["passes_per_keystroke"] == pytest.approx(result.idle_passes / result.typed_chars)
    assert summary["latency_ms"]["p50"] == pytest.approx(60.0)


def test_the_summary_keeps_answers_served_without_a_pass_apart_from_decoded_ones():
    clock = FakeClock()
    cheap = summarize([replay(Engine(clock, cost_ms=10.0, wrong="q", passes=0), "u", TEXT, START, END, USER, clock=clock)])
    clock = FakeClock()
    dear = summarize([replay(Engine(clock, cost_ms=30.0, wrong="q", passes=2), "u", TEXT, START, END, USER, clock=clock)])
    assert cheap["latency_ms_no_pass"]["n"] == cheap["shown"] and cheap["latency_ms_decoded"]["n"] == 0
    assert cheap["latency_ms_no_pass"]["p50"] == pytest.approx(60.0) and cheap["latency_ms_decoded"]["p95"] is None
    assert dear["latency_ms_decoded"]["n"] == dear["shown"] and dear["latency_ms_decoded"]["p95"] == pytest.approx(80.0)


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(range(1, 101)), 95) == 95
    assert percentile(list(range(1, 101)), 50) == 50
