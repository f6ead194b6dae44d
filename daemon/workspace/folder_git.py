"""Asking git about one watched folder, on a thread of its own (the watcher's *asking git*).

The workspace watcher (daemon/workspace/watcher.py) holds one ``FolderGit`` per folder, made with the
folder's ``Ignorer`` (a folder added again gets new ones of both). git runs on the folder's git
thread, one run at a time, never on the watcher's flusher: a slow or hanging git (a big
repository, a locked index, a network filesystem) would hold every folder's file events.

- *asked*: ``ask`` starts a run, or, during one, has it run once more after it.
- *waiting*: a path whose verdict needs git's next answer (``Ignorer.ignored_now`` said None);
  it is handed back to the flusher (``requeue``) once that answer is in.
- *tracked changes*: what ``git add -f`` and ``git rm --cached`` changed among the files the rules
  match (``Ignorer.tracked_changes``, git's run); handed to ``on_tracked_changes`` on this thread.
- *repositories changed*: git's answer holds other nested repositories than before
  (``Ignorer.repositories_changed``): ``on_repositories_changed`` is called on this thread.
- *current*: whether git's answer still counts; not for a folder removed, added again, gone, or a
  watcher stopped. Asked of the watcher (``is_current``, under its folders lock ``lock``, which
  guards this object's state too); a run that is no longer current drops its waiting paths.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from ngramd.daemon.workspace.ignorer import Ignorer
from ngramd.daemon.workspace.priority import lower_this_thread

log = logging.getLogger("ngramd.watcher")


class FolderGit:
    """git's runs for the folder ``root`` (its ``ignorer``), one at a time on a thread of their own."""

    def __init__(self, root: Path, ignorer: Ignorer, lock: threading.Lock, is_current: Callable[[], bool],
                 on_tracked_changes: Callable[[frozenset[Path]], None],
                 requeue: Callable[[set[str]], None],
                 on_repositories_changed: Callable[[], None]) -> None:
        self.root = root
        self.ignorer = ignorer
        self._lock = lock
        self._is_current = is_current
        self._on_tracked_changes = on_tracked_changes
        self._requeue = requeue
        self._on_repositories_changed = on_repositories_changed
        # under ``lock``: whether a run is in progress, whether one more is asked for after it,
        # and the paths that wait for its answer
        self._running = False
        self._again = False
        self._waiting: set[str] = set()

    def ask(self, waiting: Path | None = None) -> None:
        """Run git on this folder's thread; asked during a run, it runs once more.
        ``waiting``: a path that needs git's answer, applied again once it is in."""
        with self._lock:
            if not self._is_current():
                return
            if waiting is not None:
                self._waiting.add(str(waiting))
            if self._running:
                self._again = True
                return
            self._running, self._again = True, False
        try:
            threading.Thread(target=self._loop, name="ngramd-git", daemon=True).start()
        except Exception:  # no thread (RuntimeError: the process is at its limit): no run either
            with self._lock:
                # else the folder never asked git again; ``waiting`` waits on, and the next need
                # (a file event, or the folder's check within GONE_POLL_S: git is out of date) starts one
                self._running = False
            log.exception("starting git's thread for %s failed: asking again at the next need", self.root)

    def ask_if_outdated(self) -> None:
        """Ask git once its index file changed or the rules are to be read again: a ``git add -f``
        or ``git rm --cached`` of a file the rules match sends no file event."""
        if self.ignorer.git_outdated():
            self.ask()

    def _loop(self) -> None:
        lower_this_thread()
        while True:
            try:
                self._on_tracked_changes(self.ignorer.tracked_changes())  # git runs here
                if self.ignorer.repositories_changed():
                    self._on_repositories_changed()
            except Exception:
                log.exception("asking git about %s failed", self.root)
            with self._lock:
                waiting, self._waiting = self._waiting, set()
                current = self._is_current()
                again = current and self._again
                self._running, self._again = again, False
            if current:  # else the folder was removed, replaced or stopped: its paths are dropped
                self._requeue(waiting)
            if not again:
                return
