"""Workspace watching with a recording fake index: events, bursts, .gitignore, open buffers."""

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import FakeIndex, real_index, wait_until

from ngramd.daemon.workspace.ignorer import Ignorer
from ngramd.daemon.workspace.watcher import WorkspaceWatcher

# watchdog's harmless "Callback ... already exists" (see daemon/workspace/watcher.py, whose filter pytest resets
# around each test); under -W error it would kill watchdog's inotify reader and leave the test deaf
pytestmark = pytest.mark.filterwarnings(
    "ignore:Callback with id .* already exists:RuntimeWarning:watchdog.observers.inotify")


def test_ignorer_follows_nested_gitignores(tmp_path):
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n/top_only.txt\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / ".gitignore").write_text("secret.py\n!keep.log\n")
    ig = Ignorer(tmp_path)
    assert ig.ignored(tmp_path / "a.log")
    assert ig.ignored(tmp_path / "pkg" / "deep" / "b.log")
    assert ig.ignored(tmp_path / "build" / "x" / "y.py")
    assert ig.ignored(tmp_path / "top_only.txt")
    assert not ig.ignored(tmp_path / "pkg" / "top_only.txt")  # anchored to the root
    assert ig.ignored(tmp_path / "pkg" / "secret.py")
    assert not ig.ignored(tmp_path / "secret.py")  # the nested rule stays in pkg/
    assert ig.ignored(tmp_path / ".git" / "HEAD")
    assert not ig.ignored(tmp_path / "pkg" / "mod.py")
    assert ig.ignored(Path("/elsewhere/x.py"))


def test_ignorer_lets_the_deepest_matching_pattern_decide(tmp_path):
    """As git does, and as the scan's walk does (one shared rule: workspace.gitignored)."""
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("!keep.log\n!build/\n")
    ig = Ignorer(tmp_path)
    assert not ig.ignored(tmp_path / "sub" / "keep.log")
    assert ig.ignored(tmp_path / "sub" / "other.log")
    assert not ig.ignored(tmp_path / "sub" / "build" / "x.py")
    assert ig.ignored(tmp_path / "build" / "y.py")


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_ignorer_follows_files_git_tracks_though_the_gitignore_matches_them(tmp_path):
    """As the scan's ``git ls-files``: a tracked file is followed (``git add -f``), and so is its folder
    (a delete of it must reach its files); git is asked again when its index changes or
    ``forget_git_rules`` says that a .gitignore did."""
    root = tmp_path.resolve()
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    for name in ("keep.py", "out.py", "late.py"):
        (root / "build" / name).write_text("x = 1\n")
    (root / "a.py").write_text("a = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".gitignore", "a.py")
    _git(root, "add", "-f", "build/keep.py")
    ig = Ignorer(root)
    assert not ig.ignored(root / "build" / "keep.py")
    assert not ig.ignored(root / "build")
    assert ig.ignored(root / "build" / "out.py")
    assert ig.ignored(root / "build" / "late.py")
    _git(root, "add", "-f", "build/late.py")  # rewrites git's index file
    assert not ig.ignored(root / "build" / "late.py")
    (root / ".gitignore").write_text("build/\na.py\n")  # now matches a tracked file
    ig.forget_git_rules()
    assert not ig.ignored(root / "a.py")
    assert ig.ignored(root / "build" / "out.py")


@pytest.fixture
def git_home(tmp_path, monkeypatch):
    """HOME in the test's folder, no XDG_CONFIG_HOME nor system config: git reads the test's
    excludes files, not the user's."""
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


def _exclude(repo: Path, where: str, lines: str, monkeypatch) -> None:
    """Write ignore rules for ``repo`` where git finds them besides its .gitignore files."""
    home = Path.home()
    if where == "info/exclude":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "exclude").write_text(lines)
    elif where == "home-config":  # git's default without XDG_CONFIG_HOME
        (home / ".config" / "git" / "ignore").write_text(lines)
    elif where == "xdg":
        xdg = home / "xdg"
        (xdg / "git").mkdir(parents=True, exist_ok=True)
        (xdg / "git" / "ignore").write_text(lines)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    elif where == "core.excludesFile":
        (home / "my-excludes").write_text(lines)
        _git(repo, "config", "--global", "core.excludesFile", "~/my-excludes")
    else:
        raise AssertionError(where)


