"""The indexed workspace files: their records, the static segment and the dynamic set.

A part of ``store.NgramIndex``; "lock held" means the caller holds the index's lock. Each live
file has a ``FileRecord`` in ``files``, keyed by its absolute path, and its tokens in one of two
places: the *static* segment (``suffix.StaticSegment``, suffix-sorted; a changed or removed file
is tombstoned there), or the *dynamic* set of recently (re)indexed files, looked up as one
``scan_set.ScanSet``. Every writer calls ``after_write`` when done: a merge when due, then the
dynamic set's lookup structure. Why, and the invariants ``check`` asserts: docs/design/index.md,
"Workspace files".
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .candidates import Candidates
from .clock import Clock
from .config import IndexConfig
from .draft import Source
from .evicted import EvictedFiles
from .scan_set import ScanSet, SetCache, assert_same_scan_set
from .suffix import StaticSegment


@dataclass(slots=True)  # one per workspace file: slots keep the record small (72 bytes, not ~350)
class FileRecord:
    stamp: int  # recency for ranking
    used: int  # LRU clock for eviction
    n_tokens: int
    slot: int = -1  # index in the static segment; -1 while in the dynamic set
    tokens: np.ndarray | None = None  # [n] int32, dynamic set only


# stats()["index_bytes"]: the Python objects per workspace file besides its tokens: its record
# with the three integers it holds (past the small-int cache), and, in the dynamic set, the
# ndarray header of its tokens.
_FILE_RECORD_BYTES = sys.getsizeof(FileRecord(0, 0, 0)) + 3 * sys.getsizeof(2**40)
ARRAY_HEADER_BYTES = sys.getsizeof(np.zeros(0, np.int32)[:0])  # a view: the header without data

DynamicSnapshot = list[tuple[str, FileRecord, np.ndarray]]  # (key, record, tokens), oldest first


class WorkspaceFiles:
    """The file table, the links into it, the static segment and the dynamic set."""

    def __init__(self, cfg: IndexConfig, lock: threading.RLock, clock: Clock, evicted: EvictedFiles) -> None:
        self._cfg, self._lock, self._clock, self._evicted = cfg, lock, clock, evicted
        self.files: dict[str, FileRecord] = {}
        # files indexed under a path that reaches them through a symlink (a link to a file in an
        # ignored folder: the scan indexes the link): key -> real path, and back
        self._link_target: dict[str, str] = {}
        self._links_of: dict[str, set[str]] = {}
        self.tokens = 0  # live workspace tokens
        self.dyn_tokens = 0
        # Running totals for stats()["index_bytes"] (a walk over every file under the lock stalled
        # lookups: docs/design/index.md, "Memory accounting"): the dynamic set's token arrays with
        # their headers, the live files' path strings, the paths only the static key list holds.
        self.dyn_bytes = 0
        self._path_bytes = 0
        self._dead_path_bytes = 0
        self._static: StaticSegment | None = None
        self._static_keys: list[str] = []
        self._static_live = np.zeros(0, bool)
        self._static_stamps = np.zeros(0, np.int64)
        self.static_dead = 0  # tombstoned tokens in the static segment
        self._merging = False
        # Bumped on every change to the dynamic set's files: the cached set is current when built
        # at this version; an older one is still usable (see ``dynamic_set``).
        self._dyn_version = 0
        self.dynamic = SetCache()
        self.merges = 0

    # ---- the file table ---------------------------------------------------
    def install(self, key: str, tokens: np.ndarray) -> None:
        """Put a file's new tokens in the dynamic set (lock held)."""
        self.remove(key)
        t = self._clock.tick()
        self.files[key] = FileRecord(stamp=t, used=t, n_tokens=len(tokens), tokens=tokens)
        self.tokens += len(tokens)
        self.dyn_tokens += len(tokens)
        self.dyn_bytes += tokens.nbytes + ARRAY_HEADER_BYTES
        self._path_bytes += sys.getsizeof(key)
        self._dyn_version += 1

    def remove_all(self, keys: Iterable[str]) -> int:
        """Remove each of ``keys`` that is indexed (lock held); returns how many were."""
        n = 0
        for key in keys:
            n += key in self.files
            self.remove(key)
        return n

    def remove(self, key: str) -> None:
        self._evicted.forget(key)
        self._forget_link(key)
        f = self.files.pop(key, None)
        if f is None:
            return
        self.tokens -= f.n_tokens
        self._path_bytes -= sys.getsizeof(key)
        if f.slot >= 0:
            self._static_live[f.slot] = False
            self.static_dead += f.n_tokens
            self._dead_path_bytes += sys.getsizeof(self._static_keys[f.slot])
        else:
            self.dyn_tokens -= f.n_tokens
            self.dyn_bytes -= f.tokens.nbytes + ARRAY_HEADER_BYTES
            self._dyn_version += 1
            if self.dynamic.set is not None:
                if self.dyn_tokens == 0:
                    self.dynamic.clear()  # nothing left to look up: free it now
                else:
                    self.dynamic.set.kill(key, f)

    def evict_lru(self, over: int) -> int:
        """Evict least recently used files until ``over`` tokens are gone (lock held); they are
        remembered to come back. Returns the tokens still over."""
        for key, f in sorted(self.files.items(), key=lambda kv: kv[1].used):
            if over <= 0:
                break
            self.remove(key)
            self._evicted.remember(key, f.n_tokens, f.used)
            over -= f.n_tokens
        return over

    def mark_used(self, key: str) -> None:
        """A lookup drafted from ``key``: it moves last in the eviction order (lock held)."""
        f = self.files.get(key)
        if f is not None:
            f.used = self._clock.tick()

    # ---- links ------------------------------------------------------------
    def links_to(self, path: str | os.PathLike, below: bool = False) -> list[str]:
        """The indexed files whose path reaches the file ``path`` through a symlink (a link to a
        file the workspace ignores: its changes come as the target's events only); ``below``: to
        files under the folder ``path`` too (a folder moved away sends one event, for itself)."""
        if not self._links_of:  # the common case, without the lock (file events call this for every path)
            return []
        key = os.path.abspath(os.fspath(path))
        under = key.rstrip(os.sep) + os.sep
        with self._lock:
            found = set(self._links_of.get(key, ()))
            if below:
                for real, links in self._links_of.items():
                    if real.startswith(under):
                        found |= links
            return sorted(found)

    def note_link(self, key: str, real: str) -> None:
        """``key`` was (re)indexed, its real path ``real`` (lock held)."""
        self._forget_link(key)
        if real != key:
            self._link_target[key] = real
            self._links_of.setdefault(real, set()).add(key)

    def _forget_link(self, key: str) -> None:
        real = self._link_target.pop(key, None)
        if real is not None:
            links = self._links_of[real]
            links.discard(key)
            if not links:
                del self._links_of[real]

    # ---- merging ----------------------------------------------------------
    def static_tokens(self) -> int:
        s = self._static
        return 0 if s is None else s.num_tokens - self.static_dead

    def after_write(self, threshold: int | None = None) -> None:
        """Called by every writer of workspace files, outside the lock: merge when due, then
        build the dynamic set's lookup structure (even if the merge failed)."""
        try:
            self._maybe_merge(threshold)
        finally:
            self.warm_dynamic()

    def _maybe_merge(self, threshold: int | None = None) -> None:
        threshold = self._cfg.merge_tokens if threshold is None else threshold
        with self._lock:
            due = self.dyn_tokens > threshold or self.static_dead > max(self._cfg.merge_tokens,
                                                                        self.static_tokens() // 4)
        if due:
            self.merge()

    def merge(self) -> None:
        """Rebuild the static segment from all live workspace files (drops tombstones,
        absorbs the dynamic set). The sort runs outside the lock."""
        with self._lock:
            if self._merging:
                return
            self._merging = True
            snap = []  # (key, FileRecord, tokens)
            for key, f in self.files.items():
                toks = f.tokens if f.slot < 0 else self._static.doc_tokens(f.slot)
                snap.append((key, f, toks))
        try:
            seg = StaticSegment([t for _, _, t in snap], self._cfg.max_match)
        except BaseException:
            with self._lock:
                self._merging = False
            raise
        with self._lock:
            live = np.zeros(len(snap), bool)
            dead_path_bytes = 0
            for i, (key, f, _) in enumerate(snap):
                if self.files.get(key) is f:  # unchanged since the snapshot
                    live[i] = True
                    if f.slot < 0:
                        self.dyn_tokens -= f.n_tokens
                        self.dyn_bytes -= f.tokens.nbytes + ARRAY_HEADER_BYTES
                    f.slot, f.tokens = i, None
                else:
                    dead_path_bytes += sys.getsizeof(key)
            self._dead_path_bytes = dead_path_bytes
            self._static = seg
            self._static_keys = [key for key, _, _ in snap]
            self._static_live = live
            self._static_stamps = np.array([f.stamp for _, f, _ in snap], np.int64)
            self.static_dead = int(seg.lengths[~live].sum()) if len(snap) else 0
            self._dyn_version += 1
            self.dynamic.clear()  # its files are in the static segment now
            self.merges += 1
            self._merging = False

    # ---- the dynamic set --------------------------------------------------
    def _dynamic_snapshot(self) -> DynamicSnapshot:
        """Each file in the dynamic set, oldest first (lock held)."""
        return [(key, f, f.tokens) for key, f in self.files.items() if f.slot < 0]

    def make_dynamic(self, base: ScanSet | None, snap: DynamicSnapshot) -> ScanSet:
        """The dynamic set's ScanSet: ``base`` extended when files were only added since it,
        else built anew. Reads the snapshot's arrays and stamps only (a stamp never changes),
        so it may run outside the lock."""
        files = [f for _, f, _ in snap]
        if base is not None and base.extends(files):
            new = snap[len(base.members):]
            return base.extended([t for _, _, t in new], [f.stamp for _, f, _ in new], [k for k, _, _ in new],
                                 [f for _, f, _ in new])
        return ScanSet([t for _, _, t in snap], [f.stamp for f in files], [k for k, _, _ in snap],
                       self._cfg.min_n, self._cfg.keyed_min_tokens, members=files)

    def dynamic_set(self) -> ScanSet:
        """The dynamic set's ScanSet for a lookup (lock held): the last one built, which misses
        the files added since and tombstones those removed (so a removed file never drafts);
        built here, under the lock, only when there is none (at the start, after a merge)."""
        if self.dynamic.set is None:
            self.dynamic.put(self._dyn_version, self.make_dynamic(None, self._dynamic_snapshot()))
        return self.dynamic.set

    def warm_dynamic(self) -> None:
        """Build the dynamic set's ScanSet now, outside the lock, so that no lookup has to
        (one built in a lookup stalled it: docs/design/index.md, "Scan sets built outside the lock")."""
        with self._lock:
            version = self._dyn_version
            if not self.dyn_tokens or self.dynamic.current(version):
                return
            base, snap = self.dynamic.set, self._dynamic_snapshot()
        try:
            built = self.make_dynamic(base, snap)
        except BaseException:
            with self._lock:  # never leave lookups on an old set for good: the next one builds
                self.dynamic.clear()
            raise
        with self._lock:
            if self._dyn_version == version:  # else a later change made it stale: its writer builds
                self.dynamic.put(version, built)

    # ---- candidates -------------------------------------------------------
    def dynamic_candidates(self, ctx: np.ndarray, min_n: int) -> Candidates | None:
        """The longest match's occurrences in the dynamic set (lock held)."""
        if not self.dyn_tokens:
            return None
        s = self.dynamic_set()
        m, p, d = s.match(ctx, min_n)
        return Candidates.in_scan_set(s, m, p, d, Source.WORKSPACE, True) if m >= min_n and len(p) else None

    def static_candidates(self, ctx: np.ndarray, at_least: int) -> Candidates | None:
        """The occurrences of the longest match of at least ``at_least`` tokens in a live file of
        the static segment (lock held); at most ``max_candidates`` of them."""
        seg = self._static
        if seg is None or not self._static_live.any():
            return None
        m, ip = seg.longest(ctx)
        while m >= at_least:
            lo, hi = seg.range_of(ctx, m, ip)
            p = seg.positions(lo, hi, self._cfg.max_candidates)
            d = seg.doc_of(p)
            keep = self._static_live[d]
            if keep.any():
                p, d = p[keep], d[keep]
                return Candidates(m, Source.WORKSPACE, seg.first_tokens(p), self._static_stamps[d],
                                  p - seg.starts[d], lambda j, kk: seg.continuation(int(p[j]), kk),
                                  self._static_keys, d)
            m -= 1  # every occurrence of this length is in a removed file
        return None

    # ---- bookkeeping bytes and invariants ---------------------------------
    @property
    def nbytes(self) -> int:
        """Token arrays (static segment with its sort and per-file arrays, dynamic set, cached set)
        and per-file bookkeeping (``file_bytes``)."""
        seg = self._static
        static_bytes = 0 if seg is None else seg.nbytes + self._static_live.nbytes + self._static_stamps.nbytes
        return static_bytes + self.dyn_bytes + self.dynamic.nbytes + self.file_bytes()

    @property
    def static_num_tokens(self) -> int:
        return 0 if self._static is None else self._static.num_tokens

    def file_bytes(self) -> int:
        """The Python objects that track workspace files (lock held): each live file's path
        string and record, the dict holding them, and the static segment's key list (with
        the paths of its removed files, which only it still holds). From running totals:
        constant time, whatever the number of files."""
        return (sys.getsizeof(self.files) + self._path_bytes + len(self.files) * _FILE_RECORD_BYTES
                + sys.getsizeof(self._static_keys) + self._dead_path_bytes)

    def walk_file_bytes(self) -> tuple[int, int]:
        """``file_bytes()`` and the dynamic set's array bytes, from a walk over every file (lock
        held; for ``check``, which compares the running totals with it)."""
        dead = (k for k, alive in zip(self._static_keys, self._static_live.tolist()) if not alive)
        file_bytes = (sys.getsizeof(self.files) + sum(map(sys.getsizeof, self.files))
                      + len(self.files) * _FILE_RECORD_BYTES
                      + sys.getsizeof(self._static_keys) + sum(map(sys.getsizeof, dead)))
        dyn_bytes = sum(f.tokens.nbytes + ARRAY_HEADER_BYTES for f in self.files.values() if f.tokens is not None)
        return file_bytes, dyn_bytes

    def check(self) -> None:
        """Assert the running byte totals equal a walk, and the cached dynamic set: its live
        documents are exactly those still dynamic; built at the current version, it equals one
        built from scratch (lock held)."""
        assert self.walk_file_bytes() == (self.file_bytes(), self.dyn_bytes)
        got = self.dynamic.set
        if got is None:
            return
        for key, member, alive in zip(got.keys, got.members, got.live.tolist()):
            assert alive == (self.files.get(key) is member and member.slot < 0), key
        if self.dynamic.current(self._dyn_version):  # built by extension or anew == from scratch
            assert got.dead == 0
            assert_same_scan_set(got, self.make_dynamic(None, self._dynamic_snapshot()))
