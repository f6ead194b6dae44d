"""Which files of a workspace folder get indexed, and reading them safely.

Discovery respects ``.gitignore``: ``git ls-files -co --exclude-standard``
where the folder is in a git work tree (it lists a tracked file that the rules
match too, as git follows it; the watcher asks ``tracked_ignored``; it applies
``info/exclude`` and the user's excludes file too: ``git_exclude_rules``; a repository inside the
folder whose files the outer one does not list (an untracked one, listed as one ``name/``, or a
submodule, one gitlink entry) is counted as ``nested_repo``: the watcher asks
``nested_repositories``), else a walk
that applies every ``.gitignore`` on the way down (``gitignored``: git's rule, the deepest matching
pattern decides; the watcher uses the same function). The walk follows directory
symlinks that stay inside the folder (by real path), never the same directory
twice, and real paths first (a folder is listed under its own path, not a link's):
a revisit is counted as ``symlink_loop`` when the link points at one of
its own parents, else as ``duplicate``; a link leaving the folder as ``outside_root``.
File symlinks follow the same rule, on either path (git lists a link as a file): one
whose target lies outside the folder is not indexed (``outside_root``), so that no
link drafts from files out of the workspace (the watcher asks ``links_outside`` too);
nor is a file git lists under a folder that is now a link out. A link to a file that
is itself listed is a ``duplicate``: the text is indexed once, under the target's path;
so is a folder link, which git lists as a file (its files have their own paths). A file
git lists that is not on disk (a sparse checkout, a deletion not yet staged) is counted as
``not_on_disk`` and not read.

Reading (``read_text``) drops a leading UTF-8 byte order mark and refuses, with a ``SkipFile`` that says why: files over
the size bound, binary files (a NUL byte in the first 8 KiB, or neither text in UTF-8, in the
encoding a PEP 263 coding line declares, nor Latin-1 with few control characters),
unreadable or vanished files, symlink loops, non-files.
"""

from __future__ import annotations

import codecs
import errno
import logging
import os
import re
import stat
import subprocess
from collections import Counter
from pathlib import Path

import pathspec

log = logging.getLogger("ngramd.workspace")


class SkipFile(ValueError):
    """A file that is not indexed; ``reason`` is one of the stats counter names."""

    def __init__(self, path: str, reason: str, detail: str):
        super().__init__(f"{path}: not indexed ({reason}): {detail}")
        self.path, self.reason = path, reason