EXCLUDE_PLACES = ["info/exclude", "home-config", "xdg", "core.excludesFile"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("where", EXCLUDE_PLACES)
def test_ignorer_applies_the_rules_git_adds_in_a_work_tree(tmp_path, git_home, monkeypatch, where):
    """As the scan's ``git ls-files --exclude-standard``: ``info/exclude`` and the user's excludes file
    (anchored at the work tree's top) ignore files, a .gitignore negation still re-includes one, a
    tracked file stays followed; they are read again only after ``forget_git_rules`` (a rescan)."""
    root = (tmp_path / "repo").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "sub" / ".gitignore").write_text("!keep.md\n")
    _git(root, "init", "-q")
    _exclude(root, where, "*.md\n/top.py\nprivate/\ntracked.py\n", monkeypatch)
    (root / "tracked.py").write_text("t = 1\n")
    _git(root, "add", "-f", "tracked.py")
    ig = Ignorer(root)
    assert ig.ignored(root / "draft.md")
    assert ig.ignored(root / "sub" / "notes.md")
    assert not ig.ignored(root / "sub" / "keep.md")  # the .gitignore outranks the excludes
    assert ig.ignored(root / "top.py")
    assert not ig.ignored(root / "sub" / "top.py")  # anchored at the top
    assert ig.ignored(root / "private" / "a.py")
    assert not ig.ignored(root / "tracked.py")
    assert not ig.ignored(root / "a.py")
    _exclude(root, where, "a.py\n", monkeypatch)
    assert not ig.ignored(root / "a.py")  # read once per Ignorer
    ig.forget_git_rules()
    assert ig.ignored(root / "a.py")
    assert not ig.ignored(root / "draft.md")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_ignorer_of_a_subfolder_or_worktree_applies_git_rules_from_the_top(tmp_path, git_home):
    """A folder inside a work tree gets the .gitignore files above it and ``info/exclude`` anchored at
    the top; a linked worktree gets its repository's ``info/exclude`` (``git rev-parse --git-path``)."""
    repo = (tmp_path / "repo").resolve()
    (repo / "sub").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "sub" / "keep.py").write_text("k = 1\n")
    _git(repo, "init", "-q")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("/sub/secret.py\n")
    ig = Ignorer(repo / "sub")
    assert ig.ignored(repo / "sub" / "x.log")
    assert ig.ignored(repo / "sub" / "secret.py")
    assert not ig.ignored(repo / "sub" / "keep.py")

    _git(repo, "add", "sub/keep.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    worktree = tmp_path.resolve() / "wt"
    _git(repo, "worktree", "add", "-q", str(worktree))
    ig = Ignorer(worktree)
    assert ig.ignored(worktree / "sub" / "secret.py")
    assert not ig.ignored(worktree / "sub" / "keep.py")


def test_ignorer_in_a_folder_git_does_not_hold_applies_no_excludes_file(tmp_path, git_home):
    """The walk applies only .gitignore files: so does the watcher there."""
    (git_home / ".config" / "git" / "ignore").write_text("*.md\n")
    root = (tmp_path / "plain").resolve()
    root.mkdir()
    assert not Ignorer(root).ignored(root / "draft.md")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("where", ["info/exclude", "xdg"])
def test_scan_and_events_skip_a_file_git_excludes_locally(tmp_path, git_home, monkeypatch, where):
    """With the real index in a git work tree: a file ``info/exclude`` or the user's excludes file
    matches is not indexed by the scan, nor when it is edited or created (such files are often
    private: drafts would come from them); a rescan reads the rules again."""
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    (root / "a.py").write_text("a = 1\n")
    (root / "secret.py").write_text("password = 1\n")
    _git(root, "init", "-q")
    _exclude(root, where, "secret.py\n", monkeypatch)
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == [str(root / "a.py")]
        (root / "secret.py").write_text("password = 2\n")
        (root / "sub").mkdir()
        (root / "sub" / "secret.py").write_text("token = 1\n")
        (root / "zz.py").write_text("z = 1\n")  # handled after the others (batches go in path order)
        wait_until(lambda: _indexed_text(index, str(root / "zz.py")) == "z = 1\n")
        assert sorted(index._files) == [str(root / "a.py"), str(root / "zz.py")]

        _exclude(root, where, "a.py\n", monkeypatch)
        state = w.folders[root]
        first_scan = state["counts"]
        (root / ".gitignore").write_text("")  # a rescan, which reads the excludes again
        wait_until(lambda: state["counts"] is not first_scan and state["state"] == "ready")
        assert str(root / "a.py") not in index._files
        (root / "a.py").write_text("a = 2\n")
        (root / "secret.py").write_text("password = 3\n")
        (root / "zzz.py").write_text("z = 1\n")
        wait_until(lambda: _indexed_text(index, str(root / "zzz.py")) == "z = 1\n")
        assert str(root / "a.py") not in index._files
        assert _indexed_text(index, str(root / "secret.py")) == "password = 3\n"
    finally:
        w.stop()


@pytest.fixture
def watched(tmp_path):
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "a.py").write_text("a = 1\n")
    index = FakeIndex()
    open_paths: set[Path] = set()
    w = WorkspaceWatcher(index, lambda p: p in open_paths, debounce_s=0.2)
    root = tmp_path.resolve()
    w.add_folder(root)
    wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
    yield w, index, root, open_paths
    w.stop()


def test_add_folder_does_not_wait_for_the_watch_nor_miss_a_change_made_meanwhile(tmp_path):
    """The recursive watch walks the whole tree (0.23 s for 8,700 directories), and add_folder is
    called on the daemon's event loop: the watch is set up on a thread of its own, and the scan
    begins only once it is in place."""
    (tmp_path / "a.py").write_text("a = 1\n")
    root = tmp_path.resolve()
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    release, scheduling = threading.Event(), threading.Event()
    schedule = w._observer.schedule

    def slow_schedule(*args, **kwargs):
        scheduling.set()
        release.wait(120)
        return schedule(*args, **kwargs)
    w._observer.schedule = slow_schedule
    added = threading.Event()
    try:
        threading.Thread(target=lambda: w.add_folder(root) and added.set(), daemon=True).start()
        wait_until(scheduling.is_set)
        wait_until(added.is_set, timeout=20)  # it returned while the watch is still being set up
        assert w.status()["folders"][0]["state"] == "indexing" and index.files == {}
        (root / "b.py").write_text("b = 1\n")  # before the watch: the scan after it reads it
        release.set()
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert set(index.files) == {str(root / "a.py"), str(root / "b.py")}
        (root / "c.py").write_text("c = 1\n")  # after: an event
        wait_until(lambda: str(root / "c.py") in index.files)
    finally:
        release.set()
        w.stop()


def test_initial_index_then_create_modify_delete_move(watched):
    w, index, root, _ = watched
    assert str(root / "a.py") in index.files
    assert w.status()["folders"][0]["counts"] == {"files": 1}
    (root / "b.py").write_text("b = 2\n")
    wait_until(lambda: index.files.get(str(root / "b.py")) == "b = 2\n")
    (root / "b.py").write_text("b = 3\n")
    wait_until(lambda: index.files.get(str(root / "b.py")) == "b = 3\n")
    (root / "b.py").rename(root / "c.py")
    wait_until(lambda: str(root / "c.py") in index.files and str(root / "b.py") not in index.files)
    (root / "c.py").unlink()
    wait_until(lambda: str(root / "c.py") not in index.files)


def test_burst_is_coalesced_and_gitignore_respected(watched):
    w, index, root, _ = watched
    (root / "ignored").mkdir()
    before = len(index.log)
    for i in range(50):  # many writes to a few files, like a checkout
        (root / f"f{i % 5}.py").write_text(f"v = {i}\n")
        (root / "ignored" / f"g{i % 5}.py").write_text("x\n")
    wait_until(lambda: all(index.files.get(str(root / f"f{j}.py")) == f"v = {45 + j}\n"
                           for j in range(5)))

    def ignored_write_seen() -> bool:
        # the new folder's watch is added by watchdog's thread: on a loaded machine the burst can
        # be over before it exists, so write again until an event from inside it has arrived
        (root / "ignored" / "late.py").write_text("y\n")
        return w.status()["events"]["ignored"] > 0

    wait_until(ignored_write_seen)
    wait_until(lambda: w.status()["pending"] == 0)
    indexed = [entry for entry in index.log[before:] if entry[0] == "index"]
    assert len(indexed) < 50  # each file re-indexed far fewer times than it was written
    assert not any("ignored" in entry[1] for entry in indexed)


