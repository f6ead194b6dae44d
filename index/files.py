"""The indexed workspace files: their records, the dynamic set, eviction.

Part of ``store.NgramIndex`` (a mixin: its state is declared in ``NgramIndex.__init__``;
"lock held" means the caller holds ``NgramIndex._lock``).

Each live file has a record (``_File``) in ``_files``, keyed by its absolute path,
and its tokens in one of two places:

- the *static* segment (``suffix.StaticSegment``, suffix-sorted), where the file has
  a ``slot``; a changed or removed file is tombstoned there (``_static_live``);
- the *dynamic* set of recently (re)indexed files, which keep their own tokens and
  are looked up as one ``scan_set.ScanSet``: the writer builds it after each change,
  outside the lock, extending the last one when files were only added
  (``_warm_dynamic``).

Every writer of workspace files calls ``_after_write`` when done (store.py, with
the rebuild paths): when the dynamic set or the tombstones grow, ``merge``
rebuilds the static segment from all live files, building outside the lock so
lookups keep working; then the writer builds the dynamic set's ScanSet.

Files evicted for lack of room are remembered (``_evicted_paths``, bounded) until they come
back (``scans._restore_evicted``, once buffers shrink or indexed files are removed), are indexed or removed again, or
their folder is forgotten or no longer lists them.

Invariant (``NgramIndex._check_invariants`` asserts it): a cached dynamic ScanSet
built at the current ``_dyn_version`` equals one built from scratch, and in any
cached one exactly the files still in the dynamic set are live; the running totals
behind ``stats()["index_bytes"]`` (``_file_bytes()``, ``_dyn_bytes``) equal a walk
over the files (``_walk_file_bytes``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .scan_set import ScanSet


@dataclass(slots=True)  # one per workspace file: slots keep the record small (72 bytes, not ~350)
class _File:
    stamp: int  # recency for ranking
    used: int  # LRU clock for eviction
    n_tokens: int
    slot: int = -1  # index in the static segment; -1 while in the dynamic set
    tokens: np.ndarray | None = None  # [n] int32, dynamic set only


# stats()["index_bytes"]: the Python objects per workspace file besides its tokens: its record
# with the three integers it holds (past the small-int cache), and, in the dynamic set, the
# ndarray header of its tokens.
_FILE_RECORD_BYTES = sys.getsizeof(_File(0, 0, 0)) + 3 * sys.getsizeof(2**40)
ARRAY_HEADER_BYTES = sys.getsizeof(np.zeros(0, np.int32)[:0])  # a view: the header without data

# Files evicted for lack of room that are remembered to come back once there is room again; past
# this many, the longest evicted are forgotten (a rescan of their folder finds them again).
MAX_EVICTED_REMEMBERED = 50_000
# After a buffer shrank, they come back only into room past a reserve of the bound's 1/this, kept
# for buffers to grow into (a close or a removal gives them the whole room).
RESTORE_RESERVE_SHARE = 16


class WorkspaceFiles:
    """The workspace files' part of ``NgramIndex`` (see module docstring)."""

    # ---- the file table ---------------------------------------------------
    def has_file(self, path: str | os.PathLike) -> bool:
        """Whether the file ``path`` is indexed now."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            return key in self._files

    def _install(self, key: str, tokens: np.ndarray, as_of: int | None = None) -> None:
        """Put a file's new tokens, read at tick ``as_of`` (None: now), in the dynamic set (lock held)."""
        self._remove(key)
        t = self._tick()
        self._record_change(key, as_of)
        self._files[key] = _File(stamp=t, used=t, n_tokens=len(tokens), tokens=tokens)
        self._ws_tokens += len(tokens)
        self._dyn_tokens += len(tokens)
        self._dyn_bytes += tokens.nbytes + ARRAY_HEADER_BYTES
        self._path_bytes += sys.getsizeof(key)
        self._dyn_version += 1

    def _remove_all(self, keys: Iterable[str]) -> int:
        """Remove each of ``keys`` that is indexed (lock held); returns how many were."""
        n = 0
        for key in keys:
            n += key in self._files
            self._remove(key)
        return n

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

    def _note_link(self, key: str, real: str) -> None:
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

    def _remove(self, key: str) -> None:
        self._evicted_paths.pop(key, None)  # indexed again or removed: nothing to bring back
        self._forget_link(key)
        f = self._files.pop(key, None)
        if f is None:
            return
        self._ws_tokens -= f.n_tokens
        self._path_bytes -= sys.getsizeof(key)
        if f.slot >= 0:
            self._static_live[f.slot] = False
            self._static_dead += f.n_tokens
            self._dead_path_bytes += sys.getsizeof(self._static_keys[f.slot])
        else:
            self._dyn_tokens -= f.n_tokens
            self._dyn_bytes -= f.tokens.nbytes + ARRAY_HEADER_BYTES
            self._dyn_version += 1
            hit = self._cache.get("dynamic")
            if hit is not None:
                if self._dyn_tokens == 0:
                    del self._cache["dynamic"]  # nothing left to look up: free it now
                else:
                    hit[1].kill(key, f)

    def _static_tokens(self) -> int:
        s = self._static
        return 0 if s is None else s.num_tokens - self._static_dead

    def _enforce_bound(self) -> bool:
        """Evict least recently used workspace files (remembered: they come back once there is
        room), then the oldest history, until the bound holds (lock held; open buffers are never
        evicted); whether any was. A writer that is no file writer (buffers, history) then calls
        ``_after_write`` too: the cached dynamic set only tombstones an evicted file, and a match
        found only there hid a shorter live one from every lookup until the next file write."""
        over = self._indexed_tokens() - self.cfg.max_indexed_tokens
        if over <= 0 or not (self._files or self._history):
            return False
        for key, f in sorted(self._files.items(), key=lambda kv: kv[1].used):
            if over <= 0:
                break
            self._remove(key)
            self._remember_evicted(key, f)
            self._evicted += 1
            over -= f.n_tokens
        # then the oldest accepted completions: else open buffers and history past the bound kept
        # it exceeded for good, and every file a scan installed was evicted at once
        while over > 0 and self._history:
            old, _ = self._history.popleft()
            self._history_tokens -= len(old)
            over -= len(old)
            self._cache.pop("history", None)
        return True

    # ---- files evicted for lack of room -----------------------------------
    def _remember_evicted(self, key: str, f: _File) -> None:
        """``key`` was evicted (lock held): it comes back once there is room (``_restore_evicted``),
        with its place in the LRU order. Else one big open buffer emptied the workspace for good."""
        self._evicted_paths[key] = (f.n_tokens, f.used)
        self._evicted_min_tokens = min(self._evicted_min_tokens, f.n_tokens)
        if len(self._evicted_paths) > MAX_EVICTED_REMEMBERED:
            del self._evicted_paths[next(iter(self._evicted_paths))]  # the longest evicted

    def _evicted_that_fit(self, tried: set[str], reserve: bool = False) -> list[str]:
        """Evicted files not yet ``tried`` whose tokens fit in the room left now (less the reserve,
        with ``reserve``), the most recently evicted (the most recently used) first, one batch at
        most (lock held). Adds them to ``tried``."""
        room = self._restorable_room(reserve)
        if room <= 0 or room < self._evicted_min_tokens:  # no walk over them all at each keystroke in a big buffer
            return []
        batch: list[str] = []
        smallest = None
        for key, (n_tokens, _) in reversed(self._evicted_paths.items()):
            if len(batch) >= self.cfg.batch_files:
                break
            if key in tried:
                continue
            if n_tokens <= room:
                batch.append(key)
                room -= n_tokens
            elif smallest is None or n_tokens < smallest:
                smallest = n_tokens
        if not batch and not tried and smallest is not None:  # each one is larger than the room
            self._evicted_min_tokens = smallest
        tried.update(batch)
        return batch

    def _restorable_room(self, reserve: bool) -> int:
        """Tokens evicted files may take now (lock held): the room left, less, with ``reserve``,
        1/RESTORE_RESERVE_SHARE of the bound kept for buffers to grow into: after a buffer shrank,
        a file brought back into room that one typed token would take was evicted again by the
        next keystroke, and read back at the next backspace."""
        kept = self.cfg.max_indexed_tokens // RESTORE_RESERVE_SHARE if reserve else 0
        return self.cfg.max_indexed_tokens - self._indexed_tokens() - kept

    def _evicted_under(self, prefix: str) -> list[str]:
        """The evicted files under the folder ``prefix`` (lock held); ``_remove_all`` forgets them."""
        return [k for k in self._evicted_paths if k.startswith(prefix)]

    # ---- the dynamic set --------------------------------------------------
    def _dynamic_snapshot(self) -> list[tuple[str, _File, np.ndarray]]:
        """(key, file, tokens) of each file in the dynamic set, oldest first (lock held)."""
        return [(key, f, f.tokens) for key, f in self._files.items() if f.slot < 0]

    def _make_dynamic(self, base: ScanSet | None, snap: list[tuple[str, _File, np.ndarray]]) -> ScanSet:
        """The dynamic set's ScanSet: ``base`` extended when files were only added since it,
        else built anew. Reads the snapshot's arrays and stamps only (a stamp never changes),
        so it may run outside the lock."""
        files = [f for _, f, _ in snap]
        if base is not None and base.extends(files):
            new = snap[len(base.members):]
            return base.extended([t for _, _, t in new], [f.stamp for _, f, _ in new], [k for k, _, _ in new],
                                 [f for _, f, _ in new])
        return ScanSet([t for _, _, t in snap], [f.stamp for f in files], [k for k, _, _ in snap],
                       self.cfg.min_n, self.cfg.keyed_min_tokens, members=files)

    def _dynamic_set(self) -> ScanSet:
        """The dynamic set's ScanSet for a lookup (lock held).

        The writer builds it after each change (``_warm_dynamic``). Until that is
        done, lookups use the last one built: it misses the files added since and
        its removed files are tombstoned, so a removed file never drafts. Only when
        there is none (at the start, after a merge) does a lookup build it, under the lock.
        """
        hit = self._cache.get("dynamic")
        if hit is not None:
            return hit[1]
        built = self._make_dynamic(None, self._dynamic_snapshot())
        self._cache["dynamic"] = (self._dyn_version, built)
        return built

    def _warm_dynamic(self) -> None:
        """Build the dynamic set's ScanSet now, outside the lock, so that no lookup has to.

        While a workspace is scanned the dynamic set grows up to the size of the
        static segment; built inside the first lookup after each batch, it stalled
        that lookup for up to 0.76 s (docs/benchmarks.md, "Lookups while a big
        workspace is indexed").
        """
        with self._lock:
            version = self._dyn_version
            hit = self._cache.get("dynamic")
            if not self._dyn_tokens or (hit is not None and hit[0] == version):
                return
            base, snap = (hit[1] if hit is not None else None), self._dynamic_snapshot()
        try:
            built = self._make_dynamic(base, snap)
        except BaseException:
            with self._lock:  # never leave lookups on an old set for good: the next one builds
                self._cache.pop("dynamic", None)
            raise
        with self._lock:
            if self._dyn_version == version:  # else a later change made it stale: its writer builds
                self._cache["dynamic"] = (version, built)

    # ---- bookkeeping bytes ------------------------------------------------
    def _file_bytes(self) -> int:
        """The Python objects that track workspace files (lock held): each live file's path
        string and record, the dict holding them, and the static segment's key list (with
        the paths of its removed files, which only it still holds). From running totals:
        constant time, whatever the number of files."""
        return (sys.getsizeof(self._files) + self._path_bytes + len(self._files) * _FILE_RECORD_BYTES
                + sys.getsizeof(self._static_keys) + self._dead_path_bytes)

    def _walk_file_bytes(self) -> tuple[int, int]:
        """``_file_bytes()`` and the dynamic set's array bytes, from a walk over every file (lock
        held; for ``_check_invariants``, which compares the running totals with it)."""
        dead = (k for k, alive in zip(self._static_keys, self._static_live.tolist()) if not alive)
        file_bytes = (sys.getsizeof(self._files) + sum(map(sys.getsizeof, self._files))
                      + len(self._files) * _FILE_RECORD_BYTES
                      + sys.getsizeof(self._static_keys) + sum(map(sys.getsizeof, dead)))
        dyn_bytes = sum(f.tokens.nbytes + ARRAY_HEADER_BYTES for f in self._files.values() if f.tokens is not None)
        return file_bytes, dyn_bytes
