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
  the lock so lookups keep working.

Invariant: the index proposes exactly what an index built from scratch from
the same documents (same texts, same recency order) proposes, as long as no
lookup meets more than ``max_candidates`` static occurrences (``rebuild()``
and the property test check it), once every writer call has returned. While
one runs, lookups may miss what it is adding (a changed static file is
tombstoned before the dynamic set holding its new text is built; files added
during a merge wait for its end); they never draft from a removed file.

Newest wins: files are read and tokenized outside the lock, so a reader (a scan
batch, ``index_file``) may finish after a later change of the same file (a file
event handled meanwhile). Each reader takes the clock before it reads; every
change records, per key (and per removed folder), how new the state it leaves
is: the tick its data was read at for an install, the tick of the change for a
removal. A reader installs or removes nothing whose recorded state is newer than
its read, whichever of the two finishes first.

Recency: every (re)indexed document gets a fresh stamp from one counter; a
higher stamp ranks first among equal matches of one source. Eviction uses a
separate least-recently-used clock (indexing a file or drafting from it uses it).

Thread safety: one lock. Tokenization of files, merges and the ScanSets (dynamic
set, other buffers, history) are built outside it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from . import ngram
from .document import Document, TokenizeBatch
from .draft import NO_DRAFT, Draft, Source
from .keyed import KeyIndex, key_len
from .scan_set import ScanSet
from .suffix import StaticSegment
from .workspace import SkipFile, discover, read_text


@dataclass(frozen=True)
class IndexConfig:
    min_n: int = 2  # shortest context suffix that may produce a draft
    max_match: int = 32  # longest suffix compared (also the static segment's sort depth)
    max_indexed_tokens: int = 8_000_000  # bound on live tokens; LRU workspace files go first
    max_file_bytes: int = 1 << 20  # larger workspace files are skipped
    max_history_tokens: int = 65_536  # oldest accepted completions are dropped past this
    merge_tokens: int = 65_536  # dynamic-set (or tombstoned) tokens that trigger a merge
    max_candidates: int = 256  # static occurrences ranked per lookup (evenly sampled beyond)
    batch_files: int = 64  # files tokenized per batch while indexing a workspace
    # Buffers and scanned sets of at least this many tokens are looked up through a
    # sorted key index (keyed.KeyIndex) instead of a full scan; 10**9: always scan.
    keyed_min_tokens: int = 2048

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_match:
            raise ValueError(f"need 1 <= min_n <= max_match, got {self.min_n}, {self.max_match}")
        for name in ("max_indexed_tokens", "max_file_bytes", "max_history_tokens", "merge_tokens",
                     "max_candidates", "batch_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"IndexConfig.{name} must be >= 1")
        if self.keyed_min_tokens < 0:
            raise ValueError("IndexConfig.keyed_min_tokens must be >= 0")


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


@dataclass(slots=True)  # one per workspace file: slots keep the record small (72 bytes, not ~350)
class _File:
    stamp: int  # recency for ranking
    used: int  # LRU clock for eviction
    n_tokens: int
    slot: int = -1  # index in the static segment; -1 while in the dynamic set
    tokens: np.ndarray | None = None  # [n] int32, dynamic set only


# stats()["index_bytes"]: the Python objects per workspace file besides its tokens: its record
# with the three integers it holds (past the small-int cache), and, in the dynamic set, the
# ndarray header of its tokens; per history entry, its tuple and ndarray header.
_FILE_RECORD_BYTES = sys.getsizeof(_File(0, 0, 0)) + 3 * sys.getsizeof(2**40)
_ARRAY_HEADER_BYTES = sys.getsizeof(np.zeros(0, np.int32)[:0])  # a view: the header without data
_HISTORY_ENTRY_BYTES = sys.getsizeof((None, None)) + _ARRAY_HEADER_BYTES


def _folder_prefix(root: str | os.PathLike) -> str:
    """A folder's absolute path with a trailing separator: keys under it start with it."""
    return os.path.join(os.path.abspath(root), "")


def _as_tokens(ids, what: str) -> np.ndarray:
    a = np.asarray(ids)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-D sequence of integer token ids, got shape {a.shape} dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= 2**31 - 1):
        raise ValueError(f"{what} holds token ids outside [0, 2**31 - 1)")
    return a.astype(np.int32)


