"""ScanSet: several token arrays matched as one.

The other open buffers, the history and the dynamic set of workspace files are
each many small documents. A ``ScanSet`` concatenates them, SEP before, between
and after (``cat = [SEP, d0, SEP, d1, SEP]``), so one lookup covers them all: a
``keyed.KeyIndex`` once the set has ``keyed_min`` tokens, ``ngram.scan_longest``
below that. ``starts[i]`` is where document i begins in ``cat``.

Sets are immutable once built, but for their tombstones: a lookup may use one
while another thread builds its successor. ``extended`` builds the successor of
a set that only gained documents at its end (a workspace scan adds a batch of
files at a time) in O(n) instead of re-sorting every key. A document removed
meanwhile is ``kill``-ed (under its owner's lock): lookups skip its occurrences
until the successor is built. A match whose occurrences are all dead counts as
no match, even if a shorter live one exists: a transient miss, never a draft
from a removed document.

Worked example: documents [5, 6] and [7] give cat [SEP, 5, 6, SEP, 7, SEP] and
starts [1, 4]; a match at position 4 lies in document 1, at offset 0.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import ngram
from .keyed import KeyIndex, key_len

_SEP = np.full(1, ngram.SEP, np.int32)


def _layout(docs: Sequence[np.ndarray], first_start: int, lead: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(each doc followed by SEP, concatenated, after one SEP if ``lead``; start of each doc,
    the first at ``first_start``). One concatenation: the only copy of the tokens."""
    lengths = np.fromiter((len(d) for d in docs), np.int64, len(docs))
    starts = (first_start + np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64))[: len(docs)]
    parts: list[np.ndarray] = [_SEP] if lead else []
    for d in docs:
        parts += [d, _SEP]
    cat = np.concatenate(parts).astype(np.int32, copy=False) if parts else np.zeros(0, np.int32)
    return cat, starts


class ScanSet:
    """Documents concatenated with SEP, matched as one (see module docstring)."""

    __slots__ = ("cat", "starts", "stamps", "keys", "members", "index", "min_n", "keyed_min", "live", "dead",
                 "_slot_of")

    def __init__(self, docs: Sequence[np.ndarray], stamps: Sequence[int], keys: Sequence[Any],
                 min_n: int, keyed_min: int, members: Sequence[Any] = ()):
        """docs: [n_i] int32 arrays; stamps: recency per doc; keys: a name per doc (or None);
        members: the objects the docs came from, for ``extends`` (optional)."""
        self.cat, starts = _layout(docs, 1, lead=True)  # cat: [sum n_i + D + 1] int32
        self.starts = starts  # [D] int64
        self.stamps = np.asarray(stamps, np.int64)  # [D]
        self.keys = list(keys)
        self.members = list(members)
        self.min_n, self.keyed_min = min_n, keyed_min
        self.index = KeyIndex(self.cat, key_len(min_n)) if len(self.cat) >= keyed_min else None
        self.live = np.ones(len(self.starts), bool)  # [D] False: removed since the set was built
        self.dead = 0
        self._slot_of: dict[Any, int] | None = None  # key -> document index, built at the first kill

    def extends(self, members: Sequence[Any]) -> bool:
        """True when ``members`` begins with exactly this set's members (same objects, same order)."""
        mine = self.members
        return len(mine) <= len(members) and all(a is b for a, b in zip(mine, members))

    def extended(self, docs: Sequence[np.ndarray], stamps: Sequence[int], keys: Sequence[Any],
                 members: Sequence[Any]) -> "ScanSet":
        """A new set: this one's documents, then ``docs``. Equal to building it from scratch
        (tombstones included, though a set with dead members is not ``extends``-ed by its owner)."""
        body, starts = _layout(docs, len(self.cat))
        out = ScanSet.__new__(ScanSet)
        out.cat = np.concatenate([self.cat, body])
        out.starts = np.concatenate([self.starts, starts])
        out.stamps = np.concatenate([self.stamps, np.asarray(stamps, np.int64)])
        out.keys = self.keys + list(keys)
        out.members = self.members + list(members)
        out.min_n, out.keyed_min = self.min_n, self.keyed_min
        if self.index is not None:
            out.index = self.index.appended(out.cat, len(self.cat))
        else:
            out.index = KeyIndex(out.cat, key_len(self.min_n)) if len(out.cat) >= self.keyed_min else None
        out.live = np.concatenate([self.live, np.ones(len(docs), bool)])
        out.dead = self.dead
        out._slot_of = None
        return out

    def kill(self, key: Any, member: Any) -> None:
        """Document ``key`` (built from ``member``) was removed: its occurrences no longer match."""
        if self._slot_of is None:
            self._slot_of = {k: i for i, k in enumerate(self.keys)}
        i = self._slot_of.get(key)
        if i is not None and self.members[i] is member and self.live[i]:
            self.live[i] = False
            self.dead += 1

    @property
    def nbytes(self) -> int:
        return self.cat.nbytes + self.starts.nbytes + self.stamps.nbytes + (self.index.nbytes if self.index else 0)

    def match(self, ctx: np.ndarray, min_n: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(match_len, positions in cat, document index of each)."""
        if self.index is not None:
            m, p = self.index.match(self.cat, ctx, min_n)
        else:
            m, p = ngram.scan_longest(self.cat, ctx, min_n)
        d = np.searchsorted(self.starts, p, "right") - 1
        if self.dead and len(d):
            keep = self.live[d]
            p, d = p[keep], d[keep]
            if not len(p):
                return 0, p, d
        return m, p, d


class SetCache:
    """One cached ``ScanSet`` with the key it was built for (its sources' state); each source of
    the index owns one, so a lookup rebuilds only a set whose sources changed."""

    __slots__ = ("key", "set")

    def __init__(self) -> None:
        self.key: Any = None
        self.set: ScanSet | None = None

    def current(self, key: Any) -> bool:
        return self.set is not None and self.key == key

    def put(self, key: Any, built: ScanSet) -> None:
        self.key, self.set = key, built

    def clear(self) -> None:
        self.key, self.set = None, None

    def get_or_build(self, key: Any, make: Callable[[], ScanSet]) -> ScanSet:
        if not self.current(key):
            self.put(key, make())
        return self.set

    @property
    def nbytes(self) -> int:
        return 0 if self.set is None else self.set.nbytes


def assert_same_scan_set(got: ScanSet, want: ScanSet) -> None:
    """``got`` holds what ``want``, built from scratch, holds (for the index's invariant checks)."""
    assert np.array_equal(got.cat, want.cat) and np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.stamps, want.stamps) and got.keys == want.keys
    assert (got.index is None) == (want.index is None)
    if got.index is not None:
        assert np.array_equal(got.index.keys, want.index.keys)
        assert np.array_equal(got.index.pos, want.index.pos)
