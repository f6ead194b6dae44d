"""The static segment: workspace files in one suffix-sorted array.

Documents are concatenated as ``T = SEP d0 SEP d1 ... SEP dN SEP``. Matching
needs the tokens *before* a position, so the segment sorts positions by their
reversed prefix: ``R = T[::-1]`` and entry ``r = len(T) - p`` stands for the
prefix ending at ``p`` read backwards (``R[r] = T[p-1]``, ``R[r+1] = T[p-2]``...).
That is a suffix array of ``R``, sorted to depth ``max_match`` only.

The longest suffix of a context that occurs is then one binary search for the
reversed context: the entries next to the insertion point share the longest
prefix with it. Two more searches give the range of all entries sharing that
prefix. ``R`` is kept as big-endian uint32 bytes so that comparing two byte
slices compares token sequences (Python's C bisect does the search).

Memory: 4 bytes of ``R`` + 4 bytes of suffix array per token, plus per-document
offsets. The continuation after ``p`` is read back from ``R``.

Worked example: docs ``[[5, 6, 7], [5, 6, 9]]`` give ``T = [S, 5, 6, 7, S, 5, 6, 9, S]``.
Context ``[4, 5, 6]``: the reversed context ``[6, 5, 4]`` shares ``[6, 5]`` with
the entries for ``p = 3`` and ``p = 7``; ``lookup`` returns match length 2 and
positions ``[7, 3]`` (in suffix order), continuations 7 and 9.
"""

from __future__ import annotations

import array
import bisect

import numpy as np

SEP_U32 = 0xFFFFFFFF


def _dense_rank(key: np.ndarray) -> np.ndarray:
    """Ranks 0..u-1 of ``key`` preserving order (equal keys share a rank). [n] int64"""
    order = np.argsort(key)  # any order of equal keys gives the same ranks
    sk = key[order]
    step = np.empty(len(key), np.int64)
    step[0] = 0
    np.not_equal(sk[1:], sk[:-1], out=step[1:])
    rank = np.empty(len(key), np.int64)
    rank[order] = np.cumsum(step)
    return rank


def sort_prefixes(r: np.ndarray, entries: np.ndarray, depth: int) -> np.ndarray:
    """Entries of ``r`` sorted by ``r[e : e + depth]`` (ties by ``e``). Prefix doubling.

    r:       [n] uint32, padded at the end with ``depth`` SEP_U32 so every slice is full
    entries: [m] int64 start positions to sort
    """
    rank = _dense_rank(r.astype(np.int64))
    h = 1
    n = len(r)
    while h < depth:
        nxt = np.empty(n, np.int64)
        nxt[: n - h] = rank[h:]
        nxt[n - h :] = rank.max() + 1
        rank = _dense_rank(rank * (n + 1) + nxt)
        h *= 2
        if rank.max() == n - 1:  # all distinct: deeper tokens cannot reorder anything
            break
    return entries[np.argsort(rank[entries], kind="stable")]