def test_open_buffer_wins_over_disk(watched):
    w, index, root, open_paths = watched
    open_paths.add(root / "a.py")
    (root / "a.py").write_text("disk = 1\n")
    wait_until(lambda: w.status()["events"]["shadowed"] > 0)
    assert index.files[str(root / "a.py")] == "a = 1\n"  # the disk edit was not indexed
    open_paths.clear()
    w.reindex_from_disk(root / "a.py")  # what the service does when the buffer closes
    wait_until(lambda: index.files[str(root / "a.py")] == "disk = 1\n")


def test_remove_folder_stops_watching_and_forgets_its_files(watched):
    w, index, root, _ = watched
    assert str(root / "a.py") in index.files
    assert w.remove_folder(root)
    assert w.status()["folders"] == []
    wait_until(lambda: w.status()["events"]["forgotten"] == 1)
    assert ("forget", str(root)) in index.log and str(root / "a.py") not in index.files
    assert not w.remove_folder(root)


def test_files_another_folder_holds_and_does_not_ignore_stay(tmp_path):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (outer / "o.py").write_text("o = 1\n")
    (inner / "i.py").write_text("i = 1\n")
    (inner / "skip.py").write_text("s = 1\n")
    (outer / ".gitignore").write_text("inner/skip.py\n")
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        for d in (outer, inner):
            w.add_folder(d)
        wait_until(lambda: all(f["state"] == "ready" for f in w.status()["folders"]))
        assert w.remove_folder(inner)
        wait_until(lambda: ("forget", str(inner.resolve())) in index.log)
        # outer still holds i.py; it ignores skip.py, so nobody holds that one now
        assert str((inner / "i.py").resolve()) in index.files
        assert str((inner / "skip.py").resolve()) not in index.files
    finally:
        w.stop()


def test_reads_are_not_asked_of_the_kernel(watched):
    """The inotify mask leaves out reads: our own indexing and watchdog's rescans of a big
    tree would otherwise overflow the queue and trigger rescans without end."""
    from watchdog.events import FileClosedNoWriteEvent, FileOpenedEvent

    w, index, root, _ = watched
    (watch,) = w._watches.values()
    assert watch.event_filter is not None
    assert FileOpenedEvent not in watch.event_filter and FileClosedNoWriteEvent not in watch.event_filter
    before = len(index.log)
    for _ in range(20):
        (root / "a.py").read_text()
    (root / "d.py").write_text("d = 4\n")  # a change after the reads is still seen
    wait_until(lambda: str(root / "d.py") in index.files)
    assert all("a.py" not in str(entry) for entry in index.log[before:])


def test_a_file_indexed_while_its_folder_is_removed_does_not_stay(tmp_path):
    """The race: the flusher checked the folder, then it was removed (and forgotten), then the file went in."""
    root = tmp_path.resolve()
    holder: dict = {}

    class RacingIndex(FakeIndex):
        def index_file(self, path):
            if Path(path).name == "late.py" and not holder.get("done"):
                holder["done"] = True
                holder["watcher"].remove_folder(root)  # lands between the check and the install
                wait_until(lambda: ("forget", str(root)) in self.log)
            return super().index_file(path)

    index = RacingIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    holder["watcher"] = w
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        (root / "late.py").write_text("late = 1\n")
        wait_until(lambda: holder.get("done") and w.status()["pending"] == 0)
        wait_until(lambda: ("remove", str(root / "late.py")) in index.log)
        assert str(root / "late.py") not in index.files
    finally:
        w.stop()


def test_a_gitignore_change_rescans_the_folder(watched):
    """Files a changed .gitignore now ignores leave the index; those it stops ignoring come in."""
    w, index, root, _ = watched
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("generated = 1\n")
    wait_until(lambda: str(root / "build" / "gen.py") in index.files)
    (root / ".gitignore").write_text("build/\n")
    wait_until(lambda: str(root / "build" / "gen.py") not in index.files)
    (root / "ignored").mkdir()
    (root / "ignored" / "kept.py").write_text("kept = 1\n")
    (root / ".gitignore").write_text("")
    wait_until(lambda: str(root / "ignored" / "kept.py") in index.files
               and str(root / "build" / "gen.py") in index.files)
    wait_until(lambda: w.status()["folders"][0]["state"] == "ready")


def test_a_gitignore_that_ignores_itself_still_rescans_the_folder(watched):
    """git reads a .gitignore that names itself: its change decides again what the folder holds."""
    w, index, root, _ = watched
    (root / "secret.py").write_text("s = 1\n")
    (root / "b_log.py").write_text("log = 1\n")
    wait_until(lambda: str(root / "b_log.py") in index.files and str(root / "secret.py") in index.files)
    (root / ".gitignore").write_text(".gitignore\nignored/\nsecret.py\n")
    wait_until(lambda: str(root / "secret.py") not in index.files)
    (root / ".gitignore").write_text(".gitignore\nignored/\n*_log.py\n")  # itself ignored now
    wait_until(lambda: str(root / "b_log.py") not in index.files and str(root / "secret.py") in index.files)


def test_a_file_replaced_by_a_folder_in_one_burst_leaves_the_index(watched):
    """A checkout that turns the file util into the package util/ (delete and create merge)."""
    w, index, root, _ = watched
    (root / "util").write_text("OLD = 1\n")
    wait_until(lambda: str(root / "util") in index.files)
    (root / "util").unlink()
    (root / "util").mkdir()
    (root / "util" / "__init__.py").write_text("NEW = 1\n")
    wait_until(lambda: str(root / "util" / "__init__.py") in index.files)
    wait_until(lambda: str(root / "util") not in index.files)


def test_events_the_kernel_dropped_are_made_up_for_by_a_rescan(watched):
    """inotify's queue overflowed (a big checkout): watchdog only logs it, and the files whose
    events were lost must still reach the index. A file the index missed (its event lost) is
    indexed by the rescan the warning brings."""
    import logging

    from ngramd.daemon.workspace.overflow_alarm import WATCHDOG_INOTIFY_LOGGER

    w, index, root, _ = watched
    (root / "lost.py").write_text("lost = 1\n")
    wait_until(lambda: str(root / "lost.py") in index.files)
    with index.lock:
        del index.files[str(root / "lost.py")]  # as if its event had been dropped
    logging.getLogger(WATCHDOG_INOTIFY_LOGGER).warning("Inotify queue overflowed; filesystem events were lost")
    wait_until(lambda: str(root / "lost.py") in index.files)
    assert w.counts["overflows"] == 1
    logging.getLogger(WATCHDOG_INOTIFY_LOGGER).warning("some other warning")
    assert w.counts["overflows"] == 1


