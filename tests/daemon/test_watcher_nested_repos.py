"""Nested repositories (a folder below a workspace folder that holds a ``.git``): the watcher's events
follow the scan, which lists none of their files where it lists with git (``git ls-files``; the walk
after git failed skips them too), unless the nested repository is a folder of its own."""

import shutil
import subprocess

import pytest
from daemon_helpers import wait_until

from daemon.ignorer import Ignorer
from daemon.watcher import WorkspaceWatcher

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


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


def _real_index():
    from index import IndexConfig, NgramIndex

    return NgramIndex(lambda texts: [[ord(c) for c in t] for t in texts], IndexConfig(min_n=2, max_match=8))


def _indexed_text(index, key):
    f = index._files.get(key)
    return None if f is None else "".join(chr(int(t)) for t in f.tokens)


def _repo_with_nested_repo_and_submodule(tmp_path):
    """outer/: a work tree with a.py, a nested repository inner/ (untracked: git lists ``inner/``)
    and a submodule sub/ (git lists one gitlink entry ``sub``)."""
    src = (tmp_path / "src").resolve()
    src.mkdir()
    (src / "s.py").write_text("s = 1\n")
    _git(src, "init", "-q")
    _git(src, "add", "s.py")
    _git(src, "commit", "-q", "-m", "s")
    root = (tmp_path / "outer").resolve()
    (root / "inner").mkdir(parents=True)
    (root / "a.py").write_text("a = 1\n")
    (root / "inner" / "x.py").write_text("x = 1\n")
    _git(root / "inner", "init", "-q")
    _git(root, "init", "-q")
    _git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(src), "sub")
    return root


def test_events_skip_the_files_of_a_nested_repository_and_a_submodule_as_the_scan_does(tmp_path):
    """With the real index: the scan lists none of inner/'s nor sub/'s files; an edit or a new file
    there did reach the index (a file appeared in it only once touched)."""
    root = _repo_with_nested_repo_and_submodule(tmp_path)
    index = _real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        w.add_folder(root)
        wait_until(lambda: w.status()["folders"][0]["state"] == "ready")
        assert str(root / "a.py") in index._files
        scanned = sorted(index._files)
        assert not [k for k in scanned if k.startswith((str(root / "inner") + "/", str(root / "sub") + "/"))]
        (root / "inner" / "x.py").write_text("x = 2\n")
        (root / "inner" / "new.py").write_text("n = 1\n")
        (root / "inner" / "deep").mkdir()
        (root / "inner" / "deep" / "d.py").write_text("d = 1\n")
        (root / "sub" / "s.py").write_text("s = 2\n")
        (root / "sub" / "t.py").write_text("t = 1\n")
        (root / "zz.py").write_text("z = 1\n")  # handled after the others (batches go in path order)
        wait_until(lambda: _indexed_text(index, str(root / "zz.py")) == "z = 1\n")
        assert sorted(index._files) == sorted(scanned + [str(root / "zz.py")])
    finally:
        w.stop()


def test_a_nested_repository_added_as_a_folder_of_its_own_follows_its_events(tmp_path):
    """With the real index: the deepest folder decides for a path: the outer folder (added first)
    ignores inner/'s files, the inner folder does not. Once the inner folder is removed, its files
    leave: the outer one does not hold them."""
    root = _repo_with_nested_repo_and_submodule(tmp_path)
    inner = root / "inner"
    x = str(inner / "x.py")
    index = _real_index()
    w = WorkspaceWatcher(index, lambda p: False, debounce_s=0.2)
    try:
        for folder in (root, inner):
            w.add_folder(folder)
        wait_until(lambda: [f["state"] for f in w.status()["folders"]] == ["ready", "ready"])
        assert _indexed_text(index, x) == "x = 1\n"
        (inner / "x.py").write_text("x = 2\n")
        wait_until(lambda: _indexed_text(index, x) == "x = 2\n")

        assert w.remove_folder(inner)
        wait_until(lambda: x not in index._files)
        assert str(root / "a.py") in index._files
        (inner / "x.py").write_text("x = 3\n")
        (root / "zz.py").write_text("z = 1\n")  # handled after the others (batches go in path order)
        wait_until(lambda: str(root / "zz.py") in index._files)
        assert x not in index._files
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
    index = _real_index()
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


def test_ignorer_ignores_a_nested_repository_only_where_the_scan_lists_with_git(tmp_path):
    """In a work tree, a file below a folder holding a ``.git`` is ignored (not the folder's own entry);
    in a plain folder the walk goes into nested repositories, and so does the Ignorer. Which folders
    hold a ``.git`` is stat'ed again after ``forget_repo_dirs``."""
    plain = (tmp_path / "plain").resolve()
    (plain / "inner").mkdir(parents=True)
    _git(plain / "inner", "init", "-q")
    assert not Ignorer(plain).ignored(plain / "inner" / "x.py")

    root = (tmp_path / "outer").resolve()
    (root / "inner" / "deep").mkdir(parents=True)
    _git(root, "init", "-q")
    _git(root / "inner", "init", "-q")
    ig = Ignorer(root)
    for path in (root / "inner" / "x.py", root / "inner" / "deep" / "d.py"):
        assert ig.ignored(path) and ig.ignored_now(path)
    assert ig.ignored_now(root / "inner") is False and ig.ignored_now(root / "a.py") is False

    shutil.rmtree(root / "inner" / ".git")
    assert ig.ignored_now(root / "inner" / "x.py")  # as stat'ed before
    ig.forget_repo_dirs()
    assert ig.ignored_now(root / "inner" / "x.py") is False
    (root / "inner" / ".git").write_text("gitdir: ../.git/modules/inner\n")  # a submodule's .git file
    ig.forget_repo_dirs()
    assert ig.ignored_now(root / "inner" / "x.py")