class StaticSegment:
    """An immutable suffix-sorted segment over a list of documents (see module doc)."""

    def __init__(self, docs: list[np.ndarray], depth: int):
        """docs: list of [n_i] int32 token arrays (ids in [0, 2**31 - 1))."""
        self.depth = depth
        lengths = np.fromiter((len(d) for d in docs), np.int64, len(docs))
        # starts[i]: index in T of doc i's first token; T[starts[i] - 1] is SEP.
        self.starts = np.concatenate([[1], 1 + np.cumsum(lengths + 1)[:-1]]).astype(np.int64) if docs else np.ones(0, np.int64)
        self.lengths = lengths
        t = np.full(int(lengths.sum()) + len(docs) + 1, SEP_U32, np.uint32)
        for s, d in zip(self.starts, docs):
            t[s : s + len(d)] = d
        self.n = len(t)
        r = np.concatenate([t[::-1], np.full(depth, SEP_U32, np.uint32)])
        # p with a real token before and after it: every token but each doc's first.
        real = t != SEP_U32
        p = np.flatnonzero(real[1:] & real[:-1]) + 1
        sa = sort_prefixes(r, (self.n - p).astype(np.int64), depth) if len(p) else p
        self._rb = r.astype(">u4").tobytes()
        self._r = np.frombuffer(self._rb, ">u4")  # view, no copy
        self._sa = array.array("i", sa.astype(np.int32).tobytes())
        self._sa_np = np.frombuffer(self._sa, np.int32) if len(self._sa) else np.zeros(0, np.int32)
        # bucket[t]..bucket[t+1]: the entries whose first reversed token is t (the
        # context's last token), so the binary searches start in a small range.
        firsts = r[sa].astype(np.int64) if len(sa) else np.zeros(0, np.int64)
        top = int(firsts.max()) + 2 if len(firsts) else 1
        self._bucket = np.searchsorted(firsts, np.arange(top + 1)).astype(np.int64).tolist() if len(firsts) else [0, 0]

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def nbytes(self) -> int:
        # the bucket list: a pointer (8) + a small int object (~32) per vocabulary entry
        return len(self._rb) + self._sa_np.nbytes + self.starts.nbytes + self.lengths.nbytes + 40 * len(self._bucket)

    def doc_tokens(self, i: int) -> np.ndarray:
        """Document i's tokens. [n_i] int32"""
        s, n = int(self.starts[i]), int(self.lengths[i])
        return self._r[self.n - s - n : self.n - s][::-1].astype(np.int32)

    def continuation(self, p: int, k: int) -> np.ndarray:
        """Up to k tokens of T from p, stopping at SEP. [<=k] int32"""
        r = self.n - p
        seg = self._r[max(r - k, 0) : r][::-1]
        stop = np.flatnonzero(seg == SEP_U32)
        return (seg[: stop[0]] if len(stop) else seg).astype(np.int32)

    def first_tokens(self, p: np.ndarray) -> np.ndarray:
        """T[p] for each position (the first continuation token). [c] int32"""
        return self._r[self.n - 1 - p].astype(np.int32)

    def _lcp(self, r: int, q: bytes) -> int:
        """Tokens in common between entry r and q, by bisection on slice equality."""
        rb, base = self._rb, 4 * r
        lo, hi = 0, len(q) // 4  # lo tokens agree; more than hi cannot
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if rb[base + 4 * lo : base + 4 * mid] == q[4 * lo : 4 * mid]:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _bucket_of(self, token: int) -> tuple[int, int]:
        b = self._bucket
        if token + 1 >= len(b):
            return 0, 0
        return b[token], b[token + 1]

    def longest(self, ctx: np.ndarray) -> tuple[int, int]:
        """Length of the longest suffix of ctx that occurs, and the insertion point.

        ctx: [L] int32, L <= depth, all >= 0.
        """
        sa, rb = self._sa, self._rb
        if not len(sa) or not len(ctx):
            return 0, 0
        blo, bhi = self._bucket_of(int(ctx[-1]))
        if blo == bhi:
            return 0, blo
        q = ctx[::-1].astype(">u4").tobytes()
        nb = len(q)
        ip = bisect.bisect_left(sa, q, blo, bhi, key=lambda r: rb[4 * r : 4 * r + nb])
        m = 0
        if ip > blo:
            m = self._lcp(sa[ip - 1], q)
        if ip < bhi:
            m = max(m, self._lcp(sa[ip], q))
        return m, ip

    def range_of(self, ctx: np.ndarray, m: int, ip: int | None = None) -> tuple[int, int]:
        """Suffix-array range [lo, hi) of entries whose prefix is ctx's last m tokens reversed.

        ``ip``: the insertion point ``longest(ctx)`` returned. The whole reversed
        context starts with those m tokens, so lo <= ip <= hi: each search is halved."""
        sa, rb = self._sa, self._rb
        q = ctx[len(ctx) - m :][::-1].astype(">u4").tobytes()
        nb = len(q)
        key = lambda r: rb[4 * r : 4 * r + nb]  # noqa: E731
        blo, bhi = self._bucket_of(int(ctx[-1]))
        lo = bisect.bisect_left(sa, q, blo, bhi if ip is None else ip, key=key)
        hi = bisect.bisect_right(sa, q, lo if ip is None else ip, bhi, key=key)
        return lo, hi

    def positions(self, lo: int, hi: int, cap: int) -> np.ndarray:
        """Positions p in T of entries lo..hi, at most ``cap`` (evenly spaced). [<=cap] int64"""
        if hi - lo > cap:
            sel = lo + (np.arange(cap, dtype=np.int64) * (hi - lo)) // cap
            r = self._sa_np[sel]
        else:
            r = self._sa_np[lo:hi]
        return self.n - r.astype(np.int64)

    def doc_of(self, p: np.ndarray) -> np.ndarray:
        """Document index of each position. [c] int64"""
        return np.searchsorted(self.starts, p, "right") - 1