def test_a_link_to_a_file_in_an_ignored_folder_follows_its_target(tmp_path):
    """The scan indexes a link (a file link, or a file in a linked folder) to a file the folder
    ignores, under the link's path; the target's edits and delete come as the ignored target's
    events only, and must still reach the link's text."""
    root = tmp_path.resolve()
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("GEN_V1 = 1\n")
    (root / "link.py").symlink_to("build/gen.py")
    (root / "lib").symlink_to("build")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    links = [str(root / "link.py"), str(root / "lib" / "gen.py")]
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert all(_indexed_text(index, k) == "GEN_V1 = 1\n" for k in links)
        assert index.links_to(root / "build" / "gen.py") == sorted(links)
        (root / "build" / "gen.py").write_text("GEN_V2 = 2\n")
        wait_until(lambda: all(_indexed_text(index, k) == "GEN_V2 = 2\n" for k in links))
        (root / "build" / "gen.py").unlink()
        wait_until(lambda: not any(k in index._files for k in links))
        assert index.links_to(root / "build" / "gen.py") == []
        # the ignored folder moved out of the tree: one event, for the folder; its links go
        (root / "build" / "gen.py").write_text("GEN_V3 = 3\n")
        w._rescan(root)  # the file made again: the scan indexes the links again
        wait_until(lambda: all(_indexed_text(index, k) == "GEN_V3 = 3\n" for k in links))
        (root / "build").rename(tmp_path.parent / f"{tmp_path.name}-moved-build")
        wait_until(lambda: not any(k in index._files for k in links))
    finally:
        w.stop()


def test_ignorer_applies_a_folder_only_pattern_to_a_folder_asked_as_one(tmp_path):
    (tmp_path / ".gitignore").write_text("deps/\n")
    ig = Ignorer(tmp_path)
    assert not ig.ignored(tmp_path / "a.py")  # reads the rules, as a scan's start does
    assert ig.ignored_now(tmp_path / "deps", is_dir=True) is True
    assert ig.ignored_now(tmp_path / "deps") is False  # a file named deps: the pattern is for folders
    assert ig.ignored_now(tmp_path / "lib", is_dir=True) is False


def test_a_repository_made_in_an_ignored_folder_rescans_nothing(watched, monkeypatch):
    """``ignored/`` (a folder-only pattern) ignores every file below it whether or not it holds a
    repository: a ``.git`` made there changes no listing, so it brings no rescan; one made in a
    folder that is not ignored does."""
    w, index, root, _ = watched
    rescans = []
    rescan = w._rescan
    monkeypatch.setattr(w, "_rescan", lambda r: (rescans.append(r), rescan(r)))
    (root / "ignored" / ".git").mkdir(parents=True)
    (root / "zz.py").write_text("zz = 1\n")  # handled after ignored/.git: batches go in path order
    wait_until(lambda: str(root / "zz.py") in index.files)
    wait_until(lambda: w.status()["pending"] == 0)
    assert rescans == []
    (root / "lib" / ".git").mkdir(parents=True)
    wait_until(lambda: rescans == [root])


@pytest.mark.parametrize("wait_for_gone", [True, False], ids=["gone-then-back", "replaced-at-once"])
def test_a_folder_deleted_and_created_again_is_watched_again(watched, wait_for_gone):
    w, index, root, _ = watched
    shutil.rmtree(root)
    if wait_for_gone:
        wait_until(lambda: w.status()["folders"][0]["state"] == "gone")
        wait_until(lambda: str(root / "a.py") not in index.files)
    root.mkdir()
    (root / "new.py").write_text("new = 1\n")
    wait_until(lambda: index.files.get(str(root / "new.py")) == "new = 1\n")
    wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
    (root / "later.py").write_text("later = 1\n")  # the new directory's events arrive
    wait_until(lambda: index.files.get(str(root / "later.py")) == "later = 1\n")
    assert str(root / "a.py") not in index.files


def test_a_folder_moved_out_of_the_tree_leaves_the_index(watched, tmp_path_factory):
    """watchdog reports such a move as one delete of the folder, with no event per file."""
    w, index, root, _ = watched
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "sub" / "deep" / "x.py").write_text("x = 1\n")
    (root / "sub" / "y.py").write_text("y = 1\n")
    (root / "subway.py").write_text("s = 1\n")  # a sibling that shares the name's start stays
    wait_until(lambda: all(str(p) in index.files for p in
                           (root / "sub" / "deep" / "x.py", root / "sub" / "y.py", root / "subway.py")))
    shutil.move(root / "sub", tmp_path_factory.mktemp("elsewhere") / "sub")
    wait_until(lambda: not any(k.startswith(str(root / "sub") + "/") for k in index.files))
    assert str(root / "subway.py") in index.files and str(root / "a.py") in index.files


def test_a_folder_moved_away_as_a_whole_leaves_the_index(watched, tmp_path_factory):
    w, index, root, _ = watched
    assert str(root / "a.py") in index.files
    shutil.move(root, tmp_path_factory.mktemp("elsewhere") / "moved")
    wait_until(lambda: w.status()["folders"][0]["state"] == "gone")
    wait_until(lambda: str(root / "a.py") not in index.files)


def test_a_symlink_to_a_file_is_indexed_like_the_scan_does(watched):
    w, index, root, _ = watched
    (root / "ignored").mkdir()
    (root / "ignored" / "target.txt").write_text("t = 1\n")  # not indexed itself: the link is
    (root / "link.py").symlink_to(root / "ignored" / "target.txt")
    wait_until(lambda: index.files.get(str(root / "link.py")) == "t = 1\n")
    (root / "link.py").unlink()
    wait_until(lambda: str(root / "link.py") not in index.files)


def test_a_symlink_to_a_file_the_folder_holds_is_not_indexed_again(watched):
    """As the scan: the text is indexed once, under the target's own path."""
    w, index, root, _ = watched
    (root / "sub").mkdir()
    (root / "link.py").symlink_to(root / "a.py")
    (root / "sub" / "rel.py").symlink_to("../a.py")
    (root / "zz.py").write_text("z = 1\n")  # handled after both links (batches go in path order)
    wait_until(lambda: str(root / "zz.py") in index.files)
    assert str(root / "link.py") not in index.files and str(root / "sub" / "rel.py") not in index.files
    assert index.files[str(root / "a.py")] == "a = 1\n"


