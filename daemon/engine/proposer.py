"""Proposers: the seam between drafting and verifying.

A proposer has two methods: ``propose(context, k, w) -> Draft`` (at most ``w``
branches of at most ``k`` tokens continuing ``context``, or ``NO_DRAFT``) and
``feedback(num_accepted)`` (how many draft tokens the last pass kept). The
engine works with any proposer: the n-gram index, the context itself
(daemon/engine/context_lookup.py), a fixed original text (speculative edits), or
hand-written drafts in tests.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ngramd.index.draft import NO_DRAFT, Draft


class Proposer(Protocol):
    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:  # context: [n] int32
        ...

    def feedback(self, num_accepted: int) -> None:
        ...


class NullProposer:
    """Never drafts (plain decoding through the same loop)."""

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        return NO_DRAFT

    def feedback(self, num_accepted: int) -> None:
        pass


class IndexProposer:
    """Drafts from the n-gram index (index/lookup.py), current document first."""

    def __init__(self, index: Any, uri: str | None) -> None:
        self.index = index
        self.uri = uri

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        return self.index.propose(context, k, w, current_uri=self.uri)

    def feedback(self, num_accepted: int) -> None:
        pass


class ProbeBackoff:
    """Asks ``inner`` less often while its drafts are not taken: a lookup costs ~0.5 ms a pass
    on the CPU (the index's candidates, the context's matches), 4-6% of a one-token pass of a
    small model on llama.cpp, and in most passes of an ordinary completion it finds nothing, or
    nothing the policy finds worth a longer pass.

    After ``MISSES`` probes in a row with no draft token accepted, it asks every 2nd pass, after
    twice as many every 4th (``MAX_GAP``); an accepted token makes it ask every pass again. A pass
    it skips drafts nothing, which plain decoding also does: the output is unchanged, only a
    draft may start a few tokens later."""

    MISSES = 3
    MAX_GAP = 4

    def __init__(self, inner: Proposer) -> None:
        self.inner = inner
        self._misses = 0  # probes in a row with no accepted draft token
        self._wait = 0  # passes left to skip before the next probe
        self._probed = False  # whether this pass asked ``inner``

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        self._probed = self._wait == 0
        if not self._probed:
            self._wait -= 1
            return NO_DRAFT
        return self.inner.propose(context, k, w)

    def feedback(self, num_accepted: int) -> None:
        if num_accepted:
            self._misses = self._wait = 0
        elif self._probed:
            self._misses += 1
            if self._misses >= self.MISSES:
                # skip 1 pass after MISSES misses, 3 after twice as many (every 2nd, then every 4th pass)
                self._wait = min(self.MAX_GAP - 1, 2 ** ((self._misses - self.MISSES) // self.MISSES + 1) - 1)
        self.inner.feedback(num_accepted)
