"""Pure functions over token arrays: longest-suffix matching and drafting.

Vocabulary (see ``draft``): the *context* is the token ids the model has seen;
an *occurrence* is a position ``p`` in an indexed array such that the
``match_len`` tokens before ``p`` equal the context's last ``match_len`` tokens,
and ``p`` has a *continuation* (``a[p]`` is a real token). Documents are
concatenated with the separator ``SEP`` (-1), which equals no token, so no
match and no continuation crosses a document edge.

Worked example. ``a = [5, 6, 7, 8, 5, 6, 9]``, context ``[1, 5, 6]``,
``min_n = 2``: ``scan_longest`` returns ``match_len = 2`` and occurrences
``[2, 6]`` (followed by 7 and 9). ``rank_occurrences`` with both from the same
buffer and w=2 picks the later one first; ``build_draft`` with k=3 then gives
branches ``[9]`` and ``[7, 8, 5]``, each with count 1.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .draft import NO_DRAFT, Branch, Draft, Source

SEP = -1  # document separator inside concatenated int32 arrays
_EMPTY = np.zeros(0, np.int64)


def as_tokens(ids, what: str, copy: bool = True) -> np.ndarray:
    """``ids`` as an [n] int32 array of token ids; ValueError naming ``what`` if they are not.
    ``copy`` False: an int32 array given is returned as it is (a lookup's context, read only)."""
    a = np.asarray(ids)
    if not copy and a.dtype == np.int32 and a.ndim == 1:
        # one pass, not min, max and a copy: a negative id read as uint32 is 2**31 or more
        if a.size and int(a.view(np.uint32).max()) >= 2**31 - 1:
            raise ValueError(f"{what} holds token ids outside [0, 2**31 - 1)")
        return a
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-D sequence of integer token ids, got shape {a.shape} dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= 2**31 - 1):
        raise ValueError(f"{what} holds token ids outside [0, 2**31 - 1)")
    return a.astype(np.int32)


def scan_longest(a: np.ndarray, ctx: np.ndarray, min_n: int, narrow: int = 64) -> tuple[int, np.ndarray]:
    """Longest suffix of ``ctx`` occurring in ``a``, and all its occurrences.

    a:   [n] int32, documents separated by SEP
    ctx: [L] int32, the context's last tokens (L is the longest match wanted), all >= 0
    Returns ``(match_len, positions)``: positions are continuation starts,
    ascending; ``(0, [])`` when no suffix of length >= ``min_n`` occurs.

    Narrows token by token while there are many candidates, then compares the
    rest in one [candidates, depth] gather: few numpy calls either way.
    """
    L = len(ctx)
    if L < min_n or len(a) < min_n + 1:
        return 0, _EMPTY
    p = np.flatnonzero(a[:-1] == ctx[-1]) + 1
    if len(p):
        p = p[a[p] != SEP]
    return extend_longest(a, ctx, p, 1, min_n, narrow)


def extend_longest(a: np.ndarray, ctx: np.ndarray, p: np.ndarray, m: int, min_n: int,
                   narrow: int = 64) -> tuple[int, np.ndarray]:
    """``scan_longest`` from candidates ``p`` known to match ``ctx``'s last ``m`` tokens.

    a: [n] int32; ctx: [L] int32; p: [c] int64 positions with a real continuation.
    Returns ``(match_len, positions)`` (positions in the order of ``p``), or ``(0, [])``.
    """
    L = len(ctx)
    while len(p) > narrow and m < L:
        q = p[p > m]
        q = q[a[q - m - 1] == ctx[-m - 1]]
        if not len(q):
            break
        p, m = q, m + 1
    if 0 < len(p) <= narrow and m < L:
        depth = np.arange(m, L)
        idx = p[:, None] - 1 - depth[None, :]  # [c, L - m]
        want = ctx[::-1][m:L]
        eq = (a[np.maximum(idx, 0)] == want[None, :]) & (idx >= 0)
        ext = np.where(eq.all(1), L - m, eq.argmin(1))
        best = int(ext.max())
        p, m = p[ext == best], m + best
    if m < min_n or not len(p):
        return 0, _EMPTY
    return m, p


def continuation(a: np.ndarray, p: int, k: int) -> np.ndarray:
    """Up to ``k`` tokens of ``a`` from ``p``, stopping at SEP or the end. [<=k] int32"""
    seg = a[p : p + k]
    stop = np.flatnonzero(seg == SEP)
    return np.array(seg[: stop[0]] if len(stop) else seg, np.int32)


def rank_occurrences(
    first: np.ndarray,  # [c] int32, the token after each occurrence
    source: np.ndarray,  # [c] int, Source of each occurrence
    stamp: np.ndarray,  # [c] int64, recency of the occurrence's document (higher is newer)
    pos: np.ndarray,  # [c] int64, position inside its document (later is newer)
    w: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Pick up to ``w`` occurrences with distinct first tokens, best first.

    Order: source priority (Source order), then newer document, then later
    position. Occurrences are grouped by their first token; a group is
    represented by its best occurrence and counted by its size. Groups come in
    the order of their best occurrence. Returns ``(rows, counts)``, both [<=w].
    """
    if len(first) == 1:
        return np.zeros(1, np.int64), np.ones(1, np.int64)
    order = np.lexsort((-pos, -stamp, source))
    _, first_at, counts = np.unique(first[order], return_index=True, return_counts=True)
    pick = np.argsort(first_at)[:w]
    return order[first_at[pick]], counts[pick]


def rank_best(groups: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> tuple[int, int, int]:
    """``rank_occurrences(..., w=1)`` over groups without concatenating them.

    groups: ``(source, first[c], stamp[c], pos[c])``, one source per group, c >= 1.
    Returns ``(group index, row in that group, count)``: the best occurrence by
    (source priority, newer document, later position) and how many occurrences in
    all groups share its first token. (source, stamp, pos) never ties: a stamp
    names one document.
    """
    src = min(g[0] for g in groups)
    best = None
    for gi, (s, first, stamp, pos) in enumerate(groups):
        if s != src:
            continue
        newest = np.flatnonzero(stamp == stamp.max())  # any stamp: the clock is not bounded
        j = int(newest[np.argmax(pos[newest])])
        key = (int(stamp[j]), int(pos[j]))
        if best is None or key > best[0]:
            best = (key, gi, j)
    _, gi, j = best
    f = groups[gi][1][j]
    count = sum(int(np.count_nonzero(g[1] == f)) for g in groups)
    return gi, j, count


def build_draft(
    rows: np.ndarray,  # [b] occurrence indices from rank_occurrences
    counts: np.ndarray,  # [b]
    source: np.ndarray,  # [c] Source of each occurrence
    match_len: int,
    k: int,
    tokens_of: Callable[[int, int], np.ndarray],  # (occurrence index, k) -> [<=k] int32
) -> Draft:
    """One branch per picked occurrence: its next ``k`` tokens (fewer at a document end)."""
    branches = []
    for i, c in zip(rows.tolist(), counts.tolist()):
        toks = tokens_of(i, k)
        if len(toks):
            branches.append(Branch(toks, int(c), Source(int(source[i])), match_len))
    return Draft(tuple(branches)) if branches else NO_DRAFT