def test_scan_and_events_agree_on_a_folder_linked_inside(tmp_path):
    """With the real index: the scan indexes ``src/a.py`` once, under its own path (not through
    the link ``zz`` that the walk also meets, nor the file link ``b_link.py``); an edit of it
    re-indexes that path, and an event under the link (a buffer of ``zz/a.py`` closed) adds no copy."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a = 1\n")
    (tmp_path / "zz").symlink_to("src")
    (tmp_path / "b_link.py").symlink_to("src/a.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        root = tmp_path.resolve()
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == [str(root / "src" / "a.py")]
        (root / "src" / "a.py").write_text("a = 2\n")
        w.reindex_from_disk(root / "zz" / "a.py")
        a_key = str(root / "src" / "a.py")
        def indexed_text(key):
            f = index._files.get(key)
            return None if f is None else "".join(chr(int(t)) for t in f.tokens)

        wait_until(lambda: indexed_text(a_key) == "a = 2\n" and w.status()["events"]["ignored"] >= 1)
        assert sorted(index._files) == [a_key]
    finally:
        w.stop()


def test_a_file_under_a_folder_link_out_of_the_folder_is_not_indexed(watched, tmp_path_factory):
    """The file is no link itself, a folder on its way is: it reaches outside all the same."""
    w, index, root, _ = watched
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.py").write_text("secret = 1\n")
    (root / "sub").symlink_to(outside)
    w.reindex_from_disk(root / "sub" / "secret.py")  # as when a buffer of it closes
    (root / "zz.py").write_text("z = 1\n")
    wait_until(lambda: str(root / "zz.py") in index.files)
    assert str(root / "sub" / "secret.py") not in index.files


def test_a_failing_folder_check_does_not_stop_file_events(watched, monkeypatch):
    """The flusher checks every folder every GONE_POLL_S; an error there must not end it."""
    import ngramd.daemon.workspace.watcher as watcher_module

    w, index, root, _ = watched
    calls = []

    def broken(root_path):
        calls.append(root_path)
        raise RuntimeError("observer trouble")

    monkeypatch.setattr(w, "_check_root", broken)
    wait_until(lambda: calls, timeout=3 * watcher_module.GONE_POLL_S)
    (root / "after.py").write_text("after = 1\n")
    wait_until(lambda: index.files.get(str(root / "after.py")) == "after = 1\n")
    wait_until(lambda: len(calls) >= 2, timeout=3 * watcher_module.GONE_POLL_S)  # still polling


class _SlowCounts(dict):
    """Counters whose reads take a while: an unguarded ``+=`` from two threads loses one."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        time.sleep(0.2)
        return value


def test_counters_bumped_from_two_threads_lose_nothing(tmp_path):
    roots = [tmp_path / "one", tmp_path / "two"]
    for r in roots:
        r.mkdir()
        (r / "a.py").write_text("a = 1\n")
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        for r in roots:
            w.add_folder(r)
        wait_until(lambda: len(index.files) == 2 and all(f["state"] == "ready" for f in w.status()["folders"]))
        w.counts = _SlowCounts(w.counts)
        for r in roots:  # each forgets its file on a thread of its own, at the same time
            assert w.remove_folder(r)
        wait_until(lambda: not any(t.name == "ngramd-forget" for t in threading.enumerate()))
        assert sum(entry[0] == "forget" for entry in index.log) == 2
        assert w.status()["events"]["forgotten"] == 2
    finally:
        w.stop()


def test_a_symlink_to_a_file_outside_the_folder_is_not_indexed(watched, tmp_path_factory):
    """As the scan: a file link out of the folder is not indexed; one retargeted out leaves."""
    w, index, root, _ = watched
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.py").write_text("secret = 1\n")
    (root / "out.py").symlink_to(outside / "secret.py")
    (root / "ignored").mkdir()
    (root / "ignored" / "hidden.py").write_text("h = 1\n")
    (root / "in.py").symlink_to(root / "ignored" / "hidden.py")  # inside, to a file not indexed itself
    (root / "zz.py").write_text("z = 1\n")  # handled after both links (batches go in path order)
    wait_until(lambda: str(root / "zz.py") in index.files)
    assert index.files.get(str(root / "in.py")) == "h = 1\n"
    assert str(root / "out.py") not in index.files
    (root / "in.tmp").symlink_to(outside / "secret.py")
    (root / "in.tmp").replace(root / "in.py")  # retargeted out of the folder
    wait_until(lambda: str(root / "in.py") not in index.files)
    assert str(root / "out.py") not in index.files