def _assert_same_scan_set(got: ScanSet, want: ScanSet) -> None:
    """``got`` holds what ``want``, built from scratch, holds (for ``_check_invariants``)."""
    assert np.array_equal(got.cat, want.cat) and np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.stamps, want.stamps) and got.keys == want.keys
    assert (got.index is None) == (want.index is None)
    if got.index is not None:
        assert np.array_equal(got.index.keys, want.index.keys)
        assert np.array_equal(got.index.pos, want.index.pos)


class NgramIndex:
    """See the module docstring. All public methods are thread-safe."""

    def __init__(self, tokenize_batch: TokenizeBatch, config: IndexConfig | None = None):
        self.cfg = config or IndexConfig()
        self._tok = tokenize_batch
        self._lock = threading.RLock()
        self._clock = 0
        self._buffers: dict[str, _Buffer] = {}
        self._history: deque[tuple[np.ndarray, int]] = deque()
        self._history_tokens = 0
        self._files: dict[str, _File] = {}
        self._roots: set[str] = set()  # folders index_workspace has scanned, each ending in a separator
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
        self._cache: dict[str, object] = {}  # "history", "dynamic", "others": (key, ScanSet)
        # Part of the "others" and "history" keys: bumped when their sources change without new
        # stamps (rebuild() re-tokenizes the buffers), so a set built from an older snapshot no
        # longer matches.
        self._cache_epoch = 0
        # Bumped on every change to the dynamic set's files. The cached "dynamic" ScanSet is
        # current when built at this version; an older one is still usable: it misses the
        # files added since, and its removed files are tombstoned (see _dynamic_set).
        self._dyn_version = 0
        self._skipped: Counter = Counter()
        self._evicted = 0
        self._merges = 0
        # Newest wins (module docstring): the tick of each key's last change, and of each
        # folder whose files were all dropped, kept while any reader is in flight.
        self._changed: dict[str, int] = {}
        self._changed_under: dict[str, int] = {}
        self._readers = 0
        self.last_skip: str | None = None  # the message of the last file not indexed

    # ---- clocks -----------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _begin_read(self) -> int:
        """A reader of files starts (lock held): returns the tick its reads come after (its own:
        of two readers, the one that started later has the higher tick)."""
        self._readers += 1
        return self._tick()

    def _end_read(self) -> None:
        """A reader is done (lock held). With none left, no change can be newer than a read."""
        self._readers -= 1
        if not self._readers:
            self._changed.clear()
            self._changed_under.clear()

    def _changed_since(self, key: str, read_tick: int) -> bool:
        """Whether ``key`` holds a state newer than a read that began at ``read_tick`` (lock held)."""
        if self._changed.get(key, 0) > read_tick:
            return True
        return any(t > read_tick and key.startswith(p) for p, t in self._changed_under.items())

    def _record_change(self, key: str, as_of: int | None = None) -> None:
        """``key`` now holds data read at tick ``as_of`` (None: a change known now, a removal) (lock held)."""
        if self._readers:
            t = self._tick() if as_of is None else as_of
            self._changed[key] = max(self._changed.get(key, 0), t)

    # ---- buffers ----------------------------------------------------------
    def open_buffer(self, uri: str, text: str) -> None:
        """Index ``text`` as the open buffer ``uri`` (replacing any earlier text)."""
        if not isinstance(uri, str):
            raise ValueError(f"buffer uri must be str, got {type(uri).__name__}")
        doc = Document.from_text(text, self._tok)  # tokenize outside the lock
        keys = KeyIndex(doc.tokens, key_len(self.cfg.min_n)) if len(doc.tokens) >= self.cfg.keyed_min_tokens else None
        with self._lock:
            self._buffers[uri] = _Buffer(doc, self._tick(), keys)
            self._enforce_bound()

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
            self._enforce_bound()

    def close_buffer(self, uri: str) -> None:
        with self._lock:
            self._buffers.pop(uri, None)

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
        t = _as_tokens(token_ids, "history")
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
            self._enforce_bound()

    # ---- workspace files --------------------------------------------------
    def has_file(self, path: str | os.PathLike) -> bool:
        """Whether the file ``path`` is indexed now."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            return key in self._files

    def index_file(self, path: str | os.PathLike) -> bool:
        """(Re)index one file. False when it is skipped (the reason is counted in
        stats()["skipped"] and kept in ``last_skip``); a skipped file leaves the index."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            read_tick = self._begin_read()
        try:
            try:
                text = read_text(key, self.cfg.max_file_bytes)
            except SkipFile as e:
                with self._lock:
                    self._skipped[e.reason] += 1
                    self.last_skip = str(e)
                    if not self._changed_since(key, read_tick):  # else a newer change decides
                        self._remove(key)
                        self._record_change(key, read_tick)
                self._after_write()
                return False
            (tokens,) = self._tokenize_files([text])
            with self._lock:
                if not self._changed_since(key, read_tick):
                    self._install(key, tokens, read_tick)
                    self._enforce_bound()
                kept = key in self._files
        finally:
            with self._lock:
                self._end_read()
        self._after_write()
        return kept

    def remove_file(self, path: str | os.PathLike) -> None:
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            self._remove(key)
            self._record_change(key)
        self._after_write()

    def remove_tree(self, path: str | os.PathLike) -> int:
        """Drop the file ``path`` and every file under it (a folder deleted or moved away as a
        whole: no per-file events come for it); returns how many. Unlike ``forget_root``, the
        folder stays a scanned root; a scan's reads that began before this install nothing."""
        key = os.path.abspath(os.fspath(path))
        prefix = _folder_prefix(key)
        with self._lock:
            n = self._remove_all([k for k in self._files if k == key or k.startswith(prefix)])
            self._record_change(key)
            if self._readers:
                self._changed_under[prefix] = self._tick()
        self._after_write()
        return n

    def index_workspace(
        self,
        root: str | os.PathLike,
        progress: Callable[[int, int], None] | None = None,
        stop_event: threading.Event | None = None,
    ) -> dict:
        """Index every non-ignored file under ``root``. Synchronous; run it in a thread.

        Files are read and tokenized in batches outside the lock; lookups work
        throughout. ``progress(done, total)`` after each batch; ``stop_event``
        is checked between batches. Returns counts: ``files`` (considered),
        ``indexed``, ``tokens``, one count per skip reason, ``removed``, ``stopped``.

        A re-scan is the truth for ``root``: a file indexed earlier that is now
        skipped (grown too large, turned binary) leaves the index, as with
        ``index_file``; after a complete scan, so does one under ``root`` that
        is no longer discovered (deleted, or ignored since), unless it was
        (re)indexed meanwhile (a file event during the scan) or lies under
        another scanned root nested in this one (a submodule that ``git
        ls-files`` does not list).
        """
        prefix = _folder_prefix(root)
        with self._lock:
            if stop_event is not None and stop_event.is_set():  # forgotten before the scan began
                return {"files": 0, "indexed": 0, "tokens": 0, "removed": 0, "stopped": True}
            before = {k: f for k, f in self._files.items() if k.startswith(prefix)}
            self._roots.add(prefix)
        counts: Counter = Counter()
        files = discover(root, counts)
        total, done = len(files), 0
        stopped = False
        for i in range(0, total, self.cfg.batch_files):
            if stop_event is not None and stop_event.is_set():
                stopped = True
                break
            with self._lock:
                read_tick = self._begin_read()
            try:
                threshold = self._scan_batch(files[i : i + self.cfg.batch_files], prefix, read_tick, counts)
            finally:
                with self._lock:
                    self._end_read()
            if threshold is None:  # forget_root ran meanwhile: install nothing more
                stopped = True
                break
            self._after_write(threshold)
            done = min(i + self.cfg.batch_files, total)
            if progress is not None:
                progress(done, total)
        if not stopped:
            found = {os.path.abspath(f) for f in files}
            with self._lock:
                nested = [r for r in self._roots if r != prefix and r.startswith(prefix)]
                counts["removed"] += self._remove_all(
                    k for k, f in before.items()
                    if k not in found and self._files.get(k) is f  # not re-indexed during the scan
                    and not any(k.startswith(r) for r in nested))
        self._after_write()
        with self._lock:
            for reason, n in counts.items():
                if reason not in ("indexed", "tokens", "removed"):
                    self._skipped[reason] += n
        out = {"files": total, "indexed": 0, "tokens": 0, "removed": 0, **counts, "stopped": stopped}
        return out

    def _scan_batch(self, files: list, prefix: str, read_tick: int, counts: Counter) -> int | None:
        """Read, tokenize and install one batch of a scan of ``prefix`` whose reads began at
        ``read_tick``. Returns the merge threshold, or None when the root was forgotten meanwhile."""
        keys, texts, skipped = [], [], []
        for f in files:
            try:
                texts.append(read_text(f, self.cfg.max_file_bytes))
                keys.append(os.path.abspath(f))
            except SkipFile as e:
                counts[e.reason] += 1
                skipped.append(os.path.abspath(f))
        if skipped:
            with self._lock:  # a file event after the read decides instead
                gone = [k for k in skipped if not self._changed_since(k, read_tick)]
                counts["removed"] += self._remove_all(gone)
                for k in gone:
                    self._record_change(k, read_tick)
        arrays = self._tokenize_files(texts) if texts else []
        with self._lock:
            if prefix not in self._roots:
                return None
            for key, arr in zip(keys, arrays):
                if self._changed_since(key, read_tick):  # a file event after the read: newer
                    continue
                self._install(key, arr, read_tick)
                counts["indexed"] += 1
                counts["tokens"] += len(arr)
            self._enforce_bound()
            # Geometric: merge when the dynamic set outgrows the static segment.
            return max(self.cfg.merge_tokens, self._static_tokens())

    def forget_root(self, root: str | os.PathLike, keep: Callable[[str], bool] | None = None) -> int:
        """A workspace folder was closed: drop its files, but those ``keep(path)`` accepts; returns how many.

        The caller knows which other folders are still watched and what they
        ignore, so it decides which files another folder covers (``keep``). A
        scan of ``root`` still running installs nothing more.
        """
        prefix = _folder_prefix(root)
        with self._lock:
            self._roots.discard(prefix)
            under = {k: f for k, f in self._files.items() if k.startswith(prefix)}
        # ``keep`` may test ignore rules per file: outside the lock, so lookups go on meanwhile
        gone = [k for k in under if keep is None or not keep(k)]
        with self._lock:  # a file re-indexed meanwhile (a file event) is not this call's to drop
            n = self._remove_all(k for k in gone if self._files.get(k) is under[k])
        self._after_write()
        return n

    def _tokenize_files(self, texts: list[str]) -> list[np.ndarray]:
        """Whole-file token ids, one [n_i] int32 array per text (call outside the lock)."""
        ids = self._tok(texts)
        if len(ids) != len(texts):
            raise ValueError(f"tokenizer returned {len(ids)} results for {len(texts)} texts")
        return [_as_tokens(x, "tokenizer output") for x in ids]

    def _static_tokens(self) -> int:
        s = self._static
        return 0 if s is None else s.num_tokens - self._static_dead

    def _install(self, key: str, tokens: np.ndarray, as_of: int | None = None) -> None:
        """Put a file's new tokens, read at tick ``as_of`` (None: now), in the dynamic set (lock held)."""
        self._remove(key)
        t = self._tick()
        self._record_change(key, as_of)
        self._files[key] = _File(stamp=t, used=t, n_tokens=len(tokens), tokens=tokens)
        self._ws_tokens += len(tokens)
        self._dyn_tokens += len(tokens)
        self._dyn_bytes += tokens.nbytes + _ARRAY_HEADER_BYTES
        self._path_bytes += sys.getsizeof(key)
        self._dyn_version += 1

    def _remove_all(self, keys: Iterable[str]) -> int:
        """Remove each of ``keys`` that is indexed (lock held); returns how many were."""
        n = 0
        for key in keys:
            n += key in self._files
            self._remove(key)
        return n

    def _remove(self, key: str) -> None:
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
            self._dyn_bytes -= f.tokens.nbytes + _ARRAY_HEADER_BYTES
            self._dyn_version += 1
            hit = self._cache.get("dynamic")
            if hit is not None:
                if self._dyn_tokens == 0:
                    del self._cache["dynamic"]  # nothing left to look up: free it now
                else:
                    hit[1].kill(key, f)

    def _indexed_tokens(self) -> int:
        return self._ws_tokens + self._history_tokens + sum(len(b.doc.tokens) for b in self._buffers.values())

    def _enforce_bound(self) -> None:
        """Evict least recently used workspace files until the bound holds (lock held)."""
        over = self._indexed_tokens() - self.cfg.max_indexed_tokens
        if over <= 0 or not self._files:
            return
        for key, f in sorted(self._files.items(), key=lambda kv: kv[1].used):
            if over <= 0:
                break
            self._remove(key)
            self._evicted += 1
            over -= f.n_tokens

    # ---- merging ----------------------------------------------------------
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
                        self._dyn_bytes -= f.tokens.nbytes + _ARRAY_HEADER_BYTES
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

    # ---- lookup -----------------------------------------------------------
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

    def _scan_set(self, name: str, key, make) -> ScanSet:
        hit = self._cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        s = make()
        self._cache[name] = (key, s)
        return s

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

    def propose(self, context, k: int, w: int = 1, current_uri: str | None = None) -> Draft:
        """Draft up to ``k`` tokens continuing ``context`` (token ids), as up to ``w``
        branches diverging at their first token. NO_DRAFT when no suffix of at
        least ``min_n`` tokens occurs. See ``ngram`` for the ranking."""
        if not isinstance(k, (int, np.integer)) or k < 1 or not isinstance(w, (int, np.integer)) or w < 1:
            raise ValueError(f"need integers k >= 1 and w >= 1, got k={k!r}, w={w!r}")
        cfg = self.cfg
        ctx = np.asarray(context)
        ctx = _as_tokens(ctx[-cfg.max_match :] if ctx.ndim == 1 else ctx, "context")  # only what is compared
        if len(ctx) < cfg.min_n:
            return NO_DRAFT
        for attempt in range(3):
            with self._lock:
                stale = [(name, key, make) for name, (key, make) in self._lookup_sets(current_uri).items()
                         if self._cache.get(name, (None,))[0] != key]
                if not stale or attempt == 2:  # a writer kept changing them: the lookup builds (rare)
                    return self._propose(ctx, int(k), int(w), current_uri)
            # Build outside the lock: a buffer switch or a new accepted completion made a set stale,
            # and building it (6-58 ms for big ones) under the lock stalled every other index call.
            for name, key, make in stale:
                built = make()
                with self._lock:
                    # Install only a set still current for this lookup: else a writer (or rebuild())
                    # changed its sources meanwhile, and a later lookup may have installed a newer set.
                    if self._lookup_sets(current_uri).get(name, (None,))[0] == key:
                        self._cache[name] = (key, built)
        raise AssertionError("unreachable")

    def _propose(self, ctx: np.ndarray, k: int, w: int, current_uri: str | None) -> Draft:
        min_n = self.cfg.min_n
        # Each group: (match_len, source, first[c], stamp[c], pos[c], tokens_of(j, k), files)
        # files: (key per document, document[c]) for workspace files, whose use counts for eviction; else None
        groups = []

        def add_scan(s: ScanSet, m, p, d, source: Source, files: bool) -> None:
            if m >= min_n and len(p):
                groups.append((m, source, s.cat[p], s.stamps[d], p - s.starts[d],
                               lambda j, kk, s=s, p=p: ngram.continuation(s.cat, int(p[j]), kk),
                               (s.keys, d) if files else None))

        cur = self._buffers.get(current_uri) if current_uri is not None else None
        if cur is not None:
            a = cur.doc.tokens
            m, p = cur.match(ctx, min_n, self.cfg.keyed_min_tokens)
            if m:
                groups.append((m, Source.BUFFER, a[p], np.full(len(p), cur.stamp, np.int64), p,
                               lambda j, kk, a=a, p=p: ngram.continuation(a, int(p[j]), kk), None))
        sets = self._lookup_sets(current_uri)
        for name, source in (("others", Source.OPEN_BUFFER), ("history", Source.HISTORY)):
            if name in sets:
                s = self._scan_set(name, *sets[name])
                add_scan(s, *s.match(ctx, min_n), source, False)
        if self._dyn_tokens:
            s = self._dynamic_set()
            add_scan(s, *s.match(ctx, min_n), Source.WORKSPACE, True)
        best = max((g[0] for g in groups), default=0)
        seg = self._static
        if seg is not None and self._static_live.any():
            m, ip = seg.longest(ctx)
            while m >= max(min_n, best):
                lo, hi = seg.range_of(ctx, m, ip)
                p = seg.positions(lo, hi, self.cfg.max_candidates)
                d = seg.doc_of(p)
                keep = self._static_live[d]
                if keep.any():
                    p, d = p[keep], d[keep]
                    groups.append((m, Source.WORKSPACE, seg.first_tokens(p), self._static_stamps[d],
                                   p - seg.starts[d], lambda j, kk, p=p: seg.continuation(int(p[j]), kk),
                                   (self._static_keys, d)))
                    break
                m -= 1  # every occurrence of this length is in a removed file
        best = max((g[0] for g in groups), default=0)
        if best < min_n:
            return NO_DRAFT
        chosen = [g for g in groups if g[0] == best]
        if w == 1:  # the common case: no concatenation, no sort
            gi, j, count = ngram.rank_best([(int(g[1]), g[2], g[3], g[4]) for g in chosen])
            g = chosen[gi]
            self._mark_used(g, j)
            return ngram.build_draft(np.zeros(1, np.int64), np.array([count]), np.array([int(g[1])], np.int8),
                                     best, k, lambda _i, kk: g[5](j, kk))
        if len(chosen) == 1:  # the common case: no concatenation
            g = chosen[0]
            first, stamp, pos = g[2], g[3], g[4]
            source = np.full(len(first), int(g[1]), np.int8)
            owner = np.zeros(len(first), np.int64)
            offset = np.arange(len(first), dtype=np.int64)
        else:
            first = np.concatenate([g[2] for g in chosen]).astype(np.int32)
            source = np.concatenate([np.full(len(g[2]), int(g[1]), np.int8) for g in chosen])
            stamp = np.concatenate([g[3] for g in chosen]).astype(np.int64)
            pos = np.concatenate([g[4] for g in chosen]).astype(np.int64)
            owner = np.concatenate([np.full(len(g[2]), i, np.int64) for i, g in enumerate(chosen)])
            offset = np.concatenate([np.arange(len(g[2]), dtype=np.int64) for g in chosen])
        rows, counts = ngram.rank_occurrences(first, source, stamp, pos, w)

        def tokens_of(i: int, kk: int) -> np.ndarray:
            g = chosen[int(owner[i])]
            j = int(offset[i])
            self._mark_used(g, j)
            return g[5](j, kk)

        return ngram.build_draft(rows, counts, source, best, k, tokens_of)

    def _mark_used(self, g: tuple, j: int) -> None:
        if g[6] is not None:  # a workspace file drafted from: it was used
            keys, doc = g[6]
            f = self._files.get(keys[int(doc[j])])
            if f is not None:
                f.used = self._tick()

    def _check_invariants(self) -> None:
        """Assert every incremental structure equals its rebuilt form (for tests)."""
        with self._lock:
            for b in self._buffers.values():
                b.doc.check(self._tok)
                if b.keys is not None:
                    b.keys.check(b.doc.tokens)
            self._check_lookup_sets()
            assert self._walk_file_bytes() == (self._file_bytes(), self._dyn_bytes)
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
        bookkeeping of readers in flight, and the interpreter's own overhead."""
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
                "merges": self._merges,
            }

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
        dyn_bytes = sum(f.tokens.nbytes + _ARRAY_HEADER_BYTES for f in self._files.values() if f.tokens is not None)
        return file_bytes, dyn_bytes
