"""Proposers: the seam between drafting and verifying.

A proposer has two methods: ``propose(context, k, w) -> Draft`` (at most ``w``
branches of at most ``k`` tokens continuing ``context``, or ``NO_DRAFT``) and
``feedback(num_accepted)`` (how many draft tokens the last pass kept). The
engine works with any proposer: the n-gram index, the context itself, a fixed
original text (speculative edits), or hand-written drafts in tests.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from index.draft import NO_DRAFT, Branch, Draft, Source


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
    """Drafts from the n-gram index (index/store.py), current document first."""

    def __init__(self, index: Any, uri: str | None) -> None:
        self.index = index
        self.uri = uri

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        return self.index.propose(context, k, w, current_uri=self.uri)

    def feedback(self, num_accepted: int) -> None:
        pass


def longest_suffix_match(context: np.ndarray, reference: np.ndarray, min_n: int, max_n: int
                         ) -> tuple[int, int]:
    """Most recent end position in ``reference`` of the longest suffix of ``context`` (>= min_n tokens).

    ``context``: [n] int, ``reference``: [m] int. Returns (end index in reference, match length);
    (-1, 0) if no suffix of length min_n occurs. The occurrence must be followed by at least one token.
    """
    for n in range(min(max_n, len(context)), min_n - 1, -1):
        pattern = context[-n:]
        if len(reference) <= n:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(reference[:-1], n)
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if len(hits):
            return int(hits[-1]) + n, n
    return -1, 0


class SequenceProposer:
    """Prompt lookup: drafts what followed the context's suffix in a fixed token sequence.

    With ``reference=None`` the context itself is searched (excluding its own
    suffix), i.e. prompt lookup decoding (Saxena 2023). Used when no index is
    given (completions, and the fallback of speculative edits).
    """

    def __init__(self, reference: np.ndarray | None = None, min_n: int = 2, max_n: int = 8,
                 source: Source = Source.BUFFER) -> None:
        self.reference = None if reference is None else np.asarray(reference, dtype=np.int64)
        self.min_n = min_n
        self.max_n = max_n
        self.source = source

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        if k <= 0 or len(context) < self.min_n:
            return NO_DRAFT
        ctx = np.asarray(context, dtype=np.int64)
        ref = ctx if self.reference is None else self.reference
        end, n = longest_suffix_match(ctx, ref, self.min_n, self.max_n)
        if end < 0:
            return NO_DRAFT
        tokens = ref[end: end + k]
        if len(tokens) == 0:
            return NO_DRAFT
        return Draft((Branch(tokens=tokens.astype(np.int32), count=1, source=self.source, match_len=n),))

    def feedback(self, num_accepted: int) -> None:
        pass