def _indexed_text(index, key):
    f = index._files.get(key)
    return None if f is None else "".join(chr(int(t)) for t in f.tokens)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_scan_and_events_agree_on_a_tracked_file_the_gitignore_matches(tmp_path):
    """With the real index in a git work tree: ``git ls-files`` lists a file added with ``git add -f``
    though .gitignore matches it, so the scan indexes it; an edit of it reaches the index, a link to
    it stays a duplicate, and an untracked file the rules match stays out. A .gitignore that comes
    to match a tracked file leaves it followed too."""
    root = tmp_path.resolve()
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "keep.py").write_text("k = 1\n")
    (root / "build" / "out.py").write_text("o = 1\n")
    (root / "a.py").write_text("a = 1\n")
    (root / "link.py").symlink_to("build/keep.py")
    _git(root, "init", "-q")
    _git(root, "add", ".gitignore", "a.py")
    _git(root, "add", "-f", "build/keep.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        keys = sorted(str(root / n) for n in (".gitignore", "a.py", "build/keep.py"))
        assert sorted(index._files) == keys
        (root / "build" / "keep.py").write_text("k = 2\n")
        (root / "build" / "out.py").write_text("o = 2\n")
        w.reindex_from_disk(root / "link.py")  # as when a buffer of the link closes
        (root / "zz.py").write_text("z = 1\n")  # handled after the others (batches go in path order)
        wait_until(lambda: _indexed_text(index, str(root / "zz.py")) == "z = 1\n")
        assert _indexed_text(index, str(root / "build" / "keep.py")) == "k = 2\n"
        assert sorted(index._files) == sorted(keys + [str(root / "zz.py")])

        state = w.folders[root]
        first_scan = state["counts"]
        (root / ".gitignore").write_text("build/\na.py\n")
        wait_until(lambda: state["counts"] is not first_scan and state["state"] == "ready")
        assert _indexed_text(index, str(root / "a.py")) == "a = 1\n"  # git lists it: the rescan keeps it
        (root / "a.py").write_text("a = 2\n")
        wait_until(lambda: _indexed_text(index, str(root / "a.py")) == "a = 2\n")
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("tracked_at_scan", [False, True])
def test_git_add_force_and_rm_cached_reach_the_index_without_an_edit(tmp_path, git_home, tracked_at_scan):
    """With the real index in a git work tree: ``git add -f`` of a file the .gitignore matches makes
    the scan's ``git ls-files`` list it, ``git rm --cached`` unlists it; neither touches the file
    (no event comes for it, nor for git's index), yet the index follows both, whichever comes first."""
    root = (tmp_path / "repo").resolve()
    (root / "build").mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n")
    (root / "build" / "keep.py").write_text("k = 1\n")
    (root / "a.py").write_text("a = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".gitignore", "a.py")
    if tracked_at_scan:
        _git(root, "add", "-f", "build/keep.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    keep = str(root / "build" / "keep.py")
    others = [str(root / ".gitignore"), str(root / "a.py")]
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == sorted(others + [keep] * tracked_at_scan)
        for _ in range(2):
            if keep in index._files:
                _git(root, "rm", "-q", "--cached", "build/keep.py")
                wait_until(lambda: keep not in index._files)
            else:
                _git(root, "add", "-f", "build/keep.py")
                wait_until(lambda: _indexed_text(index, keep) == "k = 1\n")
        assert sorted(index._files) == sorted(others + [keep] * tracked_at_scan)
    finally:
        w.stop()


def _repo_with_forced_files(tmp_path):
    """A git work tree whose .gitignore matches build/, with build/a.py, b.py, c.py force-added."""
    root = (tmp_path / "repo").resolve()
    (root / "build").mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n")
    for name in "abc":
        (root / "build" / f"{name}.py").write_text(f"{name} = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".gitignore")
    _git(root, "add", "-f", "build/a.py", "build/b.py", "build/c.py")
    return root, [str(root / "build" / f"{name}.py") for name in "abc"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_failed_git_ls_files_leaves_the_tracked_ignored_files_indexed(tmp_path, git_home, monkeypatch):
    """git failing once (a timeout, no fork) is no answer: the files it listed before stay indexed,
    and the next check asks again (it took the failure for "none tracked" and removed them all)."""
    import ngramd.daemon.workspace.ignorer as ignorer_module
    root, forced = _repo_with_forced_files(tmp_path)
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert all(f in index._files for f in forced)
        real, asked = ignorer_module.tracked_ignored, []

        def fails_once(folder):
            asked.append(folder)
            return None if len(asked) == 1 else real(folder)

        monkeypatch.setattr(ignorer_module, "tracked_ignored", fails_once)
        (root / "z.py").write_text("z = 1\n")
        _git(root, "add", "z.py")  # git's index changes: the watcher asks git again
        wait_until(lambda: len(asked) >= 2)  # the failure, then the retry
        (root / "build" / "d.py").write_text("d = 1\n")
        _git(root, "add", "-f", "build/d.py")  # and it goes on following git
        wait_until(lambda: str(root / "build" / "d.py") in index._files)
        assert all(f in index._files for f in forced)
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_one_file_that_fails_to_index_does_not_lose_the_others_git_added(tmp_path, git_home, monkeypatch):
    root, forced = _repo_with_forced_files(tmp_path)
    _git(root, "rm", "-q", "--cached", "build/a.py", "build/b.py", "build/c.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert not any(f in index._files for f in forced)
        real = index.index_file

        def unreadable_a(path):
            if str(path).endswith("a.py"):
                raise OSError("EIO")
            return real(path)

        monkeypatch.setattr(index, "index_file", unreadable_a)
        _git(root, "add", "-f", "build/a.py", "build/b.py", "build/c.py")
        wait_until(lambda: all(f in index._files for f in forced[1:]))
        assert forced[0] not in index._files
    finally:
        w.stop()


def test_a_gitignore_reaches_the_folders_it_can_change_only():
    """A .gitignore event makes git be asked again only by the folders whose rules it is part of:
    its own folder and those below (their own rules), and the folder it is in if above (git's)."""
    from ngramd.daemon.workspace.watcher import _rules_reach

    root = Path("/w/proj")
    assert _rules_reach(Path("/w/proj"), root) and _rules_reach(Path("/w/proj/sub"), root)
    assert _rules_reach(Path("/w"), root)  # a .gitignore above the folder: git_exclude_rules
    assert not _rules_reach(Path("/w/other"), root) and not _rules_reach(Path("/w/projx"), root)


def _hang_git_ls_files(monkeypatch, release: threading.Event) -> threading.Event:
    """From now on ``git ls-files -ci`` as the watcher runs it hangs until ``release`` is set (a
    locked index, a network filesystem); the Event returned is set once the watcher called it."""
    import ngramd.daemon.workspace.ignorer as ignorer_module

    real, asked = ignorer_module.tracked_ignored, threading.Event()

    def hangs(folder):
        asked.set()
        release.wait()
        return real(folder)

    monkeypatch.setattr(ignorer_module, "tracked_ignored", hangs)
    return asked


def _watch_repo_with_forced_files(tmp_path):
    root, forced = _repo_with_forced_files(tmp_path)
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    w.add_folder(root)
    wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
    assert all(f in index._files for f in forced)
    return w, index, root, forced


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_hanging_git_holds_no_file_event_and_its_answer_is_applied_later(tmp_path, git_home, monkeypatch):
    """git runs on a thread of its own, not the flusher's: while its ls-files hangs, an edit of a file
    the rules do not match still reaches the index; an edit of one they match waits for git's answer
    (whether git tracks it), and once git answers, that edit and the file git now tracks come in."""
    release = threading.Event()
    w, index, root, forced = _watch_repo_with_forced_files(tmp_path)
    try:
        asked = _hang_git_ls_files(monkeypatch, release)
        added = root / "build" / "d.py"
        added.write_text("d = 1\n")
        _git(root, "add", "-f", "build/d.py")  # git's index changes: the watcher asks git again
        wait_until(asked.is_set)
        (root / "build" / "a.py").write_text("a = 2\n")
        (root / "new.py").write_text("new = 1\n")
        wait_until(lambda: _indexed_text(index, str(root / "new.py")) == "new = 1\n")
        assert _indexed_text(index, forced[0]) == "a = 1\n"  # the rules match it: git decides
        assert str(added) not in index._files
        release.set()
        wait_until(lambda: _indexed_text(index, str(added)) == "d = 1\n")
        wait_until(lambda: _indexed_text(index, forced[0]) == "a = 2\n")
    finally:
        release.set()
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_reading_git_rules_that_fails_is_an_answer_not_a_loop(tmp_path, git_home, monkeypatch):
    """Rules that cannot be read (an exception, not an unreadable file) keep the last ones: the
    paths waiting on them are applied. They were put back to wait and git asked again at once,
    forever (2,000 git runs in 5 s, the edit never indexed)."""
    import ngramd.daemon.workspace.ignorer as ignorer_module

    w, index, root, forced = _watch_repo_with_forced_files(tmp_path)
    try:
        calls = []

        def failing(folder):
            calls.append(folder)
            raise RuntimeError("no rules today")
        monkeypatch.setattr(ignorer_module, "git_exclude_rules", failing)
        (root / ".gitignore").write_text("build/\n*.log\n")  # the rules are read again
        wait_until(lambda: calls)
        (root / "build" / "a.py").write_text("a = 2\n")  # matched by the rules: git's answer decides
        (root / "new.py").write_text("new = 1\n")
        wait_until(lambda: _indexed_text(index, forced[0]) == "a = 2\n")
        wait_until(lambda: _indexed_text(index, str(root / "new.py")) == "new = 1\n")
        settled = len(calls)
        time.sleep(1.0)  # no timing asserted: a loop would call it hundreds of times meanwhile
        assert len(calls) - settled <= 2, len(calls) - settled
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_stopping_the_watcher_while_git_hangs_does_not_wait_for_git(tmp_path, git_home, monkeypatch):
    """The flusher ends at once; git's late answer for a stopped watcher is dropped."""
    release = threading.Event()
    w, index, root, forced = _watch_repo_with_forced_files(tmp_path)
    try:
        asked = _hang_git_ls_files(monkeypatch, release)
        (root / "build" / "d.py").write_text("d = 1\n")
        _git(root, "add", "-f", "build/d.py")
        wait_until(asked.is_set)
        w.stop()
        wait_until(lambda: not w._flusher.is_alive())
        release.set()
        wait_until(lambda: not any(t.name == "ngramd-git" for t in threading.enumerate()))
        assert str(root / "build" / "d.py") not in index._files
    finally:
        release.set()
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_an_edit_of_info_exclude_applies_its_rules_as_a_gitignore_edit_does(tmp_path, git_home, monkeypatch):
    """A file ``.git/info/exclude`` comes to match leaves the index (a rescan), and its edits stay out."""
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    (root / "a.py").write_text("a = 1\n")
    (root / "secret.py").write_text("password = 1\n")
    _git(root, "init", "-q")
    _exclude(root, "info/exclude", "", monkeypatch)  # there before the watch: its edit is an event
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == [str(root / "a.py"), str(root / "secret.py")]
        _exclude(root, "info/exclude", "secret.py\n", monkeypatch)
        wait_until(lambda: str(root / "secret.py") not in index._files)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        (root / "secret.py").write_text("password = 2\n")
        (root / "zz.py").write_text("z = 1\n")  # handled after the other (batches go in path order)
        wait_until(lambda: _indexed_text(index, str(root / "zz.py")) == "z = 1\n")
        assert sorted(index._files) == [str(root / "a.py"), str(root / "zz.py")]
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_an_edit_of_the_user_excludes_file_rescans_every_folder(tmp_path, git_home, monkeypatch):
    """The user's excludes file (``~/.config/git/ignore`` here) lies outside every folder, so no
    folder's watch sees it: one watch on its directory does, and its edit (a rule added, the file
    deleted) re-applies the rules in every folder, as an edit of ``info/exclude`` does."""
    roots = [(tmp_path / name).resolve() for name in ("one", "two")]
    for root in roots:
        root.mkdir()
        (root / "a.py").write_text("a = 1\n")
        (root / "secret.py").write_text("password = 1\n")
        _git(root, "init", "-q")
    excludes = git_home / ".config" / "git" / "ignore"
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        for root in roots:
            w.add_folder(root)
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready", "ready"])
        secrets = [str(root / "secret.py") for root in roots]
        assert all(s in index._files for s in secrets)

        excludes.write_text("secret.py\n")  # created: both folders' secrets leave
        wait_until(lambda: not any(s in index._files for s in secrets))
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready", "ready"])
        (roots[0] / "secret.py").write_text("password = 2\n")
        (roots[0] / "zz.py").write_text("z = 1\n")  # handled after the other (batches go in path order)
        wait_until(lambda: _indexed_text(index, str(roots[0] / "zz.py")) == "z = 1\n")
        assert secrets[0] not in index._files

        excludes.unlink()  # deleted: they come back
        wait_until(lambda: all(s in index._files for s in secrets))
        assert _indexed_text(index, secrets[0]) == "password = 2\n"
        assert list(w._excludes.watches) == [excludes]  # one watch for both folders
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("link", ["file", "folder"])
def test_an_edit_of_a_symlinked_user_excludes_file_rescans(tmp_path, git_home, link):
    """The user's excludes file is often a symlink into a dotfiles folder (stow, chezmoi): the file,
    or its folder (stow folds ``~/.config/git`` into one link). The user edits the target, in
    place or replaced at once (an editor's rename), which a watch on the link's folder never sees:
    the target's folder is watched too."""
    dotfiles = tmp_path / "dotfiles" / "git"
    dotfiles.mkdir(parents=True)
    target = dotfiles / "ignore"
    target.write_text("")
    git_dir = git_home / ".config" / "git"
    if link == "file":
        (git_dir / "ignore").symlink_to(target)
    else:
        git_dir.rmdir()
        git_dir.symlink_to(dotfiles, target_is_directory=True)
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    (root / "a.py").write_text("a = 1\n")
    (root / "secret.py").write_text("password = 1\n")
    _git(root, "init", "-q")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    secret = str(root / "secret.py")
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert secret in index._files

        target.write_text("secret.py\n")  # edited where the user keeps it
        wait_until(lambda: secret not in index._files)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")

        (dotfiles / "ignore.tmp").write_text("")  # replaced at once: the rule is gone
        (dotfiles / "ignore.tmp").replace(target)
        wait_until(lambda: secret in index._files)
        assert list(w._excludes.watches) == [git_dir / "ignore"]
        assert len(w._excludes.watches[git_dir / "ignore"]) == 2  # the link's folder and the target's
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_user_excludes_file_in_a_missing_directory_is_not_watched_and_fails_nothing(tmp_path, git_home):
    """core.excludesFile may name a file whose directory is not there: no watch, the folder is indexed."""
    _git(tmp_path, "config", "--global", "core.excludesFile", str(tmp_path / "nowhere" / "ignore"))
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    (root / "a.py").write_text("a = 1\n")
    _git(root, "init", "-q")
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert w._excludes.watches == {}
        (root / "b.py").write_text("b = 1\n")
        wait_until(lambda: str(root / "b.py") in index.files)
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_user_excludes_file_whose_directory_comes_later_is_watched_from_the_next_add_folder(tmp_path, git_home):
    """No watch while the excludes file's directory is missing; each add_folder tries again, so once
    it is there the next folder added sets the watch up, and its edit rescans every folder."""
    excludes = tmp_path / "later" / "ignore"
    _git(tmp_path, "config", "--global", "core.excludesFile", str(excludes))
    roots = [(tmp_path / name).resolve() for name in ("one", "two")]
    for root in roots:
        root.mkdir()
        (root / "secret.py").write_text("password = 1\n")
        _git(root, "init", "-q")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    secrets = [str(root / "secret.py") for root in roots]
    try:
        w.add_folder(roots[0])
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready"])
        assert w._excludes.watches == {}
        excludes.parent.mkdir()
        w.add_folder(roots[1])
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready", "ready"])
        assert list(w._excludes.watches) == [excludes]
        assert all(s in index._files for s in secrets)
        excludes.write_text("secret.py\n")
        wait_until(lambda: not any(s in index._files for s in secrets))
    finally:
        w.stop()

def _refuse_thread_start(monkeypatch, name: str) -> list:
    """Make the next start of a thread called ``name`` fail as at the process's thread limit;
    the threads refused are appended to the returned list (one at most)."""
    real_start, refused = threading.Thread.start, []

    def start_refusing_once(thread):
        if thread.name == name and not refused:
            refused.append(thread)
            raise RuntimeError("can't start new thread")
        return real_start(thread)
    monkeypatch.setattr(threading.Thread, "start", start_refusing_once)
    return refused


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_git_thread_that_fails_to_start_is_started_at_the_next_need(tmp_path, git_home, monkeypatch):
    """A thread that cannot start (the process at its limit) is no git run: the folder's next need
    of git starts one. It was taken for a run in progress, and the folder never asked git again."""
    w, index, root, forced = _watch_repo_with_forced_files(tmp_path)
    try:
        refused = _refuse_thread_start(monkeypatch, "ngramd-git")
        (root / "build" / "d.py").write_text("d = 1\n")
        _git(root, "add", "-f", "build/d.py")  # git's index changes: the watcher asks git
        wait_until(lambda: refused)
        (root / "build" / "a.py").write_text("a = 2\n")  # the rules match it: it waits on git's answer
        wait_until(lambda: _indexed_text(index, str(root / "build" / "d.py")) == "d = 1\n")
        wait_until(lambda: _indexed_text(index, forced[0]) == "a = 2\n")
    finally:
        w.stop()


def test_a_scan_thread_that_fails_to_start_is_reported_and_the_next_rescan_runs(watched, monkeypatch):
    """A scan whose thread cannot start is an error in status, not a scan in progress: the next
    rescan (a .gitignore edit) runs. It was taken for one running, and every later rescan waited on it."""
    w, index, root, _ = watched
    state = w.folders[root]
    refused = _refuse_thread_start(monkeypatch, "ngramd-index")
    (root / "b.py").write_text("b = 1\n")
    (root / ".gitignore").write_text("ignored/\nb.py\n")  # a rescan: refused
    wait_until(lambda: refused)
    wait_until(lambda: state["state"] == "error")
    assert "can't start new thread" in state["error"]
    scans = index.log.count(("scan", str(root)))
    (root / ".gitignore").write_text("ignored/\n")  # the next rescan runs
    wait_until(lambda: index.log.count(("scan", str(root))) > scans and state["state"] == "ready")
    assert str(root / "b.py") in index.files


def test_a_folder_whose_watch_thread_fails_to_start_can_be_added_again(tmp_path, monkeypatch):
    """add_folder raises, and the folder is not kept as watched (it was, and never watched nor scanned)."""
    (tmp_path / "a.py").write_text("a = 1\n")
    root = tmp_path.resolve()
    index = FakeIndex()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        refused = _refuse_thread_start(monkeypatch, "ngramd-watch")
        with pytest.raises(RuntimeError):
            w.add_folder(root)
        assert len(refused) == 1
        assert w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert str(root / "a.py") in index.files
    finally:
        w.stop()


def test_removing_a_folder_while_its_deletion_is_being_handed_over_does_not_deadlock(tmp_path, monkeypatch):
    """watchdog holds its lock while it hands over events, and unscheduling a watch takes that lock;
    the root's deletion handler takes the folders lock. remove_folder unscheduled under the folders
    lock: a folder deleted as the editor removed it froze the daemon's event loop for good. The
    handler is slowed down so that the two meet every time."""
    root = (tmp_path / "proj")
    root.mkdir()
    (root / "a.py").write_text("a = 1\n")
    root = root.resolve()
    w = WorkspaceWatcher(FakeIndex(), lambda p: False, debounce_s=0.1)
    in_handler = threading.Event()
    root_deleted = WorkspaceWatcher._root_deleted

    def slow_root_deleted(self, r, state):
        in_handler.set()
        time.sleep(0.3)  # watchdog's thread holds its lock here
        root_deleted(self, r, state)
    monkeypatch.setattr(WorkspaceWatcher, "_root_deleted", slow_root_deleted)
    try:
        w.add_folder(root)
        wait_until(lambda: root in w._watches)
        shutil.rmtree(root)
        assert in_handler.wait(10), "no event for the folder's deletion"
        remover = threading.Thread(target=w.remove_folder, args=(root,), daemon=True)
        remover.start()
        remover.join(10)
        assert not remover.is_alive(), "remove_folder is deadlocked"
        assert root not in w.folders
    finally:
        if not w._folders_lock.locked():
            w.stop()
