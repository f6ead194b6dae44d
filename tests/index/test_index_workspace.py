"""Workspace discovery (.gitignore, git ls-files, symlink loops) and index_workspace."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections import Counter

import pytest

from ngramd.index import IndexConfig, NgramIndex
from ngramd.index.workspace import discover, git_exclude_rules, git_index, gitignored, read_gitignore, tracked_ignored
from index_helpers import char_tokenize, ids, text


def _tree(root):
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("alpha = 1\n")
    (root / "src" / "b.py").write_text("beta = 2\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("generated = 3\n")
    (root / "src" / "skip.log").write_text("log\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "src" / ".gitignore").write_text("b.py\n")
    (root / "bin.dat").write_bytes(b"\0\1\2")
    (root / "big.txt").write_text("z" * 5000)


def _names(root, files):
    return sorted(os.path.relpath(f, root) for f in files)


def test_walk_respects_nested_gitignore_and_counts_loops(tmp_path):
    _tree(tmp_path)
    os.symlink(tmp_path / "src", tmp_path / "src" / "again")  # a directory loop
    counts = Counter()
    files = discover(tmp_path, counts)
    assert _names(tmp_path, files) == [".gitignore", "big.txt", "bin.dat", "src/.gitignore", "src/a.py"]
    assert counts["symlink_loop"] == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_ls_files_lists_tracked_and_untracked_not_ignored(tmp_path):
    _tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    files = discover(tmp_path)
    assert _names(tmp_path, files) == [".gitignore", "big.txt", "bin.dat", "src/.gitignore", "src/a.py"]


def test_index_workspace_counts_progress_and_skips(tmp_path):
    _tree(tmp_path)
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_file_bytes=1000, batch_files=2))
    calls = []
    out = idx.index_workspace(tmp_path, progress=lambda d, n: calls.append((d, n)))
    assert out["files"] == 5 and out["indexed"] == 3 and out["binary"] == 1 and out["too_large"] == 1
    assert out["stopped"] is False
    assert calls == [(2, 5), (4, 5), (5, 5)]
    assert idx.propose(ids("alph"), k=3)
    assert not idx.propose(ids("generat"), k=3)  # ignored
    assert idx.stats()["skipped"] == {"binary": 1, "too_large": 1}


def test_rescan_drops_files_now_skipped_deleted_or_ignored(tmp_path):
    (tmp_path / "keep.py").write_text("keepsake = 1\n")
    (tmp_path / "grows.py").write_text("growing = 2\n")
    (tmp_path / "gone.py").write_text("vanished = 3\n")
    (tmp_path / "hidden.py").write_text("secretly = 4\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=3, max_file_bytes=1000))
    assert idx.index_workspace(tmp_path)["indexed"] == 4
    for word in ("keepsak", "growin", "vanishe", "secretl"):
        assert idx.propose(ids(word), k=2), word
    (tmp_path / "grows.py").write_text("growing = 2\n" + "z" * 5000)  # now too large
    (tmp_path / "gone.py").unlink()
    (tmp_path / ".gitignore").write_text("hidden.py\n")
    out = idx.index_workspace(tmp_path)
    assert out["too_large"] == 1 and out["removed"] == 3
    assert idx.propose(ids("keepsak"), k=2)
    for word in ("growin", "vanishe", "secretl"):
        assert not idx.propose(ids(word), k=2), word
    assert idx.stats()["workspace_files"] == 2  # keep.py and .gitignore


def _scanned_folders(folders: dict) -> NgramIndex:
    """Each folder gets WORD.py holding ``WORD_value = 1``; the index scans them in order."""
    for d, word in folders.items():
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{word}.py").write_text(f"{word}_value = 1\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=3))
    for d in folders:
        idx.index_workspace(d)
    return idx


def test_rescan_keeps_what_it_does_not_own(tmp_path):
    ws, sibling, nested = tmp_path / "ws", tmp_path / "ws2", tmp_path / "ws" / "sub"
    idx = _scanned_folders({nested: "nested", sibling: "sibling", ws: "outer"})
    (ws / ".gitignore").write_text("sub/\n")  # the nested folder is its own workspace root
    late = ws / "late.py"

    def add_during_scan(done, total):  # a file event while the scan runs
        late.write_text("latecomer = 1\n")
        idx.index_file(late)
        late.unlink()  # gone from disk again, yet indexed after discovery: not the scan's to drop

    out = idx.index_workspace(ws, progress=add_during_scan)
    assert out["removed"] == 0
    for word in ("outer_valu", "sibling_valu", "nested_valu", "latecome"):
        assert idx.propose(ids(word), k=2), word


def test_forget_root_drops_its_files_but_those_kept(tmp_path):
    outer, inner, other = tmp_path / "outer", tmp_path / "outer" / "inner", tmp_path / "other"
    idx = _scanned_folders({outer: "alpha", inner: "bravo", other: "charlie"})
    keep_inner = str(inner.resolve())  # the caller says another folder still holds inner/
    assert idx.forget_root(outer, keep=lambda key: key.startswith(keep_inner)) == 1  # alpha.py
    assert not idx.propose(ids("alpha"), k=2)
    assert idx.propose(ids("bravo"), k=2) and idx.propose(ids("charli"), k=2)
    assert idx.forget_root(inner) == 1
    assert not idx.propose(ids("bravo"), k=2)
    assert idx.stats()["workspace_files"] == 1


def test_a_scan_of_a_forgotten_root_installs_nothing_more(tmp_path):
    for i in range(6):
        (tmp_path / f"f{i}.py").write_text(f"name{i} = {i}\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=3, batch_files=2))
    calls = []

    def forget_once(done, total):
        calls.append(done)
        if len(calls) == 1:
            idx.forget_root(tmp_path)  # the first batch (2 files) went in before it

    out = idx.index_workspace(tmp_path, progress=forget_once)
    assert out["stopped"] is True and calls == [2]
    assert idx.stats()["workspace_files"] == 0


def test_a_scan_stopped_before_it_began_leaves_no_root_behind(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "a.py").write_text("alpha = 1\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=3))
    stop = threading.Event()
    stop.set()  # the folder was closed before its scan thread started
    assert idx.index_workspace(sub, stop_event=stop)["stopped"] is True
    idx.index_workspace(tmp_path)
    (sub / "a.py").unlink()
    # a phantom root "sub" would shield sub/a.py from the enclosing folder's sweep
    assert idx.index_workspace(tmp_path)["removed"] == 1


def test_a_stopped_rescan_removes_nothing(tmp_path):
    for i in range(6):
        (tmp_path / f"f{i}.py").write_text(f"name{i} = {i}\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=3, batch_files=2))
    idx.index_workspace(tmp_path)
    for i in range(3):
        (tmp_path / f"f{i}.py").unlink()
    stop = threading.Event()
    out = idx.index_workspace(tmp_path, progress=lambda d, n: stop.set(), stop_event=stop)
    assert out["stopped"] is True and out["removed"] == 0
    assert idx.propose(ids("name1 ="), k=2), "a stopped scan cannot know what is gone"
    out = idx.index_workspace(tmp_path)  # a complete one can
    assert out["removed"] == 3 and not idx.propose(ids("name1 ="), k=2)


def test_index_workspace_stops_when_asked(tmp_path):
    for i in range(10):
        (tmp_path / f"f{i}.py").write_text(f"x{i}\n")
    stop = threading.Event()
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, batch_files=3))
    out = idx.index_workspace(tmp_path, progress=lambda d, n: stop.set(), stop_event=stop)
    assert out["stopped"] is True and out["indexed"] == 3


def test_index_workspace_rejects_a_non_directory(tmp_path):
    idx = NgramIndex(char_tokenize)
    with pytest.raises(ValueError, match="not a directory"):
        idx.index_workspace(tmp_path / "nope")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_folder_ignored_by_its_enclosing_repo_is_walked(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("vendor/\n")
    ws = tmp_path / "vendor"
    ws.mkdir()
    _tree(ws)
    files = discover(ws)
    assert _names(ws, files) == [".gitignore", "big.txt", "bin.dat", "src/.gitignore", "src/a.py"]


def _git_home(tmp_path, monkeypatch, global_excludes: str) -> None:
    """HOME in the test's folder with ``global_excludes`` as git's excludes file; no system config."""
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text(global_excludes)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_exclude_rules_with_the_folder_gitignore_ignore_what_git_ls_files_skips(tmp_path, monkeypatch):
    """The watcher's rules in git mode (``git_exclude_rules``: the user's excludes file, ``info/exclude``,
    the .gitignore files above the folder; then the folder's own) decide as the scan's ``git ls-files``."""
    _git_home(tmp_path, monkeypatch, global_excludes="*.tmp\n")
    repo = tmp_path / "repo"
    ws = repo / "ws"
    ws.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info" / "exclude").write_text("/ws/private.py\n*.md\n")
    (repo / ".gitignore").write_text("*.log\n")
    (ws / ".gitignore").write_text("!keep.md\n")
    for name in ("a.py", "private.py", "draft.md", "keep.md", "x.log", "scratch.tmp"):
        (ws / name).write_text("x\n")
    specs = git_exclude_rules(ws) + [(ws, read_gitignore(ws))]
    kept = [f for f in sorted(ws.iterdir()) if not gitignored(specs, f, is_dir=False)]
    assert _names(ws, kept) == _names(ws, discover(ws)) == [".gitignore", "a.py", "keep.md"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_work_tree_whose_git_ls_files_fails_is_walked_with_the_rules_git_applies(tmp_path, monkeypatch):
    """``git ls-files`` timing out (a huge repository) or failing made the scan walk with the
    .gitignore files alone: what info/exclude and the user's excludes file hide (often private)
    was indexed. The walk now applies those rules too, and the failure is counted."""
    import ngramd.index.workspace as workspace

    _git_home(tmp_path, monkeypatch, global_excludes="*.tmp\n")
    repo = tmp_path / "repo"
    ws = repo / "ws"
    (ws / "notes").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info" / "exclude").write_text("/ws/private.py\n*.md\nnotes/\n")
    (repo / ".gitignore").write_text("*.log\n")
    (ws / ".gitignore").write_text("!keep.md\n")
    for name in ("a.py", "private.py", "draft.md", "keep.md", "x.log", "scratch.tmp", "notes/n.py"):
        (ws / name).write_text("x\n")
    with_git = _names(ws, discover(ws))
    monkeypatch.setattr(workspace, "_git_ls_files", lambda root, *flags: None)
    counts = Counter()
    assert _names(ws, discover(ws, counts)) == with_git == [".gitignore", "a.py", "keep.md"]
    assert counts["git_failed"] == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_the_walk_after_git_fails_finds_the_rules_through_a_linked_root_and_skips_nested_repos(
        tmp_path, monkeypatch):
    """A root that is a link into a repository's subfolder: the rules' top was found from the
    link's spelling and anchored rules (``/ws/secret.py``) matched nothing. A nested repository's
    files, which git never lists, were walked. Rules git cannot give leave the .gitignore files."""
    import ngramd.index.workspace as workspace

    _git_home(tmp_path, monkeypatch, global_excludes="")
    repo = tmp_path / "repo"
    ws = repo / "ws"
    (ws / "vendor" / "lib").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "init", "-q", str(ws / "vendor" / "lib")], check=True)
    (repo / ".git" / "info" / "exclude").write_text("/ws/secret.py\n")
    (ws / ".gitignore").write_text("*.log\n")
    for name in ("a.py", "secret.py", "x.log", "vendor/v.py", "vendor/lib/big.py"):
        (ws / name).write_text("x\n")
    link = tmp_path / "link"
    link.symlink_to(ws)
    with_git = _names(link, discover(link))
    assert with_git == [".gitignore", "a.py", "vendor/v.py"]
    monkeypatch.setattr(workspace, "_git_ls_files", lambda root, *flags: None)
    counts = Counter()
    assert _names(link, discover(link, counts)) == with_git
    assert counts["git_failed"] == 1 and counts["nested_repo"] == 1

    def no_rules(root):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a core.excludesFile path that is not UTF-8")
    monkeypatch.setattr(workspace, "git_exclude_rules", no_rules)
    assert _names(link, discover(link)) == [".gitignore", "a.py", "secret.py", "vendor/v.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_line_git_cannot_parse_is_left_out_as_git_leaves_it_out(tmp_path, monkeypatch):
    """A line ending in a backslash (``foo\\``) raised in pathspec: the folder's scan failed, and one
    such line in the global excludes file stopped every folder from being indexed."""
    _git_home(tmp_path, monkeypatch, global_excludes="bad\\\n*.tmp\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "info" / "exclude").write_text("x\\\n*.md\n")
    (ws / ".gitignore").write_text("also\\\n*.log\n")
    for name in ("a.py", "draft.md", "x.log", "scratch.tmp"):
        (ws / name).write_text("x\n")
    specs = git_exclude_rules(ws) + [(ws, read_gitignore(ws))]
    kept = [f for f in sorted(ws.iterdir()) if f.name != ".git" and not gitignored(specs, f, is_dir=False)]
    assert _names(ws, kept) == _names(ws, discover(ws)) == [".gitignore", "a.py"]
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2))
    assert idx.index_workspace(ws)["indexed"] == 2
    walked = tmp_path / "walked"  # no git: the walk reads the .gitignore itself
    walked.mkdir()
    (walked / ".gitignore").write_text("also\\\n*.log\n")
    (walked / "b.py").write_text("x\n")
    (walked / "y.log").write_text("x\n")
    assert _names(walked, discover(walked)) == [".gitignore", "b.py"]


def _scan_with_event_during_read(root, event) -> NgramIndex:
    """Scan ``root`` with ``event(idx)`` run once inside the scan's tokenize call: a file
    event that the watcher's flusher handles after the scan read the files."""
    fired = []

    def tokenize(texts):
        if not fired and threading.current_thread().name == "scan":
            fired.append(1)
            event(idx)
        return char_tokenize(texts)

    idx = NgramIndex(tokenize, IndexConfig(min_n=2))
    scan = threading.Thread(target=idx.index_workspace, args=(root,), name="scan")
    scan.start()
    scan.join()
    idx._check_invariants()
    return idx