def read_text(path: str | os.PathLike, max_bytes: int) -> str:
    """The file's text, or ``SkipFile`` with reason
    ``too_large`` | ``binary`` | ``unreadable`` | ``vanished`` | ``symlink_loop`` | ``not_a_file``."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError as e:
        # A dangling symlink also lands here; either way there is nothing to read.
        raise SkipFile(p, "vanished", str(e)) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SkipFile(p, "symlink_loop", str(e)) from None
        raise SkipFile(p, "unreadable", str(e)) from None
    if not stat.S_ISREG(st.st_mode):  # os.stat followed any symlink, like os.path.isfile
        raise SkipFile(p, "not_a_file", "not a regular file")
    if st.st_size > max_bytes:
        raise SkipFile(p, "too_large", f"{st.st_size} bytes > max_file_bytes={max_bytes}")
    try:
        # non-blocking: a path swapped for a FIFO since the stat would block the scan at its open
        with open(os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
            data = f.read(max_bytes + 1) if regular else b""
    except FileNotFoundError as e:
        raise SkipFile(p, "vanished", str(e)) from None
    except OSError as e:
        raise SkipFile(p, "unreadable", str(e)) from None
    if not regular:
        raise SkipFile(p, "not_a_file", "not a regular file")
    if len(data) > max_bytes:  # it grew since stat
        raise SkipFile(p, "too_large", f"more than max_file_bytes={max_bytes} bytes")
    if b"\0" in data[:8192]:
        raise SkipFile(p, "binary", "NUL byte in the first 8 KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = _decode_not_utf8(data)
        if text is None:
            raise SkipFile(p, "binary", f"not UTF-8 ({e.reason} at byte {e.start}), nor Latin-1 text") from None
    # A byte order mark is no text: kept, drafts could propose a U+FEFF (the CLI drops it too).
    return text[1:] if text.startswith("\ufeff") else text


# PEP 263: a comment on the first or second line that declares the file's encoding
_CODING_LINE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
# Latin-1 decodes any bytes: text that is not UTF-8 is taken as Latin-1 when at most this share of
# its bytes are control characters other than whitespace (C0 and C1): more, and it is binary
MAX_CONTROL_SHARE = 0.01
_CONTROL_BYTES = bytes(b for b in range(256) if b < 0x20 and b not in b"\t\n\r\f\v\x1b" or 0x7F <= b < 0xA0)


def _decode_not_utf8(data: bytes) -> str | None:
    """Text that is not UTF-8: in the encoding its PEP 263 coding line names (if it decodes),
    else Latin-1 unless control characters say it is binary; None for binary."""
    for line in data.split(b"\n", 2)[:2]:
        m = _CODING_LINE.match(line)
        if m:
            try:
                return data.decode(codecs.lookup(m.group(1).decode("ascii")).name)
            except (LookupError, UnicodeDecodeError, UnicodeError):
                break  # a wrong or unknown declaration: the fallback decides
    sample = data[:65536]
    if len(sample) - len(sample.translate(None, _CONTROL_BYTES)) > MAX_CONTROL_SHARE * len(sample):
        return None
    return data.decode("latin-1")


def read_gitignore(directory: Path) -> pathspec.PathSpec | None:
    """The patterns of ``directory/.gitignore``; None when it has none. OSError when unreadable."""
    return _read_ignore_file(directory / ".gitignore")


def _read_ignore_file(path: Path) -> pathspec.PathSpec | None:
    """The patterns of the ignore file ``path``; None when there is none. OSError when unreadable."""
    return ignore_spec_of(ignore_file_bytes(path))


def ignore_file_bytes(path: Path) -> bytes | None:
    """The bytes of the ignore file ``path``; None when there is none. OSError when unreadable."""
    return path.read_bytes() if path.is_file() else None


def ignore_spec_of(data: bytes | None) -> pathspec.PathSpec | None:
    """The patterns in an ignore file's bytes (``ignore_file_bytes``); None for None."""
    return None if data is None else ignore_spec(data.decode("utf-8", "replace").splitlines())


def ignore_spec(lines: list[str]) -> pathspec.PathSpec:
    """The patterns of an ignore file's ``lines``. A line pathspec cannot parse (``foo\\``: a
    trailing backslash) is left out, as git leaves it out: one such line in the user's global
    excludes file must not stop every folder from being indexed."""
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError:  # pathspec's GitIgnorePatternError
        return pathspec.GitIgnoreSpec.from_lines([line for line in lines if _parses(line)])


def _parses(line: str) -> bool:
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
        return True
    except ValueError:
        return False


def gitignored(specs: list[tuple[Path, pathspec.PathSpec]], path: Path, is_dir: bool) -> bool:
    """Whether ``path`` itself is ignored by ``specs``: (folder, its .gitignore), shallowest
    first, for the folders from the workspace root down to ``path``'s parent.

    Git's rule: the deepest .gitignore with a pattern that matches decides, and in it
    the last matching pattern, so a nested ``!keep.log`` re-includes what the root's
    ``*.log`` ignores. ``path``'s parent folders are not checked (git cannot re-include
    a file in an ignored folder): callers stop at an ignored folder.
    """
    for base, spec in reversed(specs):
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        decision = spec.check_file(rel).include  # None: no pattern of this file matches
        if decision is not None:
            return decision
    return False


def git_index(root: Path) -> Path | None:
    """The index file of the git repository whose work tree holds ``root`` when the scan lists
    ``root``'s files with git; None when it walks (no work tree, or one that ignores ``root``)."""
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree", "--git-path", "index"],
            capture_output=True, text=True, timeout=30,
        )
        lines = top.stdout.splitlines()
        if top.returncode != 0 or len(lines) != 2 or lines[0] != "true":
            return None
        # A folder that its enclosing repository ignores (say, a pyenv install inside
        # the pyenv clone) is a workspace of its own: walk it instead.
        ign = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "."], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return None if ign.returncode == 0 else root / lines[1]  # --git-path answers relative to root


