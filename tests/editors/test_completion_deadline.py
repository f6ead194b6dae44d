"""lsp/deadline.py: the completion deadline is timeoutMs stretched to what the daemon's answers
cost, doubled after a completion that got no answer in time, and bounded."""

from __future__ import annotations

import pytest

from ngramd.lsp.deadline import CEILING_S, MARGIN, CompletionDeadline


def stats(ms: float, first_token_ms: float, forward_passes: int) -> dict:
    return {"ms": ms, "first_token_ms": first_token_ms, "forward_passes": forward_passes, "generated": 10}


def test_the_setting_is_the_deadline_before_any_answer() -> None:
    assert CompletionDeadline().seconds(8000, 64) == 8.0


def test_a_quick_machine_keeps_the_setting() -> None:
    d = CompletionDeadline()
    d.answered(0.4, stats(ms=350, first_token_ms=150, forward_passes=11))  # 20 ms a pass
    # 64 tokens at worst: 0.05 s waiting + 0.15 s first token + 64 * 0.02 s = 1.48 s, well inside 8 s
    assert d.seconds(8000, 64) == 8.0


def test_a_busy_machine_stretches_the_deadline_to_its_worst_case_completion() -> None:
    d = CompletionDeadline()
    # 2.6 s first token, 200 ms a pass, 1 s queued behind other work
    d.answered(1.0 + 4.6, stats(ms=4600, first_token_ms=2600, forward_passes=11))
    want = MARGIN * (1.0 + 2.6 + 64 * 0.2)
    assert d.seconds(8000, 64) == pytest.approx(want)
    # fewer tokens asked, less time needed: the setting again
    assert d.seconds(8000, 8) == pytest.approx(max(8.0, MARGIN * (1.0 + 2.6 + 8 * 0.2)))


def test_the_slowest_recent_answer_counts_and_old_ones_age_out() -> None:
    d = CompletionDeadline()
    d.answered(10.0, stats(ms=10000, first_token_ms=3000, forward_passes=8))  # 1 s a pass
    slow = d.seconds(8000, 16)
    d.answered(0.3, stats(ms=300, first_token_ms=100, forward_passes=11))
    assert d.seconds(8000, 16) == slow  # one quick answer does not forget a slow one
    for _ in range(8):
        d.answered(0.3, stats(ms=300, first_token_ms=100, forward_passes=11))
    assert d.seconds(8000, 16) == 8.0


def test_no_answer_in_time_doubles_the_next_deadline_and_an_answer_takes_it_back() -> None:
    d = CompletionDeadline()
    d.timed_out()
    assert d.seconds(8000, 64) == 16.0
    d.timed_out()
    assert d.seconds(8000, 64) == 32.0
    for _ in range(10):
        d.timed_out()
    assert d.seconds(8000, 64) == CEILING_S  # a hung daemon is still given up on
    d.answered(0.5, stats(ms=400, first_token_ms=100, forward_passes=31))  # 10 ms a pass
    assert d.seconds(8000, 64) == 8.0


def test_the_setting_wins_above_the_ceiling_and_is_never_shortened() -> None:
    d = CompletionDeadline()
    d.timed_out()
    assert d.seconds(300_000, 64) == 300.0
    d.answered(0.1, stats(ms=50, first_token_ms=20, forward_passes=3))
    assert d.seconds(300_000, 64) == 300.0
    assert d.seconds(100, 64) >= 0.1


@pytest.mark.parametrize("bad", [None, "x", {}, {"ms": 100}, stats(ms=-1, first_token_ms=0, forward_passes=2),
                                 stats(ms=100, first_token_ms=50, forward_passes=0),
                                 {"ms": True, "first_token_ms": 1, "forward_passes": 2}])
def test_answers_without_usable_figures_change_nothing_but_the_misses(bad) -> None:
    d = CompletionDeadline()
    d.timed_out()
    d.answered(30.0, bad)
    assert d.misses == 0
    assert d.seconds(8000, 64) == 8.0


def test_another_daemon_starts_from_the_setting() -> None:
    d = CompletionDeadline()
    d.answered(20.0, stats(ms=20000, first_token_ms=5000, forward_passes=16))
    d.timed_out()
    assert d.seconds(8000, 64) > 8.0
    d.forget()
    assert d.seconds(8000, 64) == 8.0