def drafts(idx, context: str, k: int = 9) -> list[str]:
    return [text(b.tokens) for b in idx.propose(ids(context), k).branches]


def test_a_file_event_during_a_scan_wins_over_the_text_the_scan_read(tmp_path):
    (tmp_path / "gone.py").write_text("secret_old_text")
    (tmp_path / "b.py").write_text("value = OLD_VALUE")

    def delete_and_modify(idx):
        (tmp_path / "gone.py").unlink()
        idx.remove_file(tmp_path / "gone.py")
        (tmp_path / "b.py").write_text("value = NEW_VALUE")
        idx.index_file(tmp_path / "b.py")

    idx = _scan_with_event_during_read(tmp_path, delete_and_modify)
    assert idx.stats()["workspace_files"] == 1
    assert drafts(idx, "secret_") == []
    assert drafts(idx, "value = ") == ["NEW_VALUE"]


def test_a_folder_removed_during_a_scan_stays_out(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("away_content")
    (tmp_path / "keep.py").write_text("kept_content")

    def move_sub_away(idx):
        shutil.move(tmp_path / "sub", tmp_path.parent / (tmp_path.name + "_moved"))
        assert idx.remove_tree(tmp_path / "sub") == 0  # not installed yet

    idx = _scan_with_event_during_read(tmp_path, move_sub_away)
    assert drafts(idx, "away_") == []
    assert drafts(idx, "kept_") == ["content"]
    assert idx.remove_tree(tmp_path) == 1 and idx.stats()["workspace_files"] == 0


def test_a_scan_during_index_file_wins_over_the_text_index_file_read(tmp_path):
    (tmp_path / "b.py").write_text("value = OLD_VALUE")
    fired = []

    def tokenize(texts):
        if not fired:  # index_file read the old text; the file changes and a scan reads it
            fired.append(1)
            (tmp_path / "b.py").write_text("value = NEW_VALUE")
            idx.index_workspace(tmp_path)
        return char_tokenize(texts)

    idx = NgramIndex(tokenize, IndexConfig(min_n=2))
    idx.index_file(tmp_path / "b.py")
    assert drafts(idx, "value = ") == ["NEW_VALUE"]
    assert not idx._scans._newest.changed and not idx._scans._newest.readers  # nothing kept once no reader is in flight


def test_a_later_read_wins_even_when_it_installs_last(tmp_path):
    """The scan reads the old text; the file changes and ``index_file`` reads the new text;
    the scan installs first, ``index_file`` last: the newer read must stay."""
    (tmp_path / "b.py").write_text("value = OLD_VALUE")
    event_read, scan_done = threading.Event(), threading.Event()
    threads = []

    def tokenize(texts):
        name = threading.current_thread().name
        if name == "scan" and not threads:  # the scan has read the old text
            (tmp_path / "b.py").write_text("value = NEW_VALUE")
            threads.append(threading.Thread(target=idx.index_file, args=(tmp_path / "b.py",), name="event"))
            threads[0].start()
            assert event_read.wait(10)
        elif name == "event":  # index_file has read the new text; it installs after the scan
            event_read.set()
            assert scan_done.wait(10)
        return char_tokenize(texts)

    idx = NgramIndex(tokenize, IndexConfig(min_n=2))
    scan = threading.Thread(target=idx.index_workspace, args=(tmp_path,), name="scan")
    scan.start()
    scan.join()
    scan_done.set()
    threads[0].join()
    idx._check_invariants()
    assert drafts(idx, "value = ") == ["NEW_VALUE"]
    assert not idx._scans._newest.changed and not idx._scans._newest.readers


def test_a_nested_gitignore_negation_re_includes_a_file(tmp_path):
    """git's rule: the deepest matching pattern decides (``git check-ignore`` agrees)."""
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / "sub" / "build").mkdir(parents=True)
    (tmp_path / "sub" / ".gitignore").write_text("!keep.log\n!build/\n")
    for name in ("a.py", "drop.log", "sub/keep.log", "sub/other.log", "sub/build/x.py"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "y.py").write_text("y\n")
    assert _names(tmp_path, discover(tmp_path)) == [".gitignore", "a.py", "sub/.gitignore",
                                                    "sub/build/x.py", "sub/keep.log"]