def _git_ls_files(root: Path, *flags: str) -> tuple[list[Path], list[Path]] | None:
    """What ``git ls-files`` lists under ``root``: (files, untracked repositories), each once (git
    lists an unmerged path once per stage). A name ending in "/" is a repository inside the folder
    that the outer one does not track (``-o`` lists it as one entry): git lists none of its files.
    A submodule is listed as a file here (see ``_gitlinks``). None when git fails."""
    out = _git_listing(root, *flags)
    if out is None:
        return None
    files, repositories = {}, {}  # dicts: each once, in git's order
    for name in out.decode("utf-8", "surrogateescape").split("\0"):
        if name:
            (repositories if name.endswith("/") else files)[root / name] = None  # a Path drops the "/"
    return list(files), list(repositories)


def _gitlinks(root: Path) -> frozenset[Path] | None:
    """The submodules under ``root``: the tracked gitlinks (mode 160000), which ``git ls-files``
    lists as one entry each and none of their files. The staged listing holds every tracked file:
    only the gitlinks' records are decoded (a bytes prefix test per record). None when git fails."""
    out = _git_listing(root, "-s", "-c")
    if out is None:
        return None
    # "MODE OBJECT STAGE\tPATH"; a conflicted submodule comes once per stage
    return frozenset(root / r.split(b"\t", 1)[1].decode("utf-8", "surrogateescape")
                     for r in out.split(b"\0") if r.startswith(b"160000 "))


