"""Nested repositories (a folder below a workspace folder that holds a repository): events skip the
files of one the outer repository does not track, as the scan does (git lists it as one ``name/``),
and follow the files git lists in a tracked folder that became one; a nested repository added as a
folder of its own decides for its files; a repository made or removed in a folder, or git's listing
changed by its index, rescans it (no event of the files comes); what git takes for one."""

import shutil
import subprocess

import pytest
from daemon_helpers import real_index, wait_until

from ngramd.daemon.workspace.watcher import WorkspaceWatcher

# watchdog's harmless "Callback ... already exists" (see daemon/workspace/watcher.py, whose filter pytest resets
# around each test); under -W error it would kill watchdog's inotify reader and leave the test deaf
pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
              pytest.mark.filterwarnings(
                  "ignore:Callback with id .* already exists:RuntimeWarning:watchdog.observers.inotify")]


@pytest.fixture(autouse=True)
def git_home(tmp_path, monkeypatch):
    """HOME in the test's folder, no system config, an identity for commits: git reads the test's
    settings, not the user's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "t")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "t@example.com")
    return home


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _indexed_text(index, key):
    f = index._files.get(key)
    return None if f is None else "".join(chr(int(t)) for t in f.tokens)


def _outer_with_untracked_repo(tmp_path):
    """outer/: a work tree with a.py and an untracked nested repository inner/ holding x.py."""
    root = (tmp_path / "outer").resolve()
    (root / "inner").mkdir(parents=True)
    (root / "a.py").write_text("a = 1\n")
    (root / "inner" / "x.py").write_text("x = 1\n")
    _git(root / "inner", "init", "-q")
    _git(root, "init", "-q")
    return root


def _repo_with_nested_repo_and_submodule(tmp_path):
    """``_outer_with_untracked_repo`` (git lists ``inner/``) and a submodule sub/ (git lists one
    gitlink entry ``sub``)."""
    src = (tmp_path / "src").resolve()
    src.mkdir()
    (src / "s.py").write_text("s = 1\n")
    _git(src, "init", "-q")
    _git(src, "add", "s.py")
    _git(src, "commit", "-q", "-m", "s")
    root = _outer_with_untracked_repo(tmp_path)
    _git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(src), "sub")
    return root


def _flushed_up_to(w, index, root, name):
    """Write ``root/name`` (a file of the outer repository, last in path order: batches go in path
    order) and wait until it is indexed: every event before it has been handled."""
    (root / name).write_text(f"{name[:2]} = 1\n")
    wait_until(lambda: _indexed_text(index, str(root / name)) == f"{name[:2]} = 1\n")
    wait_until(lambda: w.status()["pending"] == 0)


def test_git_lists_an_untracked_nested_repository_as_one_entry(tmp_path):
    """``nested_repositories`` is git's ``name/`` entry, and the scan counts it as the walk does."""
    from collections import Counter

    from ngramd.index.workspace import discover, nested_repositories

    root = _outer_with_untracked_repo(tmp_path)
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert sorted(out) == ["a.py", "inner/"]
    assert nested_repositories(root) == {root / "inner"}
    counts = Counter()
    assert discover(root, counts) == [root / "a.py"] and counts["nested_repo"] == 1