def test_the_walk_follows_only_links_that_stay_inside(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "real").mkdir(parents=True)
    outside.mkdir()
    (ws / "real" / "b.py").write_text("b\n")
    (outside / "private.txt").write_text("secret\n")
    os.symlink(outside, ws / "out")  # leaves the folder: not followed
    os.symlink(ws / "real", ws / "again")  # a second way to a folder inside: no loop
    counts = Counter()
    assert _names(ws, discover(ws, counts)) == ["real/b.py"]  # the real path, though "again" sorts first
    assert counts == {"outside_root": 1, "duplicate": 1}


def test_a_leading_byte_order_mark_is_not_indexed(tmp_path):
    """Editors on Windows write a UTF-8 BOM; a draft must never propose it (scan and file events alike)."""
    (tmp_path / "a.py").write_bytes("\ufeffab1\n".encode())
    (tmp_path / "b.py").write_bytes("\ufeffcd2\n".encode())
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    assert idx.index_workspace(tmp_path)["indexed"] == 2
    (tmp_path / "b.py").write_bytes("\ufeffcd3\ufeff\n".encode())  # a BOM inside the text is text
    assert idx.index_file(tmp_path / "b.py")  # the watcher's path
    got = {os.path.basename(k): text(f.tokens) for k, f in idx._files.items()}
    assert got == {"a.py": "ab1\n", "b.py": "cd3\ufeff\n"}