def _git_listing(root: Path, *flags: str) -> bytes | None:
    """``git ls-files FLAGS -z``'s output in ``root``; None when git fails."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", *flags, "-z"], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_exclude_rules(root: Path) -> list[tuple[Path, pathspec.PathSpec]]:
    """The ignore rules ``git ls-files --exclude-standard`` applies under ``root`` besides the
    .gitignore files of ``root`` and its subfolders, as ``gitignored``'s (folder, patterns), lowest
    precedence first: the user's excludes file (``core.excludesFile``, else
    ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``), the repository's ``info/exclude``
    (a worktree's too), then the .gitignore files of the folders from the work tree's top down to
    ``root``'s parent. The first two are anchored at the top. Files people exclude there are often
    private: the watcher must skip them as the scan does. Call it only where the scan uses git
    (``git_index``); a rule file that is absent or unreadable adds nothing, as for git."""
    try:
        paths = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-cdup", "--git-path", "info/exclude"],
                               capture_output=True, text=True, timeout=30)
        excludes_file = user_excludes_file(root)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = paths.stdout.split("\n")  # the first is empty at the top
    if paths.returncode != 0 or len(lines) < 2:
        return []
    # --show-cdup climbs from root to the top; --git-path answers relative to root (absolute in a worktree)
    top = Path(os.path.normpath(root / lines[0]))  # spelled as ``root`` is, as the watcher's paths are
    rule_files = [(top, top / excludes_file), (top, root / lines[1])]
    between = root.relative_to(top).parts if top in (root, *root.parents) else ()
    rule_files += [(folder, folder / ".gitignore") for folder in
                   (top.joinpath(*between[:i]) for i in range(len(between)))]
    rules = []
    for folder, path in rule_files:
        try:
            spec = _read_ignore_file(path)
        except OSError:
            spec = None
        if spec is not None:
            rules.append((folder, spec))
    return rules


def user_excludes_file(root: Path) -> Path:
    """The user's excludes file git applies in ``root``: ``core.excludesFile`` (``~`` expanded; a
    relative one is relative to the work tree's top), else ``$XDG_CONFIG_HOME/git/ignore`` or
    ``~/.config/git/ignore``. It may not exist. OSError or SubprocessError when git cannot run."""
    configured = subprocess.run(["git", "-C", str(root), "config", "--path", "core.excludesFile"],
                                capture_output=True, text=True, timeout=30)
    value = configured.stdout.strip() if configured.returncode == 0 else ""
    return Path(value) if value else _default_excludes_file()


def _default_excludes_file() -> Path:
    """git's excludes file when ``core.excludesFile`` is not set."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config_home) / "git" / "ignore"


def tracked_ignored(root: Path) -> frozenset[Path] | None:
    """The files git tracks under ``root`` that its ignore rules match (added with ``git add -f``,
    or ignored after they were added): ``git ls-files`` lists them, so the scan indexes them and
    the watcher must follow them. Usually a handful: git checks only tracked files for this.
    Call it only where the scan uses git (``git_index``); None when git fails (not "none": a
    caller would take every such file for untracked)."""
    listed = _git_ls_files(root, "-ci", "--exclude-standard")
    return None if listed is None else frozenset(listed[0])


def nested_repositories(root: Path) -> frozenset[Path] | None:
    """The folders under ``root`` that hold a repository whose files the outer one does not list:
    an untracked one (``git ls-files -o`` lists it as one ``name/``) or a submodule (one gitlink
    entry), so the scan indexes none of their files and the watcher skips their events. git decides,
    not a ``.git`` found on disk: where the outer repository tracks files in a folder that became a
    repository, git lists them (and new files there) as before. Call it only where the scan uses
    git (``git_index``); None when git fails (not "none")."""
    listed, links = _git_ls_files(root, "-o", "--exclude-standard"), _gitlinks(root)
    return None if listed is None or links is None else frozenset(listed[1]) | links


def holds_repository(directory: str) -> bool:
    """Whether ``directory`` holds a repository as git finds one: a ``.git`` folder with a ``HEAD``,
    or a ``.git`` file pointing to one (``gitdir: PATH``: a submodule, a linked worktree). An empty
    ``.git`` folder or a stray file of that name makes no repository: git lists what is around it."""
    dot_git = os.path.join(directory, ".git")
    if os.path.isdir(dot_git):
        return os.path.isfile(os.path.join(dot_git, "HEAD"))
    try:
        with open(dot_git, "rb") as f:
            return f.read(8) == b"gitdir: "
    except OSError:
        return False


def _walk_like_git(root: Path, counts: Counter) -> list[Path]:
    """The walk for a work tree whose ``git ls-files`` failed, as near git's listing as git's own
    rules allow: with the rules git applies besides the .gitignore files (what the user excluded
    there is often private) and without nested repositories (git lists none of their files).
    Files added with ``git add -f`` among the ignored are left out (the watcher indexes them at
    their first change). Rules git cannot give (it fails again) leave the .gitignore files alone."""
    real = Path(os.path.realpath(root))  # git finds the rules' top from the real path
    try:
        rules = git_exclude_rules(real)
    except Exception:  # e.g. a core.excludesFile path that is not UTF-8
        log.warning("reading git's ignore rules for %s failed; walking with its .gitignore files",
                    root, exc_info=True)
        rules = []
    return [root / f.relative_to(real) for f in _walk_files(real, counts, rules, nested_repos=False)]


def _walk_files(root: Path, counts: Counter, outer_rules: list[tuple[Path, pathspec.PathSpec]] = (),
                nested_repos: bool = True) -> list[Path]:
    """The walk: files under ``root`` (sorted by the caller), real folders before those reached
    through a link. ``outer_rules``: ignore rules from outside the folder's .gitignore files
    (``git_exclude_rules``), below them in precedence. ``nested_repos``: False skips a folder
    that holds a ``.git`` (another repository, a submodule), as git's listing does.

    A folder reached twice is visited only the first time, so the real path must come first:
    the text is then listed under its own path, as git lists it, and the watcher (which
    skips a path that reaches, through a link, a file the folder does not ignore) agrees."""
    files: list[Path] = []
    real_root = os.path.realpath(root)
    seen: set[tuple[int, int]] = set()
    # Stacks of (directory, [(base directory, spec), ...] of .gitignore files above it): the
    # folders on real paths, then those with a link on their way (walked once no real one is left).
    real_dirs: list[tuple[Path, list[tuple[Path, pathspec.PathSpec]]]] = [(root, list(outer_rules))]
    linked_dirs: list[tuple[Path, list[tuple[Path, pathspec.PathSpec]]]] = []
    while real_dirs or linked_dirs:
        via_link = not real_dirs
        d, specs = (linked_dirs if via_link else real_dirs).pop()
        try:
            st = d.stat()
        except OSError as e:
            counts["symlink_loop" if e.errno == errno.ELOOP else "unreadable"] += 1
            continue
        if (st.st_dev, st.st_ino) in seen:
            real = os.path.realpath(d)
            counts["symlink_loop" if _is_within(os.path.realpath(d.parent), real) else "duplicate"] += 1
            continue
        seen.add((st.st_dev, st.st_ino))
        try:
            spec = read_gitignore(d)
            if spec is not None:
                specs = specs + [(d, spec)]
        except OSError:
            counts["unreadable"] += 1
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name, reverse=True)  # stacks pop in name order
        except OSError:
            counts["unreadable"] += 1
            continue
        for e in entries:
            if e.name == ".git":
                continue
            path = Path(e.path)
            try:
                is_dir = e.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if gitignored(specs, path, is_dir):
                continue
            if is_dir:
                is_link = e.is_symlink()
                if is_link and not _is_within(os.path.realpath(path), real_root):
                    counts["outside_root"] += 1  # the git path does not follow it either
                    continue
                if not nested_repos and holds_repository(os.fspath(path)):
                    counts["nested_repo"] += 1
                    continue
                (linked_dirs if via_link or is_link else real_dirs).append((path, specs))
            else:
                files.append(path)
    return files


