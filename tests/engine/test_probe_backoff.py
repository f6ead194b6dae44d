"""ProbeBackoff (daemon/engine/proposer.py): the lookup is asked less often while no draft
token of it is accepted, and every pass again once one is."""

from __future__ import annotations

import numpy as np

from ngramd.daemon.engine.proposer import ProbeBackoff
from ngramd.index.draft import NO_DRAFT, Branch, Draft, Source

DRAFT = Draft((Branch(tokens=np.array([5, 6], dtype=np.int32), count=1, source=Source.BUFFER, match_len=4),))


class Scripted:
    """Answers each asked pass from ``hits`` (the pass numbers that find a draft); notes them."""

    def __init__(self, hits: set[int]) -> None:
        self.hits = hits
        self.asked: list[int] = []
        self.feedbacks: list[int] = []
        self.pass_no = 0

    def propose(self, context, k, w):
        self.asked.append(self.pass_no)
        return DRAFT if self.pass_no in self.hits else NO_DRAFT

    def feedback(self, n):
        self.feedbacks.append(n)


def _run(inner: Scripted, backoff: ProbeBackoff, passes: int, accepted: dict[int, int] | None = None) -> list[int]:
    found = []
    for p in range(passes):
        inner.pass_no = p
        if backoff.propose(np.zeros(4, dtype=np.int32), 8, 1):
            found.append(p)
        backoff.feedback((accepted or {}).get(p, 0))
    return found


def test_a_lookup_that_keeps_missing_is_asked_every_second_then_every_fourth_pass():
    inner = Scripted(hits=set())
    _run(inner, ProbeBackoff(inner), 24)
    assert inner.asked == [0, 1, 2, 4, 6, 8, 12, 16, 20]
    assert len(inner.feedbacks) == 24  # feedback always reaches the lookup


def test_drafts_found_but_not_taken_count_as_misses_and_an_accepted_one_resets():
    inner = Scripted(hits=set(range(100)))  # the lookup always finds something
    found = _run(inner, ProbeBackoff(inner), 16, accepted={12: 3})
    assert inner.asked == [0, 1, 2, 4, 6, 8, 12, 13, 14, 15]
    assert found == inner.asked


def test_an_accepted_token_brings_back_a_probe_every_pass():
    inner = Scripted(hits=set())
    _run(inner, ProbeBackoff(inner), 12, accepted={9: 2})
    assert inner.asked[:7] == [0, 1, 2, 4, 6, 8, 10] and 11 in inner.asked
