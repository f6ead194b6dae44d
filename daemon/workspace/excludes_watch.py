"""The watch on the user's git excludes file (git's ``core.excludesFile``), for the workspace watcher.

git applies that file in every work tree, yet it lies outside every folder, as a rule, so no
folder's watch sees its edit. ``ExcludesFileWatch`` watches it on its own: one watch per such
file (one for every folder, as a rule), on its directory and, where it is a symlink (into a
dotfiles folder: stow, chezmoi), on its target's too. Each of its events is reported as the
file's own path; the watcher (daemon/workspace/watcher.py) then reads every folder's rules again and
rescans every folder.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler

from ngramd.index.workspace import user_excludes_file


class _FileCollector(FileSystemEventHandler):
    """The events of one file, from non-recursive watches on its directory and, where ``path`` is a
    symlink, on its target's (``real``, its resolved path); each is reported as ``path``."""

    def __init__(self, sink: Callable[[str], None], path: Path, real: str) -> None:
        self._sink = sink
        self._path = os.fspath(path)
        self._names = {self._path, real}

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not self._names.isdisjoint((os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or ""))):
            self._sink(self._path)


class ExcludesFileWatch:
    """The user's excludes files watched so far, on ``observer``; their events go to ``sink`` (a path).

    ``path in watch`` tells whether ``path`` is one of them (a dict lookup, no lock: every file
    event asks it). ``watches`` maps each to the watches on its directory and its
    target's; it only grows.
    """

    def __init__(self, observer: Any, sink: Callable[[str], None], event_filter: list[type]) -> None:
        self._observer = observer
        self._sink = sink
        self._event_filter = event_filter
        self.watches: dict[Path, list[Any]] = {}
        self._lock = threading.Lock()

    def __contains__(self, path: Path) -> bool:
        return path in self.watches

    def watch_for(self, root: Path) -> None:
        """Watch the user's excludes file that git applies in ``root``, unless it is watched already.
        None where its directory is not there (nor git), tried again at the next call (the next
        add_folder). Where it is a symlink, one more watch on its target's directory: the target is
        what gets edited, and a watch on the link's directory sees only the link. The target is
        resolved once: a link retargeted later to another directory, or a dangling one whose target
        directory comes later, is not followed."""
        try:
            path = user_excludes_file(root)
        except (OSError, subprocess.SubprocessError):
            return
        if not path.is_absolute():  # relative to a work tree's top: rare, left unwatched
            return
        with self._lock:
            if path in self.watches:
                return
            real = os.path.realpath(path)
            collector = _FileCollector(self._sink, path, real)
            try:
                watch = self._observer.schedule(collector, str(path.parent), recursive=False,
                                                event_filter=self._event_filter)
            except OSError:  # no such directory: git reads no file there either
                return
            watches = self.watches[path] = [watch]
            if os.path.dirname(real) != str(path.parent):  # a link, or a link's folder (stow folds trees)
                try:
                    watches.append(self._observer.schedule(collector, os.path.dirname(real), recursive=False,
                                                           event_filter=self._event_filter))
                except OSError:  # a dangling link: git reads no file either
                    pass
