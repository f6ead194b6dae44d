"""Workspace folders: background indexing and watchdog file events, coalesced.

Vocabulary:
- *folder*: a workspace root the daemon indexes and watches.
- *event*: a watchdog create / modify / delete / move; a move is a delete of
  its source and a create of its destination.
- *burst*: many events close together (a ``git checkout``). Paths are collected
  in a set and flushed once no event has come for ``debounce_s`` (or after
  ``max_delay_s`` of continuous events), so each file is re-indexed once.
- *ignored* (daemon/workspace/ignorer.py, one ``Ignorer`` per folder): inside ``.git`` or ignored by the ``.gitignore`` files in the folder
  and the directories between it and the file, by git's rule (the deepest matching
  pattern decides: ``workspace.gitignored``, shared with the scan's walk); in a git
  work tree also by the rules git adds (``workspace.git_exclude_rules``: ``info/exclude``,
  the user's excludes file, the .gitignore files above the folder), unless git
  tracks the file (the scan's ``git ls-files`` lists it: ``workspace.tracked_ignored``, followed
  through ``git add -f`` and ``git rm --cached`` too: git's index file is checked with the folder
  every ``GONE_POLL_S``); or a symlink to a file outside the folder (``workspace.links_outside``, as the scan),
  or to a file of the folder that is not ignored (indexed once, under its own path). A path held
  by several folders is the deepest one's: a nested repository added as a folder of its own
  decides for its files. In a git work tree, a path below a repository whose files the outer one
  does not list is ignored too: an untracked one (``git ls-files -o`` lists it as one ``name/``)
  or a submodule (one gitlink entry); see ``workspace.nested_repositories``. git decides, not a
  ``.git`` on disk: where the outer repository tracks files in a folder that became a
  repository, git lists them, and new files there, as before, and they are followed. git is asked for them with the tracked files (when a
  scan begins, and once git's index file changed); when they change, the folder is rescanned
  (their files leave the listing or join it with no event of theirs), and a delete below one still
  leaves the index. Where the scan walks, nested repositories are walked and followed alike.
- *asking git* (daemon/workspace/folder_git.py, one ``FolderGit`` per folder): git runs on a thread per
  folder, one run at a time, never on the flusher's: a slow or hanging git would hold every
  folder's events. A path whose verdict needs git's next answer (the rules are being read again,
  or they match it and git's index changed) waits for it and is applied then; every other path
  goes on. What git's answer changed among the tracked files is applied here (``_reconcile_tracked``).
- *shadowed*: a path that an editor holds open; the open buffer wins over the
  disk, so its file events are skipped (``is_open``) until the buffer closes.
- *rescan*: ``index_workspace`` again over a folder, after one of its
  ``.gitignore`` files or its repository's ``.git/info/exclude`` changed (files they now
  ignore leave the index), or after a ``.git`` was made or removed in it (``git init``, a clone,
  ``rm -rf .git``: a repository's files leave the folder's listing or join it, with no event of
  theirs), every folder's after the user's excludes file changed (a watch on its directory, and on
  its target's where it is a symlink: daemon/workspace/excludes_watch.py), or after the folder itself was
  replaced; the folder's rules from git are read again. One scan per folder runs at a time; a
  request during a scan runs once more after it.
- *watch*: one recursive watchdog watch per folder. watchdog gives every watch of one path the same
  emitter, and unscheduling one tears it down for all: a thread of a folder removed meanwhile (the
  watch of its first add, still being set up) that unscheduled its own would leave the folder added
  again deaf. So a folder's watch is scheduled, recorded and unscheduled under a lock of its own
  (``_watch_locks``), for its current state only, and a new one replaces the one recorded before.
- *forget*: a removed folder's files leave the index on a thread of their own (``forget_root``),
  which also drops the folder from the index's scanned folders: a scan of the folder added again
  begins only once that is over (a scan running meanwhile would install nothing more), and a forget
  that finds the folder added again leaves its files to that scan.
- *gone*: a folder deleted (or moved away) while watched; its inotify watch went
  with it, and its files leave the index. Every folder's directory is checked every
  ``GONE_POLL_S`` (a move sends no event); when a directory is there again it is
  watched and rescanned.

The indexing itself is the index's (``index_workspace``, ``index_file``,
``remove_tree``); this module only decides *when* and *what*.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from watchdog.events import (DirCreatedEvent, DirDeletedEvent, DirMovedEvent, FileClosedEvent,
                             FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent,
                             FileSystemEvent, FileSystemEventHandler)
from watchdog.observers import Observer

from ngramd.daemon.workspace.excludes_watch import ExcludesFileWatch
from ngramd.daemon.workspace.folder_git import FolderGit
from ngramd.daemon.workspace.ignorer import Ignorer
from ngramd.daemon.workspace.overflow_alarm import OverflowAlarm
from ngramd.daemon.workspace.priority import lower_this_thread
from ngramd.index.workspace import links_outside

# watchdog's inotify warns (with the whole watch table: KBs to MBs) when a recursive watch adds an
# inotify watch it holds already: a folder made with folders in it (``git init``, ``mkdir -p``) is
# walked at its own event, then each subfolder again at its own; a folder moved out of the tree
# and back kept its watch. The callback "overwritten" is the same object (keyed by its id(), and
# held by the table): nothing is lost or leaked.
warnings.filterwarnings("ignore", message="Callback with id .* already exists", category=RuntimeWarning,
                        module="watchdog.observers.inotify")

log = logging.getLogger("ngramd.watcher")
GONE_POLL_S = 2.0  # how often a gone folder is looked for again
DELETED = "deleted"  # a folder's inode once its directory was deleted: equal to no real one


# The events that can change what is indexed. Asked of the kernel (the inotify mask), not
# filtered afterwards: with reads (IN_OPEN, IN_CLOSE_NOWRITE) in the mask, our own indexing
# and watchdog's rescans of a big tree (.venv, node_modules) overflow the inotify queue,
# and each overflow triggers another rescan, without end.
CHANGE_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent,
                 DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class _Collector(FileSystemEventHandler):
    def __init__(self, sink: Callable[[str], None], root: Path, on_root_deleted: Callable[[], None]) -> None:
        self._sink = sink
        self._root = str(root)
        self._on_root_deleted = on_root_deleted

    def on_any_event(self, event: FileSystemEvent) -> None:
        # only CHANGE_EVENTS arrive: watchdog's emitters apply ``event_filter`` on every platform
        if isinstance(event, DirDeletedEvent) and os.fsdecode(event.src_path) == self._root:
            self._on_root_deleted()  # before its path is queued: the flusher must see it
        self._sink(os.fsdecode(event.src_path))
        dest = getattr(event, "dest_path", "")
        if dest:
            self._sink(os.fsdecode(dest))


class WorkspaceWatcher:
    """Index folders in the background, then keep them current from file events.

    ``index`` is an NgramIndex (``index_workspace``, ``index_file``, ``remove_tree``, ``forget_root``);
    ``is_open(path)`` tells whether an editor holds that file open.
    """

    def __init__(self, index: Any, is_open: Callable[[Path], bool],
                 debounce_s: float = 0.2, max_delay_s: float = 2.0) -> None:
        self.index = index
        self.is_open = is_open
        self.debounce_s = debounce_s
        self.max_delay_s = max_delay_s
        self.folders: dict[Path, dict[str, Any]] = {}  # root -> progress/status
        # root -> the folder's FolderGit, which holds its Ignorer (``.ignorer``): one record, made
        # and dropped with the folder. git runs on a thread per folder (daemon/workspace/folder_git.py), not
        # the flusher's: a slow git must not hold file events.
        self._gits: dict[Path, FolderGit] = {}
        self._watches: dict[Path, Any] = {}
        # root -> the lock its watch is scheduled and unscheduled under (see *watch*); kept once made
        self._watch_locks: dict[Path, threading.Lock] = {}
        # root -> set once the files of its last remove_folder are forgotten (see *forget*)
        self._forgets: dict[Path, threading.Event] = {}
        self._gone: set[Path] = set()  # folders whose directory is not there
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()
        self._excludes = ExcludesFileWatch(self._observer, self._on_event, CHANGE_EVENTS)
        self._overflow_alarm = OverflowAlarm(self._on_overflow)
        self._overflow_alarm.install()
        self._pending: set[str] = set()
        self._first_pending = 0.0
        self._last_event = 0.0
        self._cond = threading.Condition()
        # folders and their FolderGits (ignorers) change under this lock (file events are checked against
        # them on the flusher thread)
        self._folders_lock = threading.Lock()
        self._stop = threading.Event()
        # Bumped from watchdog's thread, the flusher and the forget threads: only through _count.
        self.counts = {"events": 0, "flushes": 0, "reindexed": 0, "removed": 0,
                       "ignored": 0, "shadowed": 0, "forgotten": 0, "overflows": 0}
        self._counts_lock = threading.Lock()
        self._flusher = threading.Thread(target=self._flush_loop, name="ngramd-watch", daemon=True)
        self._flusher.start()

    # -- folders --------------------------------------------------------------------------

    def add_folder(self, root: Path) -> bool:
        """Start indexing and watching ``root``; False if it is already watched."""
        root = root.resolve()
        with self._folders_lock:
            if root in self.folders:
                return False
            state: dict[str, Any] = {"path": str(root), "state": "indexing", "progress": None,
                                     "_stop": threading.Event(), "_inode": _inode(root)}
            self.folders[root] = state
            self._watch_locks.setdefault(root, threading.Lock())
            ignorer = Ignorer(root)
            self._gits[root] = FolderGit(root, ignorer, self._folders_lock,
                                         lambda: self._is_current(root, ignorer),
                                         lambda changed: self._reconcile_tracked(root, ignorer, changed),
                                         self._requeue,
                                         lambda: self._repositories_changed(root, ignorer))
        # The watch walks the folder's tree (an inotify watch per directory: 0.23 s for 8,700
        # directories here), so it is set up on a thread of its own, not the caller's (the
        # daemon's event loop, which answers every editor); the scan begins once it is in place,
        # so no change is missed.
        try:
            threading.Thread(target=self._watch_then_scan, args=(root, state), name="ngramd-watch",
                             daemon=True).start()
        except Exception:  # no thread: not watched, so an add_folder later can try again
            with self._folders_lock:
                if self.folders.get(root) is state:
                    del self.folders[root]
                    self._gits.pop(root, None)
            raise
        return True

    def _watch_then_scan(self, root: Path, state: dict[str, Any]) -> None:
        if state["_stop"].is_set():  # removed, or the watcher stopped, before this thread ran
            return
        try:
            self._excludes.watch_for(root)
        except Exception:  # the folder is watched and indexed all the same
            log.exception("watching the user's excludes file for %s failed", root)
        try:
            self._watch(root, state)
        except Exception:  # an observer stopping meanwhile, say: the scan still indexes the folder
            log.exception("watching %s failed", root)
        self._scan(root, state)

    def _watch(self, root: Path, state: dict[str, Any]) -> None:
        """Watch ``root`` for ``state``, if it is still the folder's (see *watch*): a new watch, the
        one recorded before (a directory deleted since, say) unscheduled first."""
        with self._watch_locks[root]:
            with self._folders_lock:
                if self.folders.get(root) is not state:  # removed, or added again: not this state's to watch
                    return
                old = self._watches.pop(root, None)
            if old is not None:  # else the new handler would join its emitter, perhaps stopped
                self._unschedule(old)
            try:
                collector = _Collector(self._on_event, root, lambda: self._root_deleted(root, state))
                watch = self._observer.schedule(collector, str(root), recursive=True, event_filter=CHANGE_EVENTS)
                state.pop("watch_error", None)
            except OSError as exc:  # e.g. the inotify watch limit
                state["watch_error"] = str(exc)
                return
            with self._folders_lock:
                if self.folders.get(root) is state:
                    self._watches[root] = watch
                    return
            self._unschedule(watch)  # removed meanwhile; under the lock, so no new watch shares its emitter

    def _unwatch(self, root: Path, watch: Any) -> None:
        """Unschedule ``watch``, read as ``root``'s, unless another replaced it since (whose _watch
        unscheduled it): that one may share its emitter (see *watch*)."""
        with self._watch_locks[root]:
            with self._folders_lock:
                if self._watches.get(root) is not watch:
                    return
                del self._watches[root]
            self._unschedule(watch)

    def _unschedule(self, watch: Any) -> None:
        try:
            self._observer.unschedule(watch)
        except Exception:  # its emitter may have stopped with the directory
            log.debug("unscheduling a watch failed", exc_info=True)

    def _scan(self, root: Path, state: dict[str, Any]) -> None:
        """(Re)index ``root`` in the background; during a scan, once more after it."""
        with self._folders_lock:
            if self.folders.get(root) is not state:
                return
            git = self._gits.get(root)
            if git is not None:  # what git ignores is read again, as the scan asks git again
                git.ignorer.forget_git_rules()
            if state.get("_scanning"):
                state["_rescan"] = True
                return
            state["_scanning"] = True
        try:
            threading.Thread(target=self._index_folder, args=(root, state, state["_stop"]),
                             name="ngramd-index", daemon=True).start()
        except Exception as exc:  # no thread (the process at its limit): no scan in progress either,
            # else every later rescan would wait for it, forever
            with self._folders_lock:
                state["_scanning"] = False
                state.pop("_rescan", None)
                state["state"] = "error"
                state["error"] = f"starting the scan failed: {type(exc).__name__}: {exc}"
            log.exception("starting the scan of %s failed: scanning again at the next need", root)

    def remove_folder(self, root: Path) -> bool:
        """Stop indexing and watching ``root``; False if it was not watched.

        Its files then leave the index, on a thread of their own (dropping a big
        folder can set off a merge of the index), except those another watched
        folder holds and does not ignore; a scan of it added again waits for that (see *forget*).
        """
        root = root.resolve()
        with self._folders_lock:
            state = self.folders.pop(root, None)
            if state is None:
                return False
            state["_stop"].set()
            watch = self._watches.get(root)
            self._gits.pop(root, None)
            self._gone.discard(root)
            others = [(r, git.ignorer) for r, git in self._gits.items()]
            previous = self._forgets.get(root)
            done = self._forgets[root] = threading.Event()
        if watch is not None:
            # not under the folders lock: watchdog unschedules under its own lock, which its thread
            # holds while it hands us events, and a handler (``_root_deleted``) takes the folders lock
            self._unwatch(root, watch)

        def covered(key: str) -> bool:
            path = Path(key)
            return any(r in path.parents and not ig.ignored(path) for r, ig in others)

        def forget() -> None:
            try:
                lower_this_thread()
                if previous is not None:  # the removes of a folder are forgotten in their order
                    previous.wait()
                with self._folders_lock:
                    if root in self.folders:  # added again: its new scan, which waits for this, decides
                        return
                self._count("forgotten", self.index.forget_root(root, covered))
            except Exception:
                log.exception("dropping the files of %s failed", root)
            finally:
                self._forgotten(root, done)
            for holder, _ in others:  # a folder around it scanned around it: its files are the holder's now
                if holder in root.parents:
                    self._rescan(holder)

        try:
            threading.Thread(target=forget, name="ngramd-forget", daemon=True).start()
        except Exception:  # no thread: nothing to wait for (a scan of the folder added again would, forever)
            self._forgotten(root, done)
            raise
        return True

    def _forgotten(self, root: Path, done: threading.Event) -> None:
        """The forget of a remove_folder of ``root`` is over (``done``): a scan of it may begin."""
        done.set()
        with self._folders_lock:
            if self._forgets.get(root) is done:
                del self._forgets[root]

    def _after_forget(self, root: Path) -> None:
        """Wait for the forget of ``root``'s last remove_folder (see *forget*)."""
        with self._folders_lock:
            done = self._forgets.get(root)
        if done is not None:
            done.wait()

    def _index_folder(self, root: Path, state: dict[str, Any], stop: threading.Event) -> None:
        def progress(done: int, total: int) -> None:
            state["progress"] = {"done": done, "total": total}
        lower_this_thread()
        while True:
            t0 = time.monotonic()
            state["state"] = "indexing"
            state.pop("error", None)
            try:
                self._after_forget(root)  # else it would drop the folder from the index as this scan runs
                with self._folders_lock:
                    git = self._gits.get(root)
                if git is not None:  # the scan lists what git tracks now: later changes are from there
                    git.ignorer.tracked_changes()
                    git.ignorer.repositories_changed()
                counts = self.index.index_workspace(root, progress=progress, stop_event=stop)
                state["counts"] = counts if isinstance(counts, dict) else {"result": str(counts)}
                state["state"] = "stopped" if stop.is_set() else "ready"
            except Exception as exc:  # an unreadable folder must not kill the daemon
                if not root.is_dir():  # it went away as the scan began: the watch reports it gone
                    log.warning("indexing %s stopped: the folder is gone", root)
                else:
                    log.exception("indexing %s failed", root)
                state["state"] = "error"
                state["error"] = f"{type(exc).__name__}: {exc}"
            state["seconds"] = round(time.monotonic() - t0, 3)
            with self._folders_lock:
                if root in self._gone:
                    state["state"] = "gone"
                if stop.is_set() or not state.pop("_rescan", False):
                    state["_scanning"] = False
                    return

    def status(self) -> dict[str, Any]:
        states = list(self.folders.values())  # C-level copies (dict(), list()): no lock on the event
        # loop, and no "dict changed size" while a scan thread adds or pops a key
        return {"folders": [{k: v for k, v in dict(s).items() if not k.startswith("_")} for s in states],
                "events": dict(self.counts), "pending": len(self._pending)}

    def _count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``: a ``+=`` from two threads at once could lose one."""
        with self._counts_lock:
            self.counts[name] += n

    # -- events ---------------------------------------------------------------------------

    def _on_event(self, path: str) -> None:
        with self._cond:
            now = time.monotonic()
            if not self._pending:
                self._first_pending = now
            self._pending.add(path)
            if os.path.basename(path) == ".gitignore":  # before the flush handles the files it matches
                for root, git in list(self._gits.items()):
                    if _rules_reach(Path(path).parent, root):
                        git.ignorer.forget_git_rules()
            elif _is_info_exclude(Path(path)):  # the rules git adds for the work tree at its top
                top = Path(path).parents[2]
                for root, git in list(self._gits.items()):
                    if root == top or top in root.parents:
                        git.ignorer.forget_git_rules()
            elif Path(path) in self._excludes:  # the user's excludes file: every folder's rules
                for git in list(self._gits.values()):
                    git.ignorer.forget_git_rules()
            self._last_event = now
            self._count("events")
            self._cond.notify()

    def _requeue(self, paths: set[str]) -> None:
        """Have the flusher apply ``paths`` again (no new event: not counted, no debounce restart)."""
        if not paths:
            return
        with self._cond:
            if not self._pending:
                self._first_pending = time.monotonic()
            self._pending.update(paths)
            self._cond.notify()

    def _flush_loop(self) -> None:
        lower_this_thread()
        checked = 0.0
        while not self._stop.is_set():
            if time.monotonic() - checked >= GONE_POLL_S:
                # Every folder, not only the gone ones: one moved away sends no event
                # (watchdog drops inotify's IN_MOVE_SELF).
                checked = time.monotonic()
                with self._folders_lock:
                    roots = list(self.folders)
                for root in roots:
                    try:
                        self._check_root(root)
                        self._follow_tracked(root)
                    except Exception:  # the flusher must live on: every folder's events need it
                        log.exception("checking workspace folder %s failed", root)
            with self._cond:
                if not self._pending:
                    self._cond.wait(GONE_POLL_S)
                    continue
                if self._stop.is_set():
                    return
                now = time.monotonic()
                quiet = now - self._last_event
                waited = now - self._first_pending
                if quiet < self.debounce_s and waited < self.max_delay_s:
                    self._cond.wait(min(self.debounce_s - quiet, self.max_delay_s - waited))
                    continue
                batch, self._pending = self._pending, set()
            self._count("flushes")
            for path in sorted(batch):
                try:
                    self._apply(Path(path))
                    self._follow_links_to(Path(path))
                except Exception:  # one bad file must not stop the others
                    log.exception("re-indexing %s failed", path)
            self._refresh_counts()

    def _refresh_counts(self) -> None:
        """After a flush: each scanned folder's ``indexed`` and ``tokens`` counts as the index
        holds them now (its other counts are its last scan's); else ``status`` showed the
        first scan's after any number of file events."""
        totals = getattr(self.index, "folder_totals", None)
        if not callable(totals):
            return
        with self._folders_lock:
            states = list(self.folders.items())
        for root, state in states:
            counts = state.get("counts")
            if isinstance(counts, dict) and "indexed" in counts:
                try:
                    state["counts"] = {**counts, **totals(root)}
                except Exception:  # figures only
                    log.exception("counting the files of %s failed", root)

    def _rescan(self, root: Path) -> None:
        """Scan ``root`` again, if it is still a folder (see *rescan*)."""
        state = self.folders.get(root)
        if state is not None:
            self._scan(root, state)

    def _root_of(self, path: Path) -> Path | None:
        """The deepest folder that holds ``path`` (or is it): a nested repository added as a folder
        decides for its own files, by its own repository's rules."""
        for directory in (path, *path.parents):
            if directory in self.folders:
                return directory
        return None

    def _apply(self, path: Path) -> None:
        if path in self._excludes:  # as a .gitignore: every folder's scan decides again
            self._rescan_all()
            return
        with self._folders_lock:
            root = self._root_of(path)
            git = self._gits.get(root) if root is not None else None
            ignorer = git.ignorer if git is not None else None
        if root is None:
            return
        if path == root:  # the folder itself was deleted, moved, or replaced
            self._check_root(root)
            return
        if ignorer is None:
            self._count("ignored")
            return
        if path.parent.parent.parent == root and _is_info_exclude(path):  # as a .gitignore: the scan decides again
            self._rescan(root)
        if path.name == ".git" and ignorer.ignored_now(path.parent, is_dir=True) is not True:
            # a repository made or removed (in a folder not ignored): its files leave the scan's listing
            # or join it, with no event of theirs, so the scan decides again
            self._rescan(root)
        ignored = ignorer.ignored_now(path)
        if ignored is None:  # git's answer is out of date: the path waits for the next one
            self._ask_git(root, waiting=path)
            return
        if path.name == ".gitignore" and (not ignored or ignorer.ignored_now(path.parent, is_dir=True) is False):
            # what the folder ignores changed: the scan decides again (git reads the .gitignore of
            # every folder it walks, one that names itself too). After git's answer only: the
            # rescan reads the rules again, which makes that answer out of date once more.
            self._rescan(root)
        if ignored:
            self._count("ignored")
            if ignorer.in_nested_repository(path) and not os.path.lexists(path):
                # a delete leaves nothing behind, even of a file indexed before git named the repository
                self.index.remove_tree(path)
            return
        if self.is_open(path):
            self._count("shadowed")
            return
        try:
            is_file = path.is_file()  # a symlink to a file too, as the scan indexes it
        except OSError:  # Python 3.11 raises a permission error (a link to /proc/1/root for a user)
            self.index.index_file(path)  # skipped and counted "unreadable", an older copy dropped, as by the scan
            return
        if is_file:
            if links_outside(path, str(root)):  # the scan does not index it either (a link retargeted out leaves)
                self._count("ignored")
                self.index.remove_file(path)
                return
            linked = _links_to_a_held_file(path, ignorer)
            if linked is None:
                self._ask_git(root, waiting=path)
                return
            if linked:  # indexed once, under the target's own path
                self._count("ignored")
                self.index.remove_file(path)
                return
            if self.index.index_file(path):
                self._count("reindexed")
            with self._folders_lock:  # its folder removed meanwhile: keep it only if another holds it
                kept = root in self.folders
                holder = None if kept else self._root_of(path)
                holder_ignorer = self._gits[holder].ignorer if holder is not None else None
            holder_ignores = True if holder_ignorer is None else holder_ignorer.ignored_now(path)
            if not kept and holder_ignores is not False:
                self.index.remove_file(path)
                if holder_ignores is None:  # the other folder decides once git answers it
                    self._ask_git(holder, waiting=path)
        elif path.is_dir():  # its files get their own events (watchdog emits them for moves too)
            if self.index.has_file(path):  # a file replaced by a folder in one burst (a checkout)
                self.index.remove_file(path)
                self._count("removed")
        else:
            # A file, or a whole folder: one moved out of the tree gets a lone delete
            # event for itself and none for its files.
            self.index.remove_tree(path)
            self._count("removed")

    def _follow_links_to(self, target: Path) -> None:
        """A file changed or went away (or a folder holding files): the files indexed under a link
        to it (the scan indexes a link to a file in an ignored folder, or in a nested folder that
        its listing leaves out) get no event of their own."""
        for link in self.index.links_to(target, below=True):
            if os.path.isfile(link) and not self.is_open(Path(link)):
                if self.index.index_file(link):
                    self._count("reindexed")
            elif not os.path.exists(link):  # dangling now
                self.index.remove_file(link)
                self._count("removed")

    def _follow_tracked(self, root: Path) -> None:
        """Have git asked once its index file changed or the rules are to be read again
        (``FolderGit.ask_if_outdated``): a ``git add -f`` or ``git rm --cached`` sends no file event."""
        with self._folders_lock:
            git = None if root in self._gone else self._gits.get(root)
        if git is not None:
            git.ask_if_outdated()

    def _ask_git(self, root: Path, waiting: Path | None = None) -> None:
        """Have git run for ``root`` on the folder's git thread (``FolderGit.ask``); ``waiting``:
        a path that needs git's answer, applied again once it is in."""
        with self._folders_lock:
            git = self._gits.get(root)
        if git is not None:
            git.ask(waiting)

    def _is_current(self, root: Path, ignorer: Ignorer) -> bool:
        """Whether git's answer for ``ignorer`` still counts (under ``_folders_lock``): not for a
        folder removed, added again (another Ignorer), gone, or a watcher stopped."""
        git = self._gits.get(root)
        return git is not None and git.ignorer is ignorer and root not in self._gone and not self._stop.is_set()

    def _reconcile_tracked(self, root: Path, ignorer: Ignorer, changed: frozenset[Path]) -> None:
        """Follow ``git add -f`` and ``git rm --cached`` of files the rules match (``changed``, on
        the git thread): no file event comes (nothing under .git is followed), yet the scan's ``git
        ls-files`` lists them or not. A file git now tracks goes to the flusher as an event would;
        one it left that the rules ignore leaves the index, unless another folder holds it and does
        not ignore it."""
        if not changed:
            return
        with self._folders_lock:
            if not self._is_current(root, ignorer):
                return
        now_tracked = set()
        for path in sorted(changed):
            try:  # one path that fails (unreadable, say) must not lose the others of this change
                if not ignorer.ignored(path):
                    now_tracked.add(str(path))
                    continue
                with self._folders_lock:
                    others = [g.ignorer for r, g in self._gits.items() if r != root and r in path.parents]
                if not any(not ig.ignored(path) for ig in others):  # outside the lock: it may ask git
                    self.index.remove_file(path)
                    self._count("removed")
            except Exception:
                log.exception("following git's tracking of %s failed", path)
        self._requeue(now_tracked)

    def _repositories_changed(self, root: Path, ignorer: Ignorer) -> None:
        """git's answer names other nested repositories in ``root`` (on the git thread): their
        files leave the scan's listing or join it with no event of theirs, so the folder is scanned again."""
        with self._folders_lock:
            if not self._is_current(root, ignorer):
                return
        self._rescan(root)

    def _root_deleted(self, root: Path, state: dict[str, Any]) -> None:
        """The watched directory itself was deleted, and its watch with it (watchdog's thread).

        Its inode is forgotten: a directory made again at once can reuse the number."""
        with self._folders_lock:
            if self.folders.get(root) is state:
                state["_inode"] = DELETED

    def _check_root(self, root: Path) -> None:
        """Follow ``root``'s directory: gone (reported in status), or a new one (watched, rescanned).

        The inotify watch belongs to the directory, not the path: a folder deleted
        and created again needs a new watch, and a new scan for what it holds now."""
        inode = _inode(root)
        with self._folders_lock:
            state = self.folders.get(root)
            if state is None or state["_inode"] == inode:
                return
            state["_inode"] = inode
            old_watch = self._watches.get(root)
            if inode is None:
                self._gone.add(root)
                state["state"] = "gone"
            else:
                self._gone.discard(root)
        if old_watch is not None:
            self._unwatch(root, old_watch)
        if inode is None:
            log.warning("workspace folder %s is gone; watching for it to come back", root)
            self.index.remove_tree(root)  # moved away: no event comes for its files
            return
        log.info("workspace folder %s is back: watching and indexing it again", root)
        self._watch(root, state)
        self._scan(root, state)

    def reindex_from_disk(self, path: Path) -> None:
        """A buffer closed: its file's disk contents count again."""
        self._on_event(str(path))

    def _on_overflow(self) -> None:
        """The kernel dropped file events (daemon/workspace/overflow_alarm.py): every folder is scanned
        again once the burst has had time to end (a scan during one is scanned again after it)."""
        self._count("overflows")
        timer = threading.Timer(max(2 * self.debounce_s, 0.5), self._rescan_all)
        timer.daemon = True
        timer.start()

    def _rescan_all(self) -> None:
        if self._stop.is_set():
            return
        with self._folders_lock:
            states = [(root, state) for root, state in self.folders.items() if root not in self._gone]
        for root, state in states:
            self._scan(root, state)

    def stop(self) -> None:
        self._overflow_alarm.uninstall()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for state in list(self.folders.values()):
            state["_stop"].set()
        try:
            self._observer.stop()
            self._observer.join(5)
        except Exception:
            log.exception("stopping the observer")


def _links_to_a_held_file(path: Path, ignorer: Ignorer) -> bool | None:
    """Whether ``path`` (under a resolved folder) reaches, through a symlink (its own or a folder's
    on its way), a file of the folder that is not ignored: the scan indexes that file under its own
    path (its walk takes real folders first) and the link not at all. None: that needs git's next answer."""
    real = os.path.realpath(path)
    if real == os.fspath(path):
        return False
    target_ignored = ignorer.ignored_now(Path(real))
    return None if target_ignored is None else not target_ignored


def _is_info_exclude(path: Path) -> bool:
    """Whether ``path`` is a repository's ``.git/info/exclude`` (git's rules for its work tree)."""
    return path.name == "exclude" and path.parent.name == "info" and path.parent.parent.name == ".git"


def _rules_reach(directory: Path, root: Path) -> bool:
    """Whether a ``.gitignore`` in ``directory`` can change what the folder ``root`` ignores (or the
    tracked files its rules match): one inside the folder, or one above it (git_exclude_rules)."""
    return directory == root or root in directory.parents or directory in root.parents


def _inode(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path``; None when there is no directory."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