def test_events_skip_the_files_of_an_untracked_nested_repository_as_the_scan_does(tmp_path):
    """With the real index: the scan lists none of inner/'s files, and an edit or a new file there
    stays out (they entered the index until the next rescan); a file of the outer repository written
    with them comes in. A delete there removes a file indexed before git named the repository."""
    root = _outer_with_untracked_repo(tmp_path)
    x, new = str(root / "inner" / "x.py"), str(root / "inner" / "new.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == [str(root / "a.py")]
        (root / "inner" / "x.py").write_text("x = 2\n")
        (root / "inner" / "new.py").write_text("n = 1\n")
        (root / "inner" / "deep").mkdir()
        (root / "inner" / "deep" / "d.py").write_text("d = 1\n")
        _flushed_up_to(w, index, root, "zz.py")
        assert sorted(index._files) == [str(root / "a.py"), str(root / "zz.py")]

        assert index.index_file(x)  # as if an event had indexed it before git's answer came
        (root / "inner" / "x.py").unlink()
        wait_until(lambda: x not in index._files)
        assert new not in index._files
        assert w.status()["folders"][0]["counts"]["nested_repo"] == 1  # the scan's count
    finally:
        w.stop()


def test_a_repository_removed_from_an_untracked_folder_has_its_events_followed_again(tmp_path):
    """``rm -rf inner/.git``: the rescan it brings lists inner/'s files, and git's next answer names
    no repository there, so their edits come in again."""
    root = _outer_with_untracked_repo(tmp_path)
    x = str(root / "inner" / "x.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        (root / "inner" / "x.py").write_text("x = 2\n")
        _flushed_up_to(w, index, root, "zz.py")
        assert x not in index._files
        shutil.rmtree(root / "inner" / ".git")
        wait_until(lambda: _indexed_text(index, x) == "x = 2\n")
        (root / "inner" / "x.py").write_text("x = 3\n")
        (root / "inner" / "new.py").write_text("n = 1\n")
        wait_until(lambda: _indexed_text(index, x) == "x = 3\n")
        wait_until(lambda: str(root / "inner" / "new.py") in index._files)
    finally:
        w.stop()


def test_a_folder_git_stops_tracking_that_holds_a_repository_leaves_the_index(tmp_path):
    """``git rm --cached -r sub`` where sub/ holds a repository: git now lists it as one ``sub/``,
    with no file event; git's answer after its index changed rescans the folder, and sub/'s files
    and their edits stay out."""
    root = (tmp_path / "outer").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("a = 1\n")
    (root / "sub" / "t.py").write_text("t = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root / "sub", "init", "-q")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    key = str(root / "sub" / "t.py")
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert key in index._files  # git lists the tracked file
        _git(root, "rm", "-q", "-r", "--cached", "sub")
        wait_until(lambda: key not in index._files)
        (root / "sub" / "t.py").write_text("t = 2\n")
        _flushed_up_to(w, index, root, "zz.py")
        assert key not in index._files
    finally:
        w.stop()


def test_a_nested_repository_added_as_a_folder_of_its_own_follows_its_events(tmp_path):
    """With the real index: the deepest folder decides for a path: the outer folder (added first)
    ignores inner/'s files, the inner folder does not. Once the inner folder is removed, its files
    leave: the outer one does not hold them."""
    root = _repo_with_nested_repo_and_submodule(tmp_path)
    inner = root / "inner"
    x = str(inner / "x.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        for folder in (root, inner):
            w.add_folder(folder)
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready", "ready"])
        assert _indexed_text(index, x) == "x = 1\n"
        (inner / "x.py").write_text("x = 2\n")
        wait_until(lambda: _indexed_text(index, x) == "x = 2\n")

        assert w.remove_folder(inner)  # the outer folder does not hold them: git lists ``inner/``
        wait_until(lambda: x not in index._files)
        assert str(root / "a.py") in index._files
    finally:
        w.stop()


def test_a_repository_made_or_removed_inside_the_folder_rescans_it(tmp_path):
    """With the real index: ``git init`` in a subfolder takes its files out of the scan's listing, and
    removing its ``.git`` brings them back; no event of theirs comes, so the folder is scanned again."""
    root = (tmp_path / "outer").resolve()
    (root / "lib").mkdir(parents=True)
    (root / "a.py").write_text("a = 1\n")
    (root / "lib" / "y.py").write_text("y = 1\n")
    _git(root, "init", "-q")
    y = str(root / "lib" / "y.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert _indexed_text(index, y) == "y = 1\n"
        _git(root / "lib", "init", "-q")
        wait_until(lambda: y not in index._files)
        shutil.rmtree(root / "lib" / ".git")
        wait_until(lambda: _indexed_text(index, y) == "y = 1\n")
        assert str(root / "a.py") in index._files
    finally:
        w.stop()


def test_a_tracked_folder_that_becomes_a_repository_keeps_its_tracked_files_followed(tmp_path):
    """`git init sub` in a folder the outer repository tracks: the rescan it brings keeps what git
    still lists (the tracked files, and new files there too: git lists them as the folder's while
    the outer repository tracks files in it), and their edits and deletion reach the index."""
    root = (tmp_path / "outer").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("a = 1\n")
    (root / "sub" / "t.py").write_text("t = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "x")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    key = str(root / "sub" / "t.py")
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        _git(root / "sub", "init", "-q")
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready" and key in index._files)
        (root / "sub" / "t.py").write_text("t = 2  # edited\n")
        (root / "sub" / "new.py").write_text("n = 1\n")
        wait_until(lambda: _indexed_text(index, key) == "t = 2  # edited\n")
        (root / "sub" / "t.py").unlink()
        wait_until(lambda: key not in index._files)
        assert str(root / "sub" / "new.py") in index._files
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert "sub/new.py" in out and "sub/" not in out  # as git lists it: no repository named
        from ngramd.index.workspace import nested_repositories

        assert nested_repositories(root) == frozenset()
    finally:
        w.stop()


def test_a_repository_is_what_git_takes_for_one(tmp_path):
    """``holds_repository``, which the walk after a git failure skips as git does: a ``.git``
    folder with a ``HEAD`` or a ``gitdir:`` file; an empty ``.git`` folder or a stray file is none."""
    from ngramd.index.workspace import holds_repository

    cases = {"repo": None, "link": "gitdir: ../x/.git/modules/link\n", "empty": "dir", "stray": "not a link\n"}
    for name, dot_git in cases.items():
        (tmp_path / name).mkdir()
        if dot_git is None:
            _git(tmp_path / name, "init", "-q")
        elif dot_git == "dir":
            (tmp_path / name / ".git").mkdir()
        else:
            (tmp_path / name / ".git").write_text(dot_git)
    assert {n: holds_repository(str(tmp_path / n)) for n in cases} == {
        "repo": True, "link": True, "empty": False, "stray": False}
    assert not holds_repository(str(tmp_path / "absent"))


def test_git_lists_a_submodule_as_one_gitlink_and_the_scan_indexes_none_of_its_files(tmp_path):
    """``nested_repositories`` names the submodule (a tracked gitlink) with the untracked repository;
    the scan lists neither folder (not as a file either) and counts both as ``nested_repo``."""
    from collections import Counter

    from ngramd.index.workspace import discover, nested_repositories

    root = _repo_with_nested_repo_and_submodule(tmp_path)
    assert nested_repositories(root) == {root / "inner", root / "sub"}
    counts = Counter()
    assert discover(root, counts) == [root / ".gitmodules", root / "a.py"]
    assert counts["nested_repo"] == 2


def test_events_skip_the_files_of_a_submodule_as_the_scan_does(tmp_path):
    """With the real index: an edit or a new file in the submodule stays out, as the scan left them."""
    root = _repo_with_nested_repo_and_submodule(tmp_path)
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.1)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert sorted(index._files) == [str(root / ".gitmodules"), str(root / "a.py")]
        (root / "sub" / "s.py").write_text("s = 2\n")
        (root / "sub" / "new.py").write_text("n = 1\n")
        _flushed_up_to(w, index, root, "zz.py")
        assert sorted(index._files) == [str(root / ".gitmodules"), str(root / "a.py"), str(root / "zz.py")]
    finally:
        w.stop()


def test_a_failing_git_listing_is_asked_again_by_the_periodic_check_not_by_each_path(tmp_path, monkeypatch):
    """While ``git ls-files`` fails, ``ignored`` runs it once per state of git's index file (each
    file event would wait on git else); ``tracked_changes`` (the periodic check) asks again."""
    import ngramd.daemon.workspace.ignorer as ignorer_module
    from ngramd.daemon.workspace.ignorer import Ignorer

    root = _outer_with_untracked_repo(tmp_path)
    _git(root, "add", "a.py")
    asked = []

    def failing(folder):
        asked.append(folder)
        return None

    monkeypatch.setattr(ignorer_module, "tracked_ignored", failing)
    ignorer = Ignorer(root)
    for name in ("a.py", "b.py", "c.py"):
        assert not ignorer.ignored(root / name)
    assert len(asked) == 1
    ignorer.tracked_changes()
    assert len(asked) == 2
    (root / "b.py").write_text("b = 1\n")
    _git(root, "add", "b.py")  # git's index file changes: a path asks again
    ignorer.ignored(root / "b.py")
    assert len(asked) == 3


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_folder_added_around_a_nested_repository_leaves_its_files_to_its_own_rules(tmp_path):
    """A repository B watched as a folder, then the plain folder A around it: A's scan must not
    index what B's own git excludes (.git/info/exclude, which A's walk knows nothing of)."""
    outer = (tmp_path / "A").resolve()
    inner = outer / "B"
    inner.mkdir(parents=True)
    (inner / "code.py").write_text("c = 1\n")
    (inner / "secret.txt").write_text("password = 1\n")
    subprocess.run(["git", "-C", str(inner), "init", "-q"], check=True)
    (inner / ".git" / "info").mkdir(exist_ok=True)
    (inner / ".git" / "info" / "exclude").write_text("secret.txt\n")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        w.add_folder(inner)
        wait_until(lambda: all(f["state"] == "ready" for f in w.status()["folders"]))
        w.add_folder(outer)
        wait_until(lambda: len(w.status()["folders"]) == 2
                   and all(f["state"] == "ready" for f in w.status()["folders"]))
        assert sorted(index._files) == [str(inner / "code.py")]
        # B no longer watched: A decides for its files, by A's rules, which keep the secret
        w.remove_folder(inner)
        wait_until(lambda: str(inner / "secret.txt") in index._files
                   and all(f["state"] == "ready" for f in w.status()["folders"]))
        assert sorted(index._files) == [str(inner / "code.py"), str(inner / "secret.txt")]
    finally:
        w.stop()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_link_into_a_nested_watched_repository_follows_its_target(tmp_path):
    """A's listing leaves out the nested repository B's files, so A's scan indexes A/link.py (a
    link to B/x.py) as a file of its own; B/x.py's events go to B, which indexes it: the link
    must follow too."""
    outer = (tmp_path / "A").resolve()
    inner = outer / "B"
    inner.mkdir(parents=True)
    for repo in (outer, inner):
        subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    (inner / "x.py").write_text("X_V1 = 1\n")
    (outer / "link.py").symlink_to("B/x.py")
    index = real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    link = str(outer / "link.py")
    try:
        w.add_folder(outer)
        w.add_folder(inner)
        wait_until(lambda: len(w.status()["folders"]) == 2
                   and all(f["state"] == "ready" for f in w.status()["folders"]))
        assert link in index._files
        (inner / "x.py").write_text("X_V2 = 2\n")
        wait_until(lambda: _text(index, link) == "X_V2 = 2\n")
        (inner / "x.py").unlink()
        wait_until(lambda: link not in index._files)
    finally:
        w.stop()


def _text(index, key):
    f = index._files.get(key)
    return None if f is None else "".join(chr(int(t)) for t in f.tokens)
