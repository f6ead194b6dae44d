"""Workspace scans: reading files from disk into the index, newest wins.

A part of ``store.NgramIndex``; "lock held" means the caller holds the index's lock. The
writers of workspace files: ``index_file``, ``remove_file``, ``remove_tree``,
``index_workspace`` (a whole folder, in batches), ``forget_root``, and the restore of files
evicted for lack of room (``restore_evicted``). They read and tokenize outside the lock, then
install into or remove from ``files.WorkspaceFiles``.

Newest wins: of a file's read and a later change of it, the newer state wins, whichever
finishes first (``NewestWins``; docs/design/index.md, "Newest wins").
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Callable

import numpy as np

from .background import BackgroundJob
from .bound import TokenBound
from .clock import Clock
from .config import IndexConfig
from .document import TokenizeBatch
from .evicted import EvictedFiles
from .files import WorkspaceFiles
from .ngram import as_tokens
from .workspace import SkipFile, discover, read_text


def _folder_prefix(root: str | os.PathLike) -> str:
    """A folder's absolute path with a trailing separator: keys under it start with it."""
    return os.path.join(os.path.abspath(root), "")


class NewestWins:
    """Which of a read and a change of the same file is newer (lock held throughout). Each reader
    takes the clock before it reads; each change records, per key (and per removed folder), the
    tick of the state it leaves. Kept only while a reader is in flight."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.changed: dict[str, int] = {}
        self.changed_under: dict[str, int] = {}  # removed folder prefix -> tick
        self.readers = 0

    def begin_read(self) -> int:
        """A reader of files starts: returns the tick its reads come after (its own: of two
        readers, the one that started later has the higher tick)."""
        self.readers += 1
        return self._clock.tick()

    def end_read(self) -> None:
        """A reader is done. With none left, no change can be newer than a read."""
        self.readers -= 1
        if not self.readers:
            self.changed.clear()
            self.changed_under.clear()

    def changed_since(self, key: str, read_tick: int) -> bool:
        """Whether ``key`` holds a state newer than a read that began at ``read_tick``."""
        if self.changed.get(key, 0) > read_tick:
            return True
        return any(t > read_tick and key.startswith(p) for p, t in self.changed_under.items())

    def record(self, key: str, as_of: int | None = None) -> None:
        """``key`` now holds data read at tick ``as_of`` (None: a change known now, a removal)."""
        if self.readers:
            t = self._clock.tick() if as_of is None else as_of
            self.changed[key] = max(self.changed.get(key, 0), t)

    def record_folder(self, prefix: str) -> None:
        """Every file under ``prefix`` was dropped now."""
        if self.readers:
            self.changed_under[prefix] = self._clock.tick()


class WorkspaceScans:
    """The writers of workspace files (see module docstring)."""

    def __init__(self, cfg: IndexConfig, lock: threading.RLock, clock: Clock, tokenize_batch: TokenizeBatch,
                 files: WorkspaceFiles, evicted: EvictedFiles, bound: TokenBound,
                 background_setup: Callable[[], object] | None = None) -> None:
        """``background_setup``: called first on the restore thread (with ``cfg.restore_in_background``)."""
        self._cfg, self._lock, self._tok = cfg, lock, tokenize_batch
        self._ws, self._evicted, self._bound = files, evicted, bound
        self._newest = NewestWins(clock)
        self._roots: set[str] = set()  # folders index_workspace has scanned, each ending in a separator
        self.skipped: Counter = Counter()
        self.last_skip: str | None = None  # the message of the last file not indexed
        self.restorer = BackgroundJob(self._restore_job, "ngramd-index-restore", background_setup) \
            if cfg.restore_in_background else None
        self._restore_whole_room = False  # an ask since the restore thread's last run wanted no reserve

    def _install(self, key: str, tokens: np.ndarray, read_tick: int) -> None:
        """Install a file read at ``read_tick`` (lock held)."""
        self._ws.install(key, tokens)
        self._newest.record(key, read_tick)

    def index_file(self, path: str | os.PathLike) -> bool:
        """(Re)index one file. False when it is skipped (the reason is counted in
        stats()["skipped"] and kept in ``last_skip``); a skipped file leaves the index."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            read_tick = self._newest.begin_read()
        try:
            try:
                text = read_text(key, self._cfg.max_file_bytes)
            except SkipFile as e:
                with self._lock:
                    self.skipped[e.reason] += 1
                    self.last_skip = str(e)
                    freed = False
                    if not self._newest.changed_since(key, read_tick):  # else a newer change decides
                        freed = self._ws.remove_all([key]) > 0
                        self._newest.record(key, read_tick)
                self._ws.after_write()
                if freed:
                    self.restore_evicted()
                return False
            (tokens,) = self._tokenize_files([text])
            real = os.path.realpath(key)
            with self._lock:
                before = self._ws.files[key].n_tokens if key in self._ws.files else None
                if not self._newest.changed_since(key, read_tick):
                    self._install(key, tokens, read_tick)
                    self._ws.note_link(key, real)
                    self._bound.enforce()
                kept = key in self._ws.files
                shrank = before is not None and (not kept or self._ws.files[key].n_tokens < before)
        finally:
            with self._lock:
                self._newest.end_read()
        self._ws.after_write()
        if shrank:
            self.restore_evicted()
        return kept

    def remove_file(self, path: str | os.PathLike) -> None:
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            was_indexed = self._ws.remove_all([key]) > 0
            self._newest.record(key)
        self._ws.after_write()
        if was_indexed:  # its room goes to files evicted for lack of it
            self.restore_evicted()

    def remove_tree(self, path: str | os.PathLike) -> int:
        """Drop the file ``path`` and every file under it (a folder deleted or moved away as a
        whole: no per-file events come for it); returns how many. Unlike ``forget_root``, the
        folder stays a scanned root; a scan's reads that began before this install nothing."""
        key = os.path.abspath(os.fspath(path))
        prefix = _folder_prefix(key)
        with self._lock:
            n = self._ws.remove_all([k for keys in (self._ws.files, self._evicted.paths) for k in keys
                                  if k == key or k.startswith(prefix)])  # the evicted ones are not counted
            self._newest.record(key)
            self._newest.record_folder(prefix)
        self._ws.after_write()
        if n:
            self.restore_evicted()
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
        ls-files`` does not list). Files under such a nested root are left to
        its own scan, which applies its own rules (a nested repository's
        ``.git/info/exclude``, say), whichever was added first.
        """
        prefix = _folder_prefix(root)
        with self._lock:
            if stop_event is not None and stop_event.is_set():  # forgotten before the scan began
                return {"files": 0, "indexed": 0, "tokens": 0, "removed": 0, "stopped": True}
            before = {k: f for k, f in self._ws.files.items() if k.startswith(prefix)}
            self._roots.add(prefix)
        counts: Counter = Counter()
        files = discover(root, counts)
        with self._lock:  # a folder scanned as a root of its own decides for its files, by its own rules
            inner = self._roots_inside(prefix)
        if inner:
            files = [f for f in files if not os.path.abspath(f).startswith(inner)]
        total, done = len(files), 0
        stopped = False
        reals = RealPaths()
        for i in range(0, total, self._cfg.batch_files):
            if stop_event is not None and stop_event.is_set():
                stopped = True
                break
            with self._lock:
                read_tick = self._newest.begin_read()
            try:
                threshold = self._scan_batch(files[i : i + self._cfg.batch_files], prefix, read_tick, counts, reals)
            finally:
                with self._lock:
                    self._newest.end_read()
            if threshold is None:  # forget_root ran meanwhile: install nothing more
                stopped = True
                break
            self._ws.after_write(threshold)
            done = min(i + self._cfg.batch_files, total)
            if progress is not None:
                progress(done, total)
        if not stopped:
            found = {os.path.abspath(f) for f in files}
            with self._lock:
                nested = self._roots_inside(prefix)
                counts["removed"] += self._ws.remove_all(
                    k for k, f in before.items()
                    if k not in found and self._ws.files.get(k) is f  # not re-indexed during the scan
                    and not k.startswith(nested))
                # nor do the evicted ones it no longer finds come back
                self._ws.remove_all([k for k in self._evicted.under(prefix)
                                  if k not in found and not k.startswith(nested)])
        self._ws.after_write()
        if counts["removed"]:  # files it no longer finds, or now skips: their room
            self.restore_evicted()
        with self._lock:
            for reason, n in counts.items():
                if reason not in ("indexed", "tokens", "removed"):
                    self.skipped[reason] += n
        out = {"files": total, "indexed": 0, "tokens": 0, "removed": 0, **counts, "stopped": stopped}
        return out

    def folder_totals(self, root: str | os.PathLike) -> dict:
        """The files indexed under ``root`` now and their tokens (``indexed``, ``tokens``), as a
        scan of it counts them: not those under a scanned root nested in it. A scan's counts
        are of the files it read; file events change them since."""
        prefix = _folder_prefix(root)
        with self._lock:
            inner = self._roots_inside(prefix)
            records = [f for k, f in self._ws.files.items() if k.startswith(prefix) and not k.startswith(inner)]
        return {"indexed": len(records), "tokens": sum(f.n_tokens for f in records)}

    def _roots_inside(self, prefix: str) -> tuple[str, ...]:
        """The scanned roots nested in ``prefix`` (lock held): each decides for its own files."""
        return tuple(r for r in self._roots if r != prefix and r.startswith(prefix))

    def _scan_batch(self, files: list, prefix: str, read_tick: int, counts: Counter,
                    reals: RealPaths) -> int | None:
        """Read, tokenize and install one batch of a scan of ``prefix`` whose reads began at
        ``read_tick``. Returns the merge threshold, or None when the root was forgotten meanwhile."""
        keys, texts, skipped = [], [], []
        for f in files:
            try:
                texts.append(read_text(f, self._cfg.max_file_bytes))
                keys.append(os.path.abspath(f))
            except SkipFile as e:
                counts[e.reason] += 1
                skipped.append(os.path.abspath(f))
        if skipped:
            with self._lock:  # a file event after the read decides instead
                gone = [k for k in skipped if not self._newest.changed_since(k, read_tick)]
                counts["removed"] += self._ws.remove_all(gone)
                for k in gone:
                    self._newest.record(k, read_tick)
        arrays = self._tokenize_files(texts) if texts else []
        real_paths = [reals.of(k) for k in keys]  # a link's target: its events reach the link (links_to)
        with self._lock:
            if prefix not in self._roots:
                return None
            inner = self._roots_inside(prefix)  # one added since the listing too: its files are its scan's
            for key, arr, real in zip(keys, arrays, real_paths):
                if self._newest.changed_since(key, read_tick) or (inner and key.startswith(inner)):
                    continue  # a file event after the read is newer; a nested root decides
                self._install(key, arr, read_tick)
                self._ws.note_link(key, real)
                counts["indexed"] += 1
                counts["tokens"] += len(arr)
            self._bound.enforce()
            # Geometric: merge when the dynamic set outgrows the static segment.
            return max(self._cfg.merge_tokens, self._ws.static_tokens())

    def forget_root(self, root: str | os.PathLike, keep: Callable[[str], bool] | None = None) -> int:
        """A workspace folder was closed: drop its files, but those ``keep(path)`` accepts; returns how many.

        The caller knows which other folders are still watched and what they
        ignore, so it decides which files another folder covers (``keep``). A
        scan of ``root`` still running installs nothing more.
        """
        prefix = _folder_prefix(root)
        with self._lock:
            self._roots.discard(prefix)
            under = {k: f for k, f in self._ws.files.items() if k.startswith(prefix)}
            # out of a restore's reach while ``keep`` decides (one meanwhile installed them for good)
            evicted = self._evicted.take_under(prefix)
        # ``keep`` may test ignore rules per file: outside the lock, so lookups go on meanwhile
        gone = [k for k in under if keep is None or not keep(k)]
        evicted_kept = [k for k in evicted if keep is not None and keep(k)]  # they come back later
        with self._lock:  # a file re-indexed meanwhile (a file event) is not this call's to drop
            n = self._ws.remove_all(k for k in gone if self._ws.files.get(k) is under[k])
            back = {k: evicted[k] for k in evicted_kept if k not in self._ws.files}  # (not indexed meanwhile)
            if back:  # in their eviction order, before those evicted since
                self._evicted.put_back(back)
        self._ws.after_write()
        if n or back:  # the folder's room, and a restore asked meanwhile that did not see them
            self.restore_evicted()
        return n

    def restore_evicted(self, reserve: bool = False) -> None:
        """Room freed up (a buffer shrank or closed, files were removed or shrank): bring evicted
        files back, now or, with ``cfg.restore_in_background``, on the restore thread.
        ``reserve``: a buffer shrank, which the next keystroke may undo: keep a reserve of room
        free (``bound.TokenBound.restorable_room``), or a file read back would be evicted again at once."""
        if not self._evicted.paths:  # the common case, without the lock
            return
        if self.restorer is None:
            self._restore_evicted_now(reserve)
            return
        if not reserve:
            with self._lock:
                self._restore_whole_room = True
        self.restorer.request()

    def _restore_job(self) -> None:
        """The restore thread's job: into the whole room if any ask since the last run wanted it."""
        with self._lock:
            whole, self._restore_whole_room = self._restore_whole_room, False
        self._restore_evicted_now(reserve=not whole)

    def wait_restored(self, timeout: float | None = None) -> bool:
        """Whether the restores asked for so far are done, waiting up to ``timeout`` seconds."""
        return self.restorer is None or self.restorer.wait_idle(timeout)

    def _restore_evicted_now(self, reserve: bool = False) -> int:
        """Index again the files evicted for lack of room that fit in the room there is now (less
        the reserve, with ``reserve``), most recently used first, each with its old place in the LRU
        order; returns how many came back. A batch at a time, read outside the lock as a scan reads
        (newest wins: a file event meanwhile decides); one no longer readable is forgotten and counted."""
        if not self._evicted.paths:
            return 0
        restored, tried = 0, set()
        while True:
            with self._lock:
                keys = self._evicted.that_fit(tried, self._bound.restorable_room(reserve))
                if not keys:
                    return restored
                read_tick = self._newest.begin_read()
            try:
                restored += self._restore_batch(keys, read_tick, reserve)
            finally:
                with self._lock:
                    self._newest.end_read()
            self._ws.after_write()

    def _restore_batch(self, keys: list[str], read_tick: int, reserve: bool) -> int:
        """Read, tokenize and install the evicted files ``keys`` whose reads began at ``read_tick``."""
        read, texts, skipped = [], [], []
        for key in keys:
            try:
                texts.append(read_text(key, self._cfg.max_file_bytes))
                read.append(key)
            except SkipFile as e:
                skipped.append(e)
        arrays = self._tokenize_files(texts) if texts else []
        reals = RealPaths()
        real_paths = [reals.of(k) for k in read]
        n = 0
        with self._lock:
            for e in skipped:
                if e.path in self._evicted.paths and not self._newest.changed_since(e.path, read_tick):
                    self._evicted.forget(e.path)
                    self.skipped[e.reason] += 1
            room = self._bound.restorable_room(reserve)
            for key, arr, real in zip(read, arrays, real_paths):
                waiting = self._evicted.paths.get(key)
                if waiting is None or self._newest.changed_since(key, read_tick):
                    continue  # indexed, removed or its folder forgotten meanwhile: that decides
                if len(arr) > room:  # it grew, or buffers did: it waits for more room
                    self._evicted.regrew(key, len(arr))
                    continue
                self._install(key, arr, read_tick)
                self._ws.files[key].used = waiting[1]  # its old place in the LRU order
                self._ws.note_link(key, real)
                room -= len(arr)
                n += 1
        return n

    def _tokenize_files(self, texts: list[str]) -> list[np.ndarray]:
        """Whole-file token ids, one [n_i] int32 array per text (call outside the lock)."""
        ids = self._tok(texts)
        if len(ids) != len(texts):
            raise ValueError(f"tokenizer returned {len(ids)} results for {len(texts)} texts")
        return [as_tokens(x, "tokenizer output") for x in ids]


class RealPaths:
    """Real paths of a scan's files, each folder resolved once: ``os.path.realpath`` of every file
    took ~110 us a file on deep paths (an lstat per path component); this takes one lstat a file."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def of(self, path: str) -> str:
        """``os.path.realpath(path)`` for an absolute ``path``."""
        folder, name = os.path.split(path)
        real_folder = self._folders.get(folder)
        if real_folder is None:
            real_folder = self._folders[folder] = os.path.realpath(folder)
        real = os.path.join(real_folder, name)
        return os.path.realpath(real) if os.path.islink(real) else real