@pytest.mark.parametrize("with_git", [False, True])
def test_file_links_out_of_the_folder_are_not_indexed(tmp_path, with_git):
    """As with directory links: a file link whose target lies outside the folder is not indexed
    (walk and git ls-files alike); a link inside is; a link retargeted out leaves at a rescan."""
    if with_git and shutil.which("git") is None:
        pytest.skip("git not installed")
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "a.py").write_text("a = 1\n")
    (ws / ".gitignore").write_text("hidden.py\n")
    (ws / "hidden.py").write_text("h = 1\n")
    (outside / "secret.py").write_text("secret = 1\n")
    os.symlink(outside / "secret.py", ws / "out.py")
    os.symlink(outside / "missing.py", ws / "dangling.py")  # points out too
    os.symlink(ws / "hidden.py", ws / "in.py")  # inside, to a file not listed itself
    if with_git:
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
    counts = Counter()
    assert _names(ws, discover(ws, counts)) == [".gitignore", "a.py", "in.py"]
    assert counts["outside_root"] == 2
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    assert idx.index_workspace(ws)["indexed"] == 3
    os.remove(ws / "in.py")
    os.symlink(outside / "secret.py", ws / "in.py")  # retargeted out of the folder
    out = idx.index_workspace(ws)
    assert out["removed"] == 1 and out["outside_root"] == 3
    assert sorted(os.path.basename(k) for k in idx._files) == [".gitignore", "a.py"]