def links_outside(path: str | os.PathLike, real_folder: str) -> bool:
    """Whether ``path`` resolves, through its symlinks, to a place outside the folder whose real
    path is ``real_folder`` (a dangling link: by where it points)."""
    return not _is_within(os.path.realpath(path), real_folder)


def _drop_absent_and_links_out(files: list[Path], root: Path, counts: Counter) -> list[Path]:
    """``files`` less the ones not on disk (``not_on_disk``: git lists tracked files a sparse
    checkout leaves out, or deleted and not yet staged; or one vanished since it was listed),
    the ones that resolve out of ``root`` (``outside_root``) or cannot be resolved
    (``unreadable``) and the symlinks to a file that is itself listed (``duplicate``: its text
    is indexed once, under its own path).

    A file resolves elsewhere when it is a link or a folder on its way is one. The walk follows
    no directory link out of the folder, but ``git ls-files`` lists a tracked file even when the
    folder it was in is now a link, so the folders count too: one ``realpath`` per folder."""
    real_root = os.path.realpath(root)
    real_dirs: dict[Path, str] = {}
    resolved: list[tuple[Path, str, bool]] = []  # (file, its real path, whether a link leads there)
    for f in files:
        try:
            is_link = stat.S_ISLNK(os.lstat(f).st_mode)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                counts["not_on_disk"] += 1
                continue
            is_link = False  # a loop or no permission on the way: reading it says which, per file
        try:
            real_dir = real_dirs.get(f.parent)
            if real_dir is None:
                real_dir = real_dirs[f.parent] = os.path.realpath(f.parent)
            real = os.path.realpath(f) if is_link else os.path.join(real_dir, f.name)
        except OSError:  # a link no one may read (``/proc/1/root`` for a user): that file, not the folder
            counts["unreadable"] += 1
            continue
        if not _is_within(real, real_root):
            counts["outside_root"] += 1
            continue
        linked = real != os.path.join(real_root, os.path.relpath(f, root))
        resolved.append((f, real, linked))
    listed_directly = {real for _, real, linked in resolved if not linked}
    kept = []
    for f, real, linked in resolved:
        if linked and (real in listed_directly or os.path.isdir(real)):  # git lists a folder link as a file
            counts["duplicate"] += 1
        else:
            kept.append(f)
    return kept


def _is_within(path: str, folder: str) -> bool:
    """Whether real path ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(os.path.join(folder, ""))


def discover(root: str | os.PathLike, counts: Counter | None = None) -> list[Path]:
    """Files under ``root`` that are not ignored, sorted. Skipped directories are counted."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"workspace folder {os.fspath(root)!r} is not a directory")
    counts = Counter() if counts is None else counts
    if git_index(root) is None:
        files = _walk_files(root, counts)
    else:
        listed = _git_ls_files(root, "-co", "--exclude-standard")
        links = _gitlinks(root) if listed is not None else None
        if listed is None or links is None:  # a work tree whose git failed (timed out in a huge repository, a damaged index)
            counts["git_failed"] += 1
            files = _walk_like_git(root, counts)
        else:
            files, repositories = listed
            if links:  # a submodule is one entry, a folder: a nested repository, not a file
                files = [f for f in files if f not in links]
            if repositories or links:  # as the walk counts the ones it skips
                counts["nested_repo"] += len(repositories) + len(links)
    return sorted(_drop_absent_and_links_out(files, root, counts))
