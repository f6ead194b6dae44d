"""NgramIndex: the live n-gram index over buffers, history and workspace files.

Sources and where their tokens live:

- open buffers (``Document``: chunked, re-tokenized per edit), each with a
  ``keyed.KeyIndex`` spliced on every edit (buffers under ``keyed_min_tokens``
  are scanned directly); the buffer named ``current_uri`` is Source.BUFFER, the
  others OPEN_BUFFER (concatenated into one cached, keyed array while the current
  buffer is edited; rebuilt by the first lookup after another buffer changes or the
  current one switches, before it takes the lock);
- accepted completions (``add_history``), a bounded list, concatenated and keyed
  (rebuilt by the next lookup after each addition, likewise outside the lock);
- workspace files: a *static* suffix-sorted segment (``suffix.StaticSegment``)
  with tombstones for changed or removed files, plus a small *dynamic* set of
  recently (re)indexed files, concatenated and keyed (``scan_set.ScanSet``; the
  writer builds it after each change, outside the lock, extending the last one
  when files were only added). When the dynamic set or the tombstones grow,
  ``merge`` rebuilds the static segment from all live files, building outside
  the lock so lookups keep working (``files``; ``merge`` lives here,
  with ``rebuild``).

Invariant: the index proposes exactly what an index built from scratch from
the same documents (same texts, same recency order) proposes, as long as no
lookup meets more than ``max_candidates`` static occurrences (``rebuild()``
and the property test check it), once every writer call has returned. While
one runs, lookups may miss what it is adding (a changed static file is
tombstoned before the dynamic set holding its new text is built; files added
during a merge wait for its end); they never draft from a removed file. Of a
file's read (outside the lock) and a later change of it, the newer state wins,
whichever finishes first (``scans``).

Recency: every (re)indexed document gets a fresh stamp from one counter; a
higher stamp ranks first among equal matches of one source. Eviction uses a
separate least-recently-used clock (indexing a file or drafting from it uses it).

Thread safety: one lock. Tokenization of files, merges and the ScanSets (dynamic
set, other buffers, history) are built outside it.

Layout: ``NgramIndex`` is assembled from one mixin per part, all over the state
declared in its ``__init__`` and guarded by its lock. This file: the state, the
clock, buffers and history (with the scan sets they give a lookup), the rebuild
paths (``merge``, ``rebuild``) with the invariant check, and ``stats``. ``files``:
the workspace files (file table, dynamic set, eviction, bookkeeping bytes).
``scans``: reading files in (``index_file``, ``index_workspace``, ...; newest
wins). ``lookup``: ``propose``.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import ngram
from .background import BackgroundJob
from .config import IndexConfig
from .document import Document, TokenizeBatch
from .files import ARRAY_HEADER_BYTES, WorkspaceFiles, _File
from .keyed import KeyIndex, key_len
from .lookup import Lookup
from .ngram import as_tokens
from .scan_set import ScanSet
from .scans import WorkspaceScans
from .suffix import StaticSegment

__all__ = ["IndexConfig", "NgramIndex"]


@dataclass
class _Buffer:
    doc: Document
    stamp: int
    keys: KeyIndex | None = None  # built once the buffer has keyed_min_tokens (at open or lookup), then spliced

    def match(self, ctx: np.ndarray, min_n: int, keyed_min: int) -> tuple[int, np.ndarray]:
        a = self.doc.tokens
        if self.keys is None:
            if len(a) < keyed_min:
                return ngram.scan_longest(a, ctx, min_n)
            self.keys = KeyIndex(a, key_len(min_n))
        return self.keys.match(a, ctx, min_n)


# stats()["index_bytes"]: per history entry, its tuple and the ndarray header of its tokens.
_HISTORY_ENTRY_BYTES = sys.getsizeof((None, None)) + ARRAY_HEADER_BYTES


def _assert_same_scan_set(got: ScanSet, want: ScanSet) -> None:
    """``got`` holds what ``want``, built from scratch, holds (for ``_check_invariants``)."""
    assert np.array_equal(got.cat, want.cat) and np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.stamps, want.stamps) and got.keys == want.keys
    assert (got.index is None) == (want.index is None)
    if got.index is not None:
        assert np.array_equal(got.index.keys, want.index.keys)
        assert np.array_equal(got.index.pos, want.index.pos)


class NgramIndex(WorkspaceScans, WorkspaceFiles, Lookup):
    """See the module docstring. All public methods are thread-safe."""

    def __init__(self, tokenize_batch: TokenizeBatch, config: IndexConfig | None = None,
                 background_setup: Callable[[], object] | None = None):
        """``background_setup``: called first on a thread the index starts for itself (the
        restore thread: the daemon lowers its priority, as it does its scans')."""
        self.cfg = config or IndexConfig()
        self._tok = tokenize_batch
        self._lock = threading.RLock()
        self._clock = 0  # every stamp, LRU use and newest-wins tick comes from it (_tick)
        # Buffers and history (this file).
        self._buffers: dict[str, _Buffer] = {}
        self._history: deque[tuple[np.ndarray, int]] = deque()
        self._history_tokens = 0
        self._cache: dict[str, object] = {}  # "history", "dynamic", "others": (key, ScanSet)
        # Part of the "others" and "history" keys: bumped when their sources change without new
        # stamps (rebuild() re-tokenizes the buffers), so a set built from an older snapshot no
        # longer matches.
        self._cache_epoch = 0
        # Workspace files (files.py).
        self._files: dict[str, _File] = {}
        # files indexed under a path that reaches them through a symlink (a link to a file in an
        # ignored folder: the scan indexes the link): key -> real path, and back
        self._link_target: dict[str, str] = {}
        self._links_of: dict[str, set[str]] = {}
        self._ws_tokens = 0  # live workspace tokens
        self._dyn_tokens = 0
        # Running totals for stats()["index_bytes"] (a walk over every file, under the lock, took
        # 27 ms at 200K files while lookups waited): the dynamic set's token arrays with their
        # headers, the live files' path strings, and the paths only the static key list still holds.
        self._dyn_bytes = 0
        self._path_bytes = 0
        self._dead_path_bytes = 0
        self._static: StaticSegment | None = None
        self._static_keys: list[str] = []
        self._static_live = np.zeros(0, bool)
        self._static_stamps = np.zeros(0, np.int64)
        self._static_dead = 0  # tombstoned tokens in the static segment
        self._merging = False
        # Bumped on every change to the dynamic set's files. The cached "dynamic" ScanSet is
        # current when built at this version; an older one is still usable: it misses the
        # files added since, and its removed files are tombstoned (see _dynamic_set).
        self._dyn_version = 0
        self._evicted = 0
        # files evicted for lack of room, to index again once there is room: key -> (tokens, LRU
        # clock) at eviction, in eviction order, at most files.MAX_EVICTED_REMEMBERED
        self._evicted_paths: dict[str, tuple[int, int]] = {}
        self._evicted_min_tokens = sys.maxsize  # at most the fewest tokens of any of them (none fits in less room)
        self._restorer = BackgroundJob(self._restore_job, "ngramd-index-restore", background_setup) \
            if self.cfg.restore_in_background else None
        self._restore_whole_room = False  # an ask since the restore thread's last run wanted no reserve
        self._merges = 0
        # Workspace scans (scans.py).
        self._roots: set[str] = set()  # folders index_workspace has scanned, each ending in a separator
        self._skipped: Counter = Counter()
        self.last_skip: str | None = None  # the message of the last file not indexed
        # Newest wins (scans.py): the tick of each key's last change, and of each
        # folder whose files were all dropped, kept while any reader is in flight.
        self._changed: dict[str, int] = {}
        self._changed_under: dict[str, int] = {}
        self._readers = 0

    # ---- clock ------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    # ---- buffers ----------------------------------------------------------
    def open_buffer(self, uri: str, text: str) -> None:
        """Index ``text`` as the open buffer ``uri`` (replacing any earlier text)."""
        if not isinstance(uri, str):
            raise ValueError(f"buffer uri must be str, got {type(uri).__name__}")
        doc = Document.from_text(text, self._tok)  # tokenize outside the lock
        keys = KeyIndex(doc.tokens, key_len(self.cfg.min_n)) if len(doc.tokens) >= self.cfg.keyed_min_tokens else None
        with self._lock:
            old = self._buffers.get(uri)
            shrank = old is not None and len(old.doc.tokens) > len(doc.tokens)
            self._buffers[uri] = _Buffer(doc, self._tick(), keys)
            evicted = self._enforce_bound()
        if evicted:
            self._after_write()
        if shrank:
            self._restore_evicted(reserve=True)

    def edit_buffer(self, uri: str, start: int, end: int, new_text: str, result: str | None = None) -> None:
        """Replace characters ``[start, end)`` of buffer ``uri`` (str indices) by ``new_text``.

        ``result``, when the caller already has it, is the buffer's whole text
        after the edit: kept as is (one string shared with the caller) instead
        of spliced anew."""
        with self._lock:
            b = self._buffers.get(uri)
            if b is None:
                raise ValueError(f"buffer {uri!r} is not open")
        # Tokenize outside the lock: in a long single-line buffer (minified code) the edited
        # chunk is the whole line, and every lookup would wait for it.
        doc = b.doc
        plan = doc.plan_edit(start, end, new_text, self._tok, result)
        with self._lock:
            if self._buffers.get(uri) is b and b.doc is doc and doc.version == plan[0]:
                splice = doc.apply(plan)
            else:  # edited, reopened or closed meanwhile: redo it on what is there now
                b = self._buffers.get(uri)
                if b is None:
                    raise ValueError(f"buffer {uri!r} is not open")
                splice = b.doc.edit(start, end, new_text, self._tok, result)
            if b.keys is not None:
                b.keys.splice(b.doc.tokens, *splice)
            b.stamp = self._tick()
            lo, hi, n_new = splice
            evicted = self._enforce_bound()
        if evicted:
            self._after_write()
        if n_new < hi - lo:  # it shrank
            self._restore_evicted(reserve=True)

    def close_buffer(self, uri: str) -> None:
        """Forget the buffer ``uri``; files evicted to make room for it come back (read outside
        the lock, on the caller's thread or, with ``cfg.restore_in_background``, the restore thread)."""
        with self._lock:
            closed = self._buffers.pop(uri, None)
        if closed is not None:
            self._restore_evicted()

    def buffer_text(self, uri: str) -> str:
        with self._lock:
            b = self._buffers.get(uri)
            if b is None:
                raise ValueError(f"buffer {uri!r} is not open")
            return b.doc.text

    def buffer_tokens(self, uri: str) -> np.ndarray:
        """The buffer's token ids (a copy). [n] int32"""
        with self._lock:
            b = self._buffers.get(uri)
            if b is None:
                raise ValueError(f"buffer {uri!r} is not open")
            return b.doc.tokens.copy()

    # ---- history ----------------------------------------------------------
    def add_history(self, token_ids) -> None:
        """Remember an accepted completion; the oldest go past max_history_tokens."""
        t = as_tokens(token_ids, "history")
        if not len(t):
            return
        t = t[-self.cfg.max_history_tokens :]
        with self._lock:
            self._history.append((t, self._tick()))
            self._history_tokens += len(t)
            while self._history_tokens > self.cfg.max_history_tokens:
                old, _ = self._history.popleft()
                self._history_tokens -= len(old)
            self._cache.pop("history", None)
            evicted = self._enforce_bound()
        if evicted:  # on the model's thread: the lookup structure only, a merge waits for a file write
            self._warm_dynamic()

    def _indexed_tokens(self) -> int:
        return self._ws_tokens + self._history_tokens + sum(len(b.doc.tokens) for b in self._buffers.values())

    # ---- what buffers and history give a lookup ---------------------------
    def _lookup_sets(self, current_uri: str | None) -> dict[str, tuple[tuple, Callable[[], ScanSet]]]:
        """The scan sets a lookup from ``current_uri`` uses (lock held): name -> (key, builder).

        "others": the open buffers but the current one; "history": the accepted completions.
        A cached set is current when its key equals this one (its sources' stamps and the cache
        epoch, which ``rebuild()`` bumps as it keeps the stamps). Each builder reads a snapshot
        taken here (token arrays are replaced, never changed in place; stamps are copied),
        so it may run outside the lock."""
        sk = (self.cfg.min_n, self.cfg.keyed_min_tokens)
        out: dict[str, tuple[tuple, Callable[[], ScanSet]]] = {}
        others = [(u, b.doc.tokens, b.stamp) for u, b in self._buffers.items() if u != current_uri]
        if others:
            out["others"] = ((self._cache_epoch, tuple((u, st) for u, _, st in others)),
                             lambda: ScanSet([t for _, t, _ in others], [st for _, _, st in others],
                                             [u for u, _, _ in others], *sk))
        if self._history:
            hist = list(self._history)
            # Stamps rise with each addition and the oldest go first: the ends name the contents.
            out["history"] = ((self._cache_epoch, hist[0][1], hist[-1][1]),
                              lambda: ScanSet([t for t, _ in hist], [st for _, st in hist], [None] * len(hist), *sk))
        return out

    # ---- merging and rebuild ----------------------------------------------
    def _after_write(self, threshold: int | None = None) -> None:
        """Called by every writer of workspace files, outside the lock: merge when due, then
        build the dynamic set's lookup structure (even if the merge failed)."""
        try:
            self._maybe_merge(threshold)
        finally:
            self._warm_dynamic()

    def _maybe_merge(self, threshold: int | None = None) -> None:
        threshold = self.cfg.merge_tokens if threshold is None else threshold
        with self._lock:
            due = self._dyn_tokens > threshold or self._static_dead > max(
                self.cfg.merge_tokens, self._static_tokens() // 4
            )
        if due:
            self.merge()

    def merge(self) -> None:
        """Rebuild the static segment from all live workspace files (drops tombstones,
        absorbs the dynamic set). The sort runs outside the lock."""
        with self._lock:
            if self._merging:
                return
            self._merging = True
            snap = []  # (key, _File, tokens)
            for key, f in self._files.items():
                toks = f.tokens if f.slot < 0 else self._static.doc_tokens(f.slot)
                snap.append((key, f, toks))
        try:
            seg = StaticSegment([t for _, _, t in snap], self.cfg.max_match)
        except BaseException:
            with self._lock:
                self._merging = False
            raise
        with self._lock:
            live = np.zeros(len(snap), bool)
            dead_path_bytes = 0
            for i, (key, f, _) in enumerate(snap):
                if self._files.get(key) is f:  # unchanged since the snapshot
                    live[i] = True
                    if f.slot < 0:
                        self._dyn_tokens -= f.n_tokens
                        self._dyn_bytes -= f.tokens.nbytes + ARRAY_HEADER_BYTES
                    f.slot, f.tokens = i, None
                else:
                    dead_path_bytes += sys.getsizeof(key)
            self._dead_path_bytes = dead_path_bytes
            self._static = seg
            self._static_keys = [key for key, _, _ in snap]
            self._static_live = live
            self._static_stamps = np.array([f.stamp for _, f, _ in snap], np.int64)
            self._static_dead = int(seg.lengths[~live].sum()) if len(snap) else 0
            self._dyn_version += 1
            self._cache.pop("dynamic", None)  # its files are in the static segment now
            self._merges += 1
            self._merging = False

    def rebuild(self) -> None:
        """Rebuild every structure from its source text: buffers re-chunked and
        re-tokenized, workspace merged into a fresh static segment."""
        with self._lock:
            for b in self._buffers.values():
                b.doc = b.doc.rebuild(self._tok)
                b.keys = None  # rebuilt from the new tokens at the next lookup
            self._cache.clear()
            self._cache_epoch += 1  # a lookup building from the old tokens now installs nothing
        self.merge()
        self._warm_dynamic()

    # ---- invariants -------------------------------------------------------
    def _check_invariants(self) -> None:
        """Assert every incremental structure equals its rebuilt form (for tests)."""
        with self._lock:
            for b in self._buffers.values():
                b.doc.check(self._tok)
                if b.keys is not None:
                    b.keys.check(b.doc.tokens)
            self._check_lookup_sets()
            assert self._walk_file_bytes() == (self._file_bytes(), self._dyn_bytes)
            assert not self._files.keys() & self._evicted_paths.keys()  # an evicted file is not indexed
            assert all(n >= self._evicted_min_tokens for n, _ in self._evicted_paths.values())
            hit = self._cache.get("dynamic")
            if hit is not None:  # current or not, its live documents are exactly those still dynamic
                got = hit[1]
                for key, member, alive in zip(got.keys, got.members, got.live.tolist()):
                    assert alive == (self._files.get(key) is member and member.slot < 0), key
            if hit is not None and hit[0] == self._dyn_version:  # built by extension or anew == from scratch
                got, snap = hit[1], self._dynamic_snapshot()
                assert got.dead == 0
                want = self._make_dynamic(None, snap)  # from scratch
                _assert_same_scan_set(got, want)

    def _check_lookup_sets(self) -> None:
        """A cached "others" or "history" set whose key is current for some lookup (from any open
        buffer, or none) equals a fresh build; one current for none is rebuilt before use (lock held)."""
        for name in ("others", "history"):
            hit = self._cache.get(name)
            if hit is None:
                continue
            for uri in (None, *self._buffers):
                want = self._lookup_sets(uri).get(name)
                if want is not None and want[0] == hit[0]:
                    _assert_same_scan_set(hit[1], want[1]())
                    break

    # ---- stats ------------------------------------------------------------
    def stats(self) -> dict:
        """Counts and sizes. ``index_bytes`` estimates the memory the index holds: every token
        array (static segment with its sort and per-file arrays, dynamic set, history, buffers
        with their chunk cuts and key indexes, cached scan sets) and the per-file bookkeeping
        (path strings, file records, the dict and key list holding them: ``_file_bytes``).
        Not counted: buffer texts (the daemon's documents hold the same strings), the
        bookkeeping of readers in flight and of evicted files waiting for room, and the
        interpreter's own overhead."""
        with self._lock:
            seg = self._static
            static_bytes = 0 if seg is None else seg.nbytes + self._static_live.nbytes + self._static_stamps.nbytes
            hist_bytes = sum(t.nbytes + _HISTORY_ENTRY_BYTES for t, _ in self._history)
            buf_bytes = sum(b.doc.nbytes + (b.keys.nbytes if b.keys else 0) for b in self._buffers.values())
            cache_bytes = sum(v[1].nbytes for v in self._cache.values())
            index_bytes = static_bytes + self._dyn_bytes + hist_bytes + buf_bytes + cache_bytes + self._file_bytes()
            indexed = self._indexed_tokens()
            return {
                "indexed_tokens": indexed,
                "max_indexed_tokens": self.cfg.max_indexed_tokens,
                "buffers": len(self._buffers),
                "buffer_tokens": sum(len(b.doc.tokens) for b in self._buffers.values()),
                "history_tokens": self._history_tokens,
                "workspace_files": len(self._files),
                "workspace_tokens": self._ws_tokens,
                "static_tokens": 0 if seg is None else seg.num_tokens,
                "static_dead_tokens": self._static_dead,
                "dynamic_tokens": self._dyn_tokens,
                "index_bytes": index_bytes,
                "bytes_per_token": index_bytes / indexed if indexed else 0.0,
                "skipped": dict(self._skipped),
                "evicted_files": self._evicted,
                "evicted_waiting": len(self._evicted_paths),  # evicted files that come back once there is room
                "merges": self._merges,
            }
