"""Which paths of a workspace folder are ignored, as the scan decides: ``.gitignore`` files, and
in a git work tree the rules git adds and the files git tracks anyway.

Vocabulary (the watcher's, daemon/workspace/watcher.py, which asks this for every file event):
- *rules*: the folder's ``.gitignore`` files, by git's rule (the deepest matching pattern
  decides: ``workspace.gitignored``, shared with the scan's walk); in a git work tree also the
  rules git adds (``workspace.git_exclude_rules``: ``info/exclude``, the user's excludes file,
  the .gitignore files above the folder).
- *tracked ignored*: files the rules match that git tracks all the same (``git add -f``): the
  scan's ``git ls-files`` lists them, so they are not ignored (``workspace.tracked_ignored``).
- *nested repository*: a folder holding a repository whose files the outer one does not list: an
  untracked one (``git ls-files -o`` lists it as one ``name/``) or a submodule (one gitlink entry);
  the scan indexes none of its files and every path below it is ignored
  (``workspace.nested_repositories``: git decides, not a ``.git`` on disk; where the outer
  repository tracks files in a folder that became a repository, git lists them still, and they
  are followed).
- *git's answer*: the rules, tracked files and nested repositories git gave, replaced whole:
  ``ignored_now`` reads it without running git (the watcher's event thread must never wait on git);
  ``ignored`` and ``tracked_changes`` run git when it is out of date (on the watcher's git thread,
  or a scan's).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pathspec

from ngramd.index.workspace import (git_exclude_rules, git_index, gitignored, ignore_file_bytes, ignore_spec_of,
                             tracked_ignored, nested_repositories)

log = logging.getLogger("ngramd.watcher")
# A file changed this recently (its ctime) may change again within the filesystem's timestamp
# granularity (a clock tick; 1 or 2 s on some) and keep every field of its stat (rewritten in place
# at the same size): it is read again until then, as git does with its "racily clean" entries.
_SETTLED_NS = 3_000_000_000
_UNASKED = object()  # git not asked yet: equal to no state of its index file


@dataclass(frozen=True)
class _GitAnswer:
    """What git said about one folder, replaced whole (one assignment): the flusher reads it with
    no lock, while git runs for the next one on another thread."""
    rules_generation: int  # the ``forget_git_rules`` count the rules were read after (-1: not yet)
    index: Path | None = None  # git's index file; None where the scan walks
    rules: list[tuple[Path, pathspec.PathSpec]] = field(default_factory=list)  # git_exclude_rules
    tracked_stat: object = _UNASKED  # the index file's _stat_key when git's listings last answered
    asked_stat: object = _UNASKED  # ... when they last ran, answered or failed (no answer: keep the last)
    tracked_files: frozenset[Path] = frozenset()  # the tracked files the rules match
    tracked: frozenset[Path] = frozenset()  # those files and their folders
    repositories: frozenset[Path] = frozenset()  # the nested repositories (nested_repositories)


class Ignorer:
    """``.gitignore`` matching for one folder (``workspace.gitignored``, as the scan's walk);
    specs cached by the file's stat signature (``_file_signature``, once ``_settled``; until then
    by its bytes, read at each look-up).

    Where the scan lists files with git (``git ls-files --exclude-standard``), the rules git adds
    apply too (``workspace.git_exclude_rules``: ``info/exclude``, the user's excludes file, the
    .gitignore files above the folder), read once and again after ``forget_git_rules``. A file
    git tracks is not ignored even when the rules match it (``git add -f``), as the scan
    indexes it; nor is a folder that holds one. A path below a nested repository is ignored
    (git lists none of its files). Those files and repositories (``workspace.tracked_ignored``,
    ``workspace.nested_repositories``) are asked of git when ``ignored`` runs or the folder's
    periodic check (``tracked_changes``) does, again only once git's index file changed (a ``git
    add``) or ``forget_git_rules`` was called (a ``.gitignore`` in or above the folder changed, or a
    rescan begins: a ``.git`` made or removed brings one).

    ``ignored`` asks git when its answer is out of date; ``ignored_now`` never does (the watcher's
    flusher must not wait on git): it says None where the answer needs git's next one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # directory -> its .gitignore's _file_signature (None: read again), bytes and patterns
        self._specs: dict[Path, tuple[tuple[int, ...] | None, bytes | None, pathspec.PathSpec | None]] = {}
        self._lock = threading.Lock()
        self._git_lock = threading.Lock()  # one git run at a time
        self._rules_wanted = 0  # bumped by forget_git_rules: an answer read before is out of date
        self._answer = _GitAnswer(rules_generation=-1)
        # what ``tracked_changes`` last answered from: the index file's _stat_key, the files
        self._reconciled_stat: object = _UNASKED
        self._reconciled_files: frozenset[Path] = frozenset()
        self._reported_repositories: frozenset[Path] | None = None  # what repositories_changed last saw

    def ignored(self, path: Path) -> bool:
        parts = self._parts(path)
        if parts is None:
            return True
        if self._asked_git().index is not None:
            with self._git_lock:
                self._refresh_listings(retry_failed=False)  # a path asks again at a change, not at each event
        answer = self._answer
        if _below_any(path, answer.repositories):
            return True
        return self._matches_rules(parts, answer.rules) and path not in answer.tracked

    def ignored_now(self, path: Path, is_dir: bool = False) -> bool | None:
        """``ignored`` from git's last answer, without running git (a stat of its index file at
        most); None when that answer is out of date for ``path``: the rules are to be read again,
        git's listings were not read since (the nested repositories are not known), or the rules
        match it and git's index file changed since ls-files last ran. ``is_dir``: ``path`` is a
        folder (a pattern ending in "/", ``deps/``, matches folders only)."""
        parts = self._parts(path)
        if parts is None:
            return True
        answer = self._answer
        if answer.rules_generation != self._rules_wanted:
            return None
        if answer.index is not None and answer.asked_stat is _UNASKED:
            return None
        if _below_any(path, answer.repositories):
            return True
        if not self._matches_rules(parts, answer.rules, is_dir):
            return False
        if answer.index is None:
            return True  # the scan walks: the rules alone decide
        if _stat_key(answer.index) not in (answer.tracked_stat, answer.asked_stat):
            return None
        return path not in answer.tracked

    def in_nested_repository(self, path: Path) -> bool:
        """Whether ``path`` lies below a nested repository, by git's last answer (no git run);
        a path inside a ``.git`` is not (ignored whatever git says)."""
        return self._parts(path) is not None and _below_any(path, self._answer.repositories)

    def repositories_changed(self) -> bool:
        """Whether git's answer holds other nested repositories than at the last call (False at
        the first: a scan calls it as it begins, after ``tracked_changes``). A ``git rm --cached`` of
        a folder that holds a repository, say, changes what the scan lists with no file event."""
        now = self._answer.repositories
        with self._lock:  # from the scan's thread and the git thread
            before, self._reported_repositories = self._reported_repositories, now
        return before is not None and before != now

    def git_outdated(self) -> bool:
        """Whether ``tracked_changes`` would run git (the rules are to be read again, or git's
        index file changed since it last answered); costs a stat, runs no git."""
        answer = self._answer
        if answer.rules_generation != self._rules_wanted:
            return True
        return answer.index is not None and _stat_key(answer.index) != self._reconciled_stat

    def forget_git_rules(self) -> None:
        """Ask git again at the next path: its rules may have changed (a ``.gitignore`` did, or a rescan begins)."""
        with self._lock:  # from watchdog's thread, the flusher, scan threads: no increment lost
            self._rules_wanted += 1

    def _parts(self, path: Path) -> tuple[str, ...] | None:
        """``path``'s parts below the folder; None when it is ignored whatever the rules (outside, or in .git)."""
        try:
            parts = path.relative_to(self.root).parts
        except ValueError:
            return None  # outside the folder
        return None if ".git" in parts else parts

    def _matches_rules(self, parts: tuple[str, ...], git_rules: list[tuple[Path, pathspec.PathSpec]],
                       is_dir: bool = False) -> bool:
        specs = list(git_rules)  # lowest precedence first, as gitignored wants them
        directory = self.root
        for i, name in enumerate(parts):  # each folder on the way down, as the walk goes, then the path
            spec = self._spec(directory)
            if spec is not None:
                specs.append((directory, spec))
            if gitignored(specs, directory / name, is_dir=is_dir or i < len(parts) - 1):
                return True
            directory = directory / name
        return False

    def _asked_git(self) -> _GitAnswer:
        """Git's answer with the rules it adds (none where the scan walks: ``index`` is None); git is
        asked again once ``forget_git_rules`` was called."""
        with self._git_lock:
            wanted = self._rules_wanted  # before the git runs: a change during them asks again
            if self._answer.rules_generation != wanted:
                index = git_index(self.root)
                try:
                    rules = [] if index is None else git_exclude_rules(self.root)
                except Exception:  # still an answer: paths waiting on it would ask git again at once, forever
                    log.exception("reading git's ignore rules for %s failed: keeping the last ones", self.root)
                    rules = self._answer.rules
                # the repositories git last listed stand until its listings answer again (a failure keeps them)
                repositories = self._answer.repositories if index is not None else frozenset()
                self._answer = _GitAnswer(wanted, index, rules, repositories=repositories)
                self._reconciled_stat = _UNASKED  # the rules may match other tracked files now
            return self._answer

    def tracked_changes(self) -> frozenset[Path]:
        """The files that joined or left ``workspace.tracked_ignored`` since the last call (all of
        them at the first; a scan calls it as it begins): a ``git add -f`` or ``git rm --cached``
        changes what the scan lists with no file event, as nothing under .git is watched. Where
        the scan walks, or git's index file is as it was, that costs a stat (and git's runs once
        after ``forget_git_rules``)."""
        self._asked_git()
        with self._git_lock:
            if self._answer.index is None:
                return frozenset()
            index_stat = self._refresh_listings(retry_failed=True)
            if index_stat == self._reconciled_stat:
                return frozenset()
            tracked_files = self._answer.tracked_files
            changed = tracked_files ^ self._reconciled_files
            self._reconciled_stat, self._reconciled_files = index_stat, tracked_files
            return changed

    def _refresh_listings(self, retry_failed: bool) -> object:
        """Ask git for the tracked files the rules match and the nested repositories once its
        index file changed (under ``_git_lock``); the index file's _stat_key they were read at.
        ``retry_failed``: ask again where git failed at this state of its index (the periodic
        check does; a path does not, or each event would wait on a failing git)."""
        answer = self._answer
        if answer.index is None:
            return answer.tracked_stat  # the scan walks: it applies the rules to every file
        index_stat = _stat_key(answer.index)  # before ls-files: a later change asks again
        if index_stat == answer.tracked_stat or (not retry_failed and index_stat == answer.asked_stat):
            return answer.tracked_stat
        files = tracked_ignored(self.root)
        repositories = nested_repositories(self.root)
        # what git failed to list (a timeout, no fork) is kept as it was, and asked again by the
        # periodic check, or by a path once git's index file changed
        answer = replace(answer, asked_stat=index_stat)
        if files is not None:
            tracked = files.union(p for f in files for p in f.parents if self.root in p.parents)
            answer = replace(answer, tracked_files=files, tracked=tracked)
        if repositories is not None:
            answer = replace(answer, repositories=repositories)
        if files is None or repositories is None:
            log.warning("git ls-files failed in %s: its tracked ignored files and nested repositories"
                        " are as they were", self.root)
            self._answer = answer
            return self._answer.tracked_stat
        self._answer = replace(answer, tracked_stat=index_stat)
        return index_stat

    def _spec(self, directory: Path) -> pathspec.PathSpec | None:
        gi = directory / ".gitignore"
        try:
            st = gi.stat()
        except OSError:
            return None
        signature = _file_signature(st)
        with self._lock:
            cached = self._specs.get(directory)
            if cached and cached[0] == signature:
                return cached[2]
            try:
                data = ignore_file_bytes(gi)
            except OSError:
                data = None
            # compiled again only when its bytes differ: a file changed recently (a checkout) is read
            # for every path, and compiling it each time made 2000 lookups take 4 s, not 1
            spec = cached[2] if cached and cached[1] == data else ignore_spec_of(data)
            # a file changed just now may change again with the same signature: read it again next time
            self._specs[directory] = (signature if _settled(st) else None, data, spec)
            return spec


def _below_any(path: Path, folders: frozenset[Path]) -> bool:
    """Whether ``path`` lies below one of ``folders`` (not one of them itself)."""
    return bool(folders) and any(p in folders for p in path.parents)


def _stat_key(path: Path) -> tuple[int, ...] | None:
    """What tells a rewritten file (git replaces its index file on each change: a new inode, so
    a replacement within one timestamp tick at the same size is told too); None when absent.
    The ctime as for ``.gitignore``: an index file restored with its old mtime (``cp -p``, a backup)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _file_signature(st)


def _file_signature(st: os.stat_result) -> tuple[int, ...]:
    """What tells a changed ``.gitignore``: not its mtime alone, which a rewrite within the
    timestamp granularity keeps and ``git checkout``, ``cp -p`` or ``touch -d`` set back; the
    ctime no one can set, the inode (a file replaced), and the size."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(st: os.stat_result) -> bool:
    """Whether the file last changed long enough ago that its next change will change its stat."""
    return time.time_ns() - st.st_ctime_ns >= _SETTLED_NS
