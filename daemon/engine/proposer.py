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

from index.draft import NO_DRAFT, Draft


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
