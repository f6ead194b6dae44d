"""A sorted n-gram key index over one token array, kept up to date by splices.

``ngram.scan_longest`` compares the whole array on every lookup. For a buffer
of 20k tokens, or the concatenated other buffers, history and recently changed
files, a ``KeyIndex`` finds the candidates instead by binary search:

- every *position* ``p`` (a continuation start, as in ``ngram``: ``a[p]`` is a
  real token) whose ``K`` preceding tokens are real gets the *key* of those
  tokens, ``K = key_len(min_n)`` (``min(min_n, 2)``): ``a[p-1]`` for K=1, ``a[p-2] * 2**31 + a[p-1]``
  for K=2 (exact, no hashing: token ids are < 2**31);
- ``keys`` is sorted, ``pos`` holds the positions in the same order.

A lookup is two ``searchsorted`` for the context's last K tokens, then
``ngram.extend_longest`` on those candidates only.

Invariant (``check`` asserts it; ``KeyIndex(a, K)`` is the rebuild path): the
multiset of (key, position) pairs equals the one built from scratch from the
current array. ``splice`` keeps it after ``a[lo:hi]`` was replaced by ``n_new``
tokens: only positions whose key window or continuation touches the replaced
span, ``[lo, hi + K]`` in old coordinates, are dropped; positions after it are
shifted; the new ones ``[lo, lo + n_new + K]`` are inserted. All numpy, O(n)
(docs/benchmarks.md at 53c478e: an edit in a 20k-token buffer costs ~0.2 ms more with it).

Worked example (K=2): ``a = [5, 6, 7, 5, 6]`` has positions 2 (key of [5, 6],
continues with 7), 3 (key of [6, 7]) and 4 (key of [7, 5]); position 5 would be
[5, 6] but has no continuation. Context ``[1, 5, 6]``: the key of [5, 6] finds position 2, match 2.
"""

from __future__ import annotations

import numpy as np

from .ngram import SEP, extend_longest

_EMPTY = np.zeros(0, np.int64)


def key_len(min_n: int) -> int:
    """Tokens per key for an index that must find matches of at least ``min_n`` tokens."""
    return min(min_n, 2)


def _keys_at(a: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """Keys of the k tokens before each position. p: [c] int64 (all >= k). [c] int64"""
    if k == 1:
        return a[p - 1].astype(np.int64)
    return (a[p - 2].astype(np.int64) << 31) | a[p - 1].astype(np.int64)


def _valid(a: np.ndarray, lo: int, hi: int, k: int) -> np.ndarray:
    """Positions p in [lo, hi] with a real continuation and k real tokens before. [c] int64"""
    lo, hi = max(lo, k), min(hi, len(a) - 1)
    if hi < lo:
        return _EMPTY
    p = np.arange(lo, hi + 1, dtype=np.int64)
    ok = a[lo : hi + 1] != SEP
    for d in range(1, k + 1):
        ok &= a[lo - d : hi + 1 - d] != SEP
    return p[ok]


class KeyIndex:
    """Sorted (key, position) pairs of one array (see module docstring)."""

    __slots__ = ("k", "keys", "pos")

    def __init__(self, a: np.ndarray, k: int):
        """a: [n] int32 (documents separated by SEP); k: 1 or 2 key tokens."""
        assert k in (1, 2), k
        self.k = k
        p = _valid(a, 0, len(a) - 1, k)
        keys = _keys_at(a, p, k)
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]  # [c] int64 sorted
        self.pos = p[order]  # [c] int64

    def splice(self, a: np.ndarray, lo: int, hi: int, n_new: int) -> None:
        """The array was ``old[:lo] + new + old[hi:]`` with ``len(new) == n_new``; ``a`` is the result."""
        k = self.k
        pos = self.pos
        keep = (pos < lo) | (pos > hi + k)
        keys, pos = self.keys[keep], pos[keep]
        delta = n_new - (hi - lo)
        if delta:
            pos[pos > lo] += delta  # kept positions past lo lie past the replaced span
        p = _valid(a, lo, lo + n_new + k, k)
        if len(p):
            nk = _keys_at(a, p, k)
            order = np.argsort(nk, kind="stable")
            nk, p = nk[order], p[order]
            at = np.searchsorted(keys, nk)
            keys, pos = np.insert(keys, at, nk), np.insert(pos, at, p)
        self.keys, self.pos = keys, pos

    def appended(self, a: np.ndarray, n_old: int) -> "KeyIndex":
        """A new index of ``a``, which is this index's array with tokens appended after ``n_old``.

        The old array must end with SEP (as concatenated document sets do), so no
        old position's key or continuation changes: O(n) instead of a re-sort.
        This index is left untouched (lookups may be using it meanwhile).
        """
        assert n_old == 0 or a[n_old - 1] == SEP, "appending needs a SEP at the old end"
        p = _valid(a, n_old, len(a) - 1, self.k)
        nk = _keys_at(a, p, self.k)
        order = np.argsort(nk, kind="stable")
        nk, p = nk[order], p[order]
        at = np.searchsorted(self.keys, nk, "right")  # after equal old keys: old positions stay first
        out = KeyIndex.__new__(KeyIndex)
        out.k, out.keys, out.pos = self.k, np.insert(self.keys, at, nk), np.insert(self.pos, at, p)
        return out

    def match(self, a: np.ndarray, ctx: np.ndarray, min_n: int) -> tuple[int, np.ndarray]:
        """Same result as ``ngram.scan_longest(a, ctx, min_n)``: (match_len, ascending positions).

        ctx: [L] int32, L >= min_n >= self.k, all >= 0.
        """
        k = self.k
        if len(ctx) < max(min_n, k):
            return 0, _EMPTY
        q = int(ctx[-1]) if k == 1 else (int(ctx[-2]) << 31) | int(ctx[-1])
        keys = self.keys
        lo = int(keys.searchsorted(q, "left"))
        hi = int(keys.searchsorted(q, "right"))
        if lo == hi:
            return 0, _EMPTY
        m, p = extend_longest(a, ctx, self.pos[lo:hi], k, min_n)
        if m and len(p) > 1:
            p = np.sort(p)
        return m, p

    def check(self, a: np.ndarray) -> None:
        """Assert the invariant against a fresh build (for tests)."""
        fresh = KeyIndex(a, self.k)
        got = np.lexsort((self.pos, self.keys))
        assert np.array_equal(self.keys[got], fresh.keys) and np.array_equal(self.pos[got], fresh.pos)
        assert np.all(np.diff(self.keys) >= 0)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.pos.nbytes
