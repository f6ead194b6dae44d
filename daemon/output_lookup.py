"""The request's own output as a draft source: what the index cannot hold yet.

A model often repeats what it wrote moments ago: the next of several similar
lines, the next entry of a table, or (small models) a loop. Those tokens are in
no indexed document until the request ends, so the n-gram index cannot draft
them; prompt lookup (Saxena 2023) can, because it searches the context itself.

``OutputLookup`` wraps another proposer. At each step it finds the most recent
earlier occurrence of the longest suffix (``min_n``..``max_n`` tokens) of the
context that *ends* inside the generated output, and drafts what followed it.
The draft with the longer match goes first: the index's (with its counts) on a
tie. When the occurrence is so recent that fewer than ``k`` tokens follow it,
the output is repeating with period ``p = len(context) - end``, and the draft
continues that period (``np.resize``).

Worked example (token ids). prompt ``[9]``, generated ``[1, 2, 3, 1, 2, 3, 1, 2]``:
context ``[9, 1, 2, 3, 1, 2, 3, 1, 2]``. The longest suffix that occurs earlier
is ``[1, 2, 3, 1, 2]`` (n=5), ending at 6, so the continuation is context[6:9] =
``[3, 1, 2]``, repeated with period 3: for k=5 the draft is ``[3, 1, 2, 3, 1]``.
"""

from __future__ import annotations

import numpy as np

from daemon.proposer import Proposer
from index.draft import Branch, Draft, Source


def longest_recent_match(context: np.ndarray, start: int, min_n: int, max_n: int) -> tuple[int, int]:
    """(end, n): the latest ``end`` in [start + 1, len - 1] where ``context[end-n:end]`` equals the last n tokens.

    ``context``: [t] int. n is as long as possible (<= ``max_n``); the occurrence
    must end before the context does, so at least one token follows it. Returns
    (-1, 0) when no suffix of ``min_n`` tokens recurs.
    Example: longest_recent_match([5, 1, 2, 7, 1, 2], 0, 2, 8) == (3, 2).
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


class OutputLookup:
    """Drafts from the generated output (``Source.OUTPUT``) besides an inner proposer.

    ``prompt_len``: tokens of the context before generation started. Matches
    must end inside the generated tokens; the prompt is the inner proposer's
    (the index holds the document it came from).
    """

    def __init__(self, inner: Proposer, prompt_len: int, min_n: int = 3, max_n: int = 16) -> None:
        assert prompt_len >= 0 and 1 <= min_n <= max_n
        self.inner = inner
        self.prompt_len = prompt_len
        self.min_n = min_n
        self.max_n = max_n
        self._used_inner = False

    def propose(self, context: np.ndarray, k: int, w: int) -> Draft:
        inner = self.inner.propose(context, k, w)
        self._used_inner = bool(inner)
        if k <= 0 or len(context) <= self.prompt_len:
            return inner
        ctx = np.asarray(context)
        end, n = longest_recent_match(ctx, self.prompt_len, self.min_n, self.max_n)
        if end < 0 or (inner and inner.best.match_len >= n):
            return inner
        own = Branch(tokens=np.resize(ctx[end:], k).astype(np.int32), count=1, source=Source.OUTPUT, match_len=n)
        rest = tuple(b for b in inner.branches if int(b.tokens[0]) != int(own.tokens[0]))  # branches diverge at once
        self._used_inner = False
        return Draft((own,) + rest[: max(w - 1, 0)])

    def feedback(self, num_accepted: int) -> None:
        if self._used_inner:
            self.inner.feedback(num_accepted)

