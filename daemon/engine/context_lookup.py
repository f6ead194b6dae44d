"""The context itself as a draft source: prompt lookup, and the request's own output.

A model often repeats what it wrote moments ago: the next of several similar
lines, the next entry of a table, or (small models) a loop. Those tokens are in
no indexed document until the request ends, so the n-gram index cannot draft
them; prompt lookup (Saxena 2023) can, because it searches the context itself.

``ContextLookup`` wraps another proposer. At each step it finds the most recent
earlier occurrence of the longest suffix (``min_n``..``max_n`` tokens) of the
context that *ends* at or after ``search_from``, and drafts what followed it.
With ``search_from`` = the prompt's length only the generated output is
searched (the index holds the document the prompt came from); with 0 it is
plain prompt lookup (no index). The draft with the longer match goes first:
the inner proposer's (the index's, with its counts) on a tie. When the
occurrence is so recent that fewer than ``k`` tokens follow it, the context is
repeating with period ``p = len(context) - end``, and the draft continues that
period (``np.resize``).

Worked example (token ids). prompt ``[9]``, generated ``[1, 2, 3, 1, 2, 3, 1, 2]``:
context ``[9, 1, 2, 3, 1, 2, 3, 1, 2]``. The longest suffix that occurs earlier
is ``[1, 2, 3, 1, 2]`` (n=5), ending at 6, so the continuation is context[6:9] =
``[3, 1, 2]``, repeated with period 3: for k=5 the draft is ``[3, 1, 2, 3, 1]``.
"""

from __future__ import annotations

import numpy as np

from ngramd.daemon.engine.proposer import NullProposer, Proposer
from ngramd.index.draft import Branch, Draft, Source


def longest_recent_match(context: np.ndarray, start: int, min_n: int, max_n: int) -> tuple[int, int]:
    """(end, n): the latest ``end`` in [start + 1, len - 1] where ``context[end-n:end]`` equals the last n tokens.

    ``context``: [t] int. n is as long as possible (<= ``max_n``); the occurrence
    must end before the context does, so at least one token follows it. Returns
    (-1, 0) when no suffix of ``min_n`` tokens recurs.
    Example: longest_recent_match(np.array([5, 1, 2, 7, 1, 2]), 0, 2, 8) == (3, 2).
    """
    assert context.ndim == 1 and min_n >= 1
    t = len(context)
    if t < min_n + 1:
        return -1, 0
    lo = max(start, 0)
    ends = np.flatnonzero(context[lo: t - 1] == context[-1]) + lo + 1  # candidate ends (exclusive)
    n = 1
    for j in range(1, max_n):
        keep = ends[(ends - 1 - j >= 0)]
        keep = keep[context[keep - 1 - j] == context[t - 1 - j]]
        if len(keep) == 0:
            break
        ends, n = keep, j + 1
    if n < min_n or len(ends) == 0:
        return -1, 0
    return int(ends[-1]), n


class ContextLookup:
    """Drafts from the context from ``search_from`` on, besides an inner proposer.

    ``source`` labels its branches: ``Source.OUTPUT`` when only the generated
    output is searched, ``Source.BUFFER`` for prompt lookup over a prompt taken
    from the buffer.
    """

    def __init__(self, inner: Proposer | None = None, search_from: int = 0, min_n: int = 3, max_n: int = 16,
                 source: Source = Source.OUTPUT) -> None:
        assert search_from >= 0 and 1 <= min_n <= max_n
        self.inner = inner if inner is not None else NullProposer()
        self.search_from = search_from
        self.min_n = min_n
        self.max_n = max_n
        self.source = source
        self._used_inner = False

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        inner = self.inner.propose(context, k, w)
        self._used_inner = bool(inner)
        if k <= 0 or len(context) <= self.search_from:
            return inner
        ctx = np.asarray(context)
        end, n = longest_recent_match(ctx, self.search_from, self.min_n, self.max_n)
        if end < 0 or (inner and inner.best.match_len >= n):
            return inner
        own = Branch(tokens=np.resize(ctx[end:], k).astype(np.int32), count=1, source=self.source, match_len=n)
        rest = tuple(b for b in inner.branches if int(b.tokens[0]) != int(own.tokens[0]))  # branches diverge at once
        self._used_inner = False
        return Draft((own,) + rest[: max(w - 1, 0)])

    def feedback(self, num_accepted: int) -> None:
        if self._used_inner:
            self.inner.feedback(num_accepted)


def prompt_lookup() -> ContextLookup:
    """Prompt lookup over the whole context (no index): 2..8-token matches, as in Saxena 2023."""
    return ContextLookup(None, search_from=0, min_n=2, max_n=8, source=Source.BUFFER)
