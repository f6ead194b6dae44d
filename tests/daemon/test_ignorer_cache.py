"""The Ignorer's cache of parsed .gitignore files: read again whenever the file may have changed,
not only when its mtime did (a rewrite within the timestamp granularity, ``git checkout``,
``cp -p`` and ``touch -d`` keep it or set it back)."""

import os
import time

import pathspec
import pytest

import ngramd.daemon.workspace.ignorer
from ngramd.daemon.workspace.ignorer import Ignorer

OLD_RULES, NEW_RULES = "*.log\n", "*.tmp\n"  # the same size


def _rewrite_in_place(path, text):
    with open(path, "r+") as f:
        f.write(text)


def _replace_by_a_copy(path, text):
    """As ``git checkout`` and ``cp`` into place do: another file (inode) renamed over it."""
    copy = path.with_name(path.name + ".new")
    copy.write_text(text)
    os.replace(copy, path)


def _set_mtime_back(path, before):
    """Give ``path`` the mtime of its stat ``before`` (``cp -p``, ``touch -d``), once its ctime
    moved past ``before``'s (a utime sets it to now; the clock ticks every few ms): then only
    the ctime can tell the change."""
    deadline = time.monotonic() + 5
    while True:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        if after.st_ctime_ns != before.st_ctime_ns:
            break
        assert time.monotonic() < deadline, "the file's ctime did not move"
    assert after.st_mtime_ns == before.st_mtime_ns


def _reads_counted(monkeypatch):
    reads = []
    read = ngramd.daemon.workspace.ignorer.ignore_file_bytes
    monkeypatch.setattr(ngramd.daemon.workspace.ignorer, "ignore_file_bytes", lambda path: reads.append(path) or read(path))
    return reads


def _compiles_counted(monkeypatch):
    """Count the patterns compiled (pathspec's own parser, whoever calls it)."""
    compiles = []
    compile_ = pathspec.GitIgnoreSpec.from_lines
    monkeypatch.setattr(pathspec.GitIgnoreSpec, "from_lines",
                        classmethod(lambda cls, lines, *a, **kw: compiles.append(1) or compile_(lines, *a, **kw)))
    return compiles


@pytest.mark.parametrize("change", [_rewrite_in_place, _replace_by_a_copy])
def test_a_changed_gitignore_given_its_old_mtime_back_is_read_again(tmp_path, change):
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text(OLD_RULES)
    ignorer = Ignorer(tmp_path)
    assert ignorer.ignored(tmp_path / "a.log") and not ignorer.ignored(tmp_path / "a.tmp")
    before = os.stat(gitignore)
    change(gitignore, NEW_RULES)
    _set_mtime_back(gitignore, before)
    assert ignorer.ignored(tmp_path / "a.tmp") and not ignorer.ignored(tmp_path / "a.log")


def test_a_settled_gitignore_is_read_once_until_its_ctime_tells_a_change(tmp_path, monkeypatch):
    """Changed long ago (every file, here), its stat is trusted: read once for many paths; rewritten in
    place at the same size with its mtime set back, its ctime alone tells the change."""
    monkeypatch.setattr(ngramd.daemon.workspace.ignorer, "_SETTLED_NS", 0)
    reads = _reads_counted(monkeypatch)
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text(OLD_RULES)
    ignorer = Ignorer(tmp_path)
    assert all(ignorer.ignored(tmp_path / f"{n}.log") for n in range(3))
    assert len(reads) == 1
    before = os.stat(gitignore)
    _rewrite_in_place(gitignore, NEW_RULES)
    _set_mtime_back(gitignore, before)
    assert ignorer.ignored(tmp_path / "a.tmp") and not ignorer.ignored(tmp_path / "a.log")
    assert len(reads) == 2


def test_a_gitignore_changed_just_now_is_read_again_though_its_stat_is_the_same(tmp_path, monkeypatch):
    """Rewritten in place at the same size within one tick of the filesystem's clock, every field of
    its stat stays as it was (here: the signature made equal); a file that recent is read again."""
    monkeypatch.setattr(ngramd.daemon.workspace.ignorer, "_file_signature", lambda st: ("the same stat",))
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text(OLD_RULES)
    ignorer = Ignorer(tmp_path)
    assert ignorer.ignored(tmp_path / "a.log")
    _rewrite_in_place(gitignore, NEW_RULES)
    assert ignorer.ignored(tmp_path / "a.tmp") and not ignorer.ignored(tmp_path / "a.log")


def test_git_index_rewritten_at_its_size_and_mtime_is_seen_by_its_ctime(tmp_path, monkeypatch):
    """Git's index file rewritten in place at the same size and given its old mtime back (restored
    with ``cp -p``, say) counts as changed: ls-files runs again."""
    import subprocess

    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    (tmp_path / ".gitignore").write_text(OLD_RULES)
    (tmp_path / "a.py").write_text("a = 1\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.py"], check=True)
    ignorer = Ignorer(tmp_path)
    assert ignorer.ignored(tmp_path / "a.log")
    ignorer.tracked_changes()
    assert not ignorer.git_outdated()
    index = tmp_path / ".git" / "index"
    before = os.stat(index)
    with open(index, "r+b") as f:
        f.write(index.read_bytes())
    _set_mtime_back(index, before)
    assert os.stat(index).st_ino == before.st_ino and os.stat(index).st_size == before.st_size
    assert ignorer.git_outdated()


def test_a_gitignore_changed_just_now_is_compiled_again_only_when_its_bytes_change(tmp_path, monkeypatch):
    """A file that recent is read at every look-up (its stat may not tell its next change), but
    compiled again only when its bytes differ: compiled for every path during a checkout, it
    made 2000 look-ups take 4 s, not 1."""
    monkeypatch.setattr(ngramd.daemon.workspace.ignorer, "_SETTLED_NS", 10**18)  # every file changed just now
    gitignore = tmp_path / ".gitignore"
    gitignore.write_text(OLD_RULES)
    ignorer = Ignorer(tmp_path)
    compiles = _compiles_counted(monkeypatch)
    assert all(ignorer.ignored(tmp_path / f"{n}.log") for n in range(5))
    assert len(compiles) == 1
    reads = _reads_counted(monkeypatch)
    _rewrite_in_place(gitignore, NEW_RULES)
    assert ignorer.ignored(tmp_path / "a.tmp") and not ignorer.ignored(tmp_path / "a.log")
    assert len(compiles) == 2 and len(reads) == 2  # read at each look-up all the same