@pytest.mark.parametrize("with_git", [False, True])
def test_a_link_to_a_listed_file_is_indexed_once(tmp_path, with_git):
    """The text is indexed under the target's own path; the link is counted as a ``duplicate``."""
    if with_git and shutil.which("git") is None:
        pytest.skip("git not installed")
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("unique_a = 1\n")
    (tmp_path / "sub" / "b.py").write_text("unique_b = 2\n")
    os.symlink(tmp_path / "a.py", tmp_path / "link_a.py")
    os.symlink("../a.py", tmp_path / "sub" / "rel_a.py")  # a relative link, from a subfolder
    os.symlink(tmp_path / "sub" / "b.py", tmp_path / "link_b.py")
    if with_git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    counts = Counter()
    assert _names(tmp_path, discover(tmp_path, counts)) == ["a.py", "sub/b.py"]
    assert counts == {"duplicate": 3}
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    out = idx.index_workspace(tmp_path)
    assert out["indexed"] == 2 and out["duplicate"] == 3
    assert sorted(os.path.relpath(k, tmp_path) for k in idx._files) == ["a.py", "sub/b.py"]


@pytest.mark.parametrize("with_git", [False, True])
def test_a_folder_linked_inside_leaves_its_files_indexed_once_under_their_own_path(tmp_path, with_git):
    """The walk reaches ``src`` by its real path before the link ``zz`` that sorts after it, and
    ``src/a.py`` is then listed, so the file link to it is a duplicate too. git follows no folder
    link but lists it as a file: a duplicate as well, not a ``not_a_file``, so both paths count alike."""
    if with_git and shutil.which("git") is None:
        pytest.skip("git not installed")
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("unique_a = 1\n")
    (tmp_path / "src" / "deep" / "d.py").write_text("unique_d = 2\n")
    os.symlink("src", tmp_path / "zz")
    os.symlink("src/a.py", tmp_path / "b_link.py")
    (tmp_path / "lib").mkdir()  # a link met before the folder it reaches, which is no sibling of it
    os.symlink("../src/deep", tmp_path / "lib" / "d_link")
    if with_git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    out = idx.index_workspace(tmp_path)
    assert sorted(os.path.relpath(k, tmp_path) for k in idx._files) == ["src/a.py", "src/deep/d.py"]
    assert out["indexed"] == 2 and out["duplicate"] == 3 and "not_a_file" not in out


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_tracked_file_under_a_folder_now_linked_out_is_not_indexed(tmp_path):
    """git lists a tracked ``sub/a.py`` after ``sub`` became a link out of the folder: it is
    not itself a link, but its folder is, so no draft may come from the file it reaches."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    (ws / "keep.py").write_text("kept = 1\n")
    (ws / "sub" / "a.py").write_text("side = 0\n")
    git = ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    shutil.rmtree(ws / "sub")
    (outside / "a.py").write_text("SECRET_OUT = 1\n")
    os.symlink(outside, ws / "sub")
    counts = Counter()
    assert _names(ws, discover(ws, counts)) == ["keep.py"]
    assert counts["outside_root"] == 2  # the link ``sub`` (listed as untracked) and ``sub/a.py``
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    assert idx.index_workspace(ws)["indexed"] == 1
    assert sorted(os.path.basename(k) for k in idx._files) == ["keep.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_a_tracked_file_the_gitignore_matches_is_listed_and_told_to_the_watcher(tmp_path):
    """git lists a file it tracks even when ``.gitignore`` matches it (``git add -f``), so the scan
    indexes it; ``tracked_ignored`` names such files (the watcher follows them), and only those."""
    (tmp_path / "build").mkdir()
    (tmp_path / ".gitignore").write_text("build/\n*.log\n")
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "build" / "keep.py").write_text("kept = 1\n")
    (tmp_path / "build" / "out.py").write_text("generated = 1\n")
    (tmp_path / "forced.log").write_text("forced\n")
    (tmp_path / "other.log").write_text("other\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-f", "build/keep.py", "forced.log"], check=True)
    assert _names(tmp_path, discover(tmp_path)) == [".gitignore", "a.py", "build/keep.py", "forced.log"]
    assert git_index(tmp_path) is not None
    assert _names(tmp_path, tracked_ignored(tmp_path)) == ["build/keep.py", "forced.log"]


def test_the_walk_has_no_git_index(tmp_path):
    (tmp_path / "a.py").write_text("a = 1\n")
    assert git_index(tmp_path) is None


def test_tracked_files_not_on_disk_are_not_listed(tmp_path):
    """git lists every tracked file, also the ones a sparse checkout leaves out (skip-worktree),
    the ones deleted but not yet staged and the ones under a folder that is now a file: the
    scan counts them apart and reads none. One under a looping link is read (and refused)."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "kept.py").write_text("kept = 1\n")
    (tmp_path / "deleted.py").write_text("deleted = 2\n")
    (tmp_path / "sparse").mkdir()
    (tmp_path / "sparse" / "out.py").write_text("out = 3\n")
    (tmp_path / "was_dir").mkdir()
    (tmp_path / "was_dir" / "x.py").write_text("x = 4\n")
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "y.py").write_text("y = 5\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    git("update-index", "--skip-worktree", "sparse/out.py")
    shutil.rmtree(tmp_path / "sparse")
    (tmp_path / "deleted.py").unlink()
    shutil.rmtree(tmp_path / "was_dir")
    (tmp_path / "was_dir").write_text("now a file\n")  # was_dir/x.py: not a directory on the way
    shutil.rmtree(tmp_path / "loop")
    os.symlink("loop", tmp_path / "loop")  # loop/y.py: a link loop on the way, not "absent"
    counts = Counter()
    # (git lists the new file was_dir and the link loop as untracked files)
    assert _names(tmp_path, discover(tmp_path, counts)) == ["kept.py", "loop", "loop/y.py", "was_dir"]
    assert counts == {"not_on_disk": 3}
    out = NgramIndex(char_tokenize).index_workspace(str(tmp_path))
    assert out["indexed"] == 2 and out["not_on_disk"] == 3 and "vanished" not in out
    assert out["symlink_loop"] == 2  # the reads say why loop and loop/y.py are not indexed


def test_real_paths_agree_with_realpath_through_file_and_folder_links(tmp_path):
    from ngramd.index.scans import RealPaths

    (tmp_path / "build" / "sub").mkdir(parents=True)
    (tmp_path / "build" / "sub" / "gen.py").write_text("x\n")
    (tmp_path / "link.py").symlink_to("build/sub/gen.py")
    (tmp_path / "lib").symlink_to("build")
    (tmp_path / "lib2").symlink_to("lib")  # a link to a link
    (tmp_path / "build" / "back.py").symlink_to("../link.py")  # a file link through a file link
    paths = [tmp_path / "build" / "sub" / "gen.py", tmp_path / "link.py", tmp_path / "lib" / "sub" / "gen.py",
             tmp_path / "lib2" / "sub" / "gen.py", tmp_path / "lib2" / "back.py", tmp_path / "dangling.py"]
    (tmp_path / "dangling.py").symlink_to("nowhere.py")
    reals = RealPaths()
    for path in paths:
        assert reals.of(str(path)) == os.path.realpath(path), path


def test_a_file_swapped_for_a_fifo_after_its_stat_is_skipped_not_waited_on(tmp_path, monkeypatch):
    """A FIFO opened for reading blocks until a writer comes: the scan thread would hang for ever."""
    import stat as stat_module

    from ngramd.index import workspace
    from ngramd.index.workspace import SkipFile, read_text

    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    real_stat = os.stat

    def stat_as_regular(path, *args, **kwargs):  # the stat saw the regular file before the swap
        st = real_stat(path, *args, **kwargs)
        return os.stat_result((stat_module.S_IFREG | 0o644,) + tuple(st)[1:]) if str(path) == str(fifo) else st

    monkeypatch.setattr(workspace.os, "stat", stat_as_regular)
    outcome: list[object] = []

    def read() -> None:
        try:
            read_text(fifo, 1000)
        except SkipFile as exc:
            outcome.append(exc.reason)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock it: a writer opening the FIFO ends the reader's wait
        with open(fifo, "wb"):
            pass
    assert outcome == ["not_a_file"]
