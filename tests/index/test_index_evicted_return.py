"""Workspace files evicted for lack of room come back once there is room again.

Open buffers are never evicted: one big buffer used to evict every workspace file for good
(until a rescan of the folder). The index remembers what it evicted and reads it back from disk
when a buffer shrinks or closes, or files are removed or shrink, the most recently used first, up
to the bound (after a buffer shrank, less a reserve of 1/16 of it, ``RESTORE_RESERVE_SHARE``, kept
for it to grow into again).
"""

from __future__ import annotations

import pytest

import ngramd.index.evicted
import ngramd.index.scans
from ngramd.index import IndexConfig, NgramIndex, Source
from index_helpers import char_tokenize, ids

BOUND = 100


def _index(**kw) -> NgramIndex:
    return NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, max_indexed_tokens=BOUND, **kw))


def _files(root, n: int) -> list:
    """``n`` files of 20 tokens (characters) each, ``<i>`` then filler."""
    paths = []
    for i in range(n):
        p = root / f"f{i}.txt"
        p.write_text(f"<{i}>" + "y" * 17)
        paths.append(p)
    return paths


def _counts(idx: NgramIndex) -> tuple[int, int, int]:
    s = idx.stats()
    return s["workspace_files"], s["evicted_waiting"], s["indexed_tokens"]


def test_files_evicted_by_a_big_buffer_come_back_when_it_closes(tmp_path):
    """The fuzzing review's case, scaled down: the buffer alone fills the bound. Closed, it gives
    them the whole room (the reserve is for a buffer that shrank, and may grow again)."""
    paths = _files(tmp_path, 5)
    idx = _index()
    assert idx.index_workspace(tmp_path)["indexed"] == 5
    idx.open_buffer("untitled:big", "x" * BOUND)
    assert not any(idx.has_file(p) for p in paths)
    waiting = idx.stats().get("evicted_waiting")
    idx.close_buffer("untitled:big")
    assert all(idx.has_file(p) for p in paths)
    assert waiting == 5 and _counts(idx) == (5, 0, 100)
    assert idx.propose(ids("<3>"), k=2).branches[0].source == Source.WORKSPACE
    idx._check_invariants()


def test_what_fits_comes_back_most_recently_used_first_with_its_lru_place(tmp_path):
    """A buffer that shrinks (an edit, a whole new text) makes room for some of them: the most
    recently used come back first, and the bound holds. Once back, each keeps its place in the
    LRU order: the least recently used goes first again."""
    f0, f1, f2, f3 = _files(tmp_path, 4)
    idx = _index(merge_tokens=1000)
    for p in (f0, f1, f2, f3):
        idx.index_file(p)
    assert idx.propose(ids("<0"), k=1)  # f0 used: the LRU order is f1, f2, f3, f0
    idx.open_buffer("u", "b" * 90)  # 90 + 80 tokens: all four go
    assert _counts(idx) == (0, 4, 90)
    idx.edit_buffer("u", 0, 45, "")  # 55 tokens of room: two files fit
    assert [idx.has_file(p) for p in (f0, f1, f2, f3)] == [True, False, False, True]
    assert _counts(idx) == (2, 2, 85)
    idx.open_buffer("u", "b" * 5)  # room for the other two
    assert all(idx.has_file(p) for p in (f0, f1, f2, f3)) and _counts(idx) == (4, 0, 85)
    idx._check_invariants()
    idx.open_buffer("u", "b" * 30)  # 110 tokens: f1, the least recently used, goes alone
    assert [idx.has_file(p) for p in (f0, f1, f2, f3)] == [True, False, True, True]


def test_a_file_too_big_for_the_room_waits_and_the_smaller_ones_come_back(tmp_path):
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("B" * 60)
    small.write_text("S" * 20)
    idx = _index()
    idx.index_file(small)
    idx.index_file(big)  # the most recently used
    idx.open_buffer("u", "b" * 100)
    assert _counts(idx) == (0, 2, 100)
    idx.open_buffer("u", "b" * 50)
    assert idx.has_file(small) and not idx.has_file(big)  # 50 tokens of room: big (60) waits
    assert _counts(idx) == (1, 1, 70)
    idx.close_buffer("u")
    assert idx.has_file(big) and _counts(idx) == (2, 0, 80)
    idx._check_invariants()


def test_the_disk_decides_what_comes_back(tmp_path, monkeypatch):
    """An evicted file comes back with its text on disk now; one deleted meanwhile (no event
    yet) is forgotten and counted as the scan counts it; one grown past the room waits, and is
    not read again until there is room for its new size."""
    changed, deleted, grown = tmp_path / "changed.txt", tmp_path / "deleted.txt", tmp_path / "grown.txt"
    for p in (changed, deleted, grown):
        p.write_text(p.stem[:2] + "y" * 18)
    idx = _index()
    idx.index_workspace(tmp_path)
    idx.open_buffer("u", "b" * 100)
    changed.write_text("ch=new" + "z" * 14)
    deleted.unlink()
    grown.write_text("gr" + "y" * 68)  # 70 tokens: more than the 60 there will be room for
    idx.open_buffer("u", "b" * 40)
    assert idx.has_file(changed) and not idx.has_file(deleted) and not idx.has_file(grown)
    assert idx.propose(ids("ch="), k=3).branches[0].tokens.tolist() == ids("new")
    assert idx.stats()["skipped"] == {"vanished": 1}
    assert _counts(idx) == (1, 1, 60)  # grown waits, with its new size
    reads = []
    read_text = ngramd.index.scans.read_text
    monkeypatch.setattr(ngramd.index.scans, "read_text", lambda path, n: reads.append(path) or read_text(path, n))
    idx.edit_buffer("u", 0, 1, "")  # 41 tokens of room: still too few
    assert reads == []
    idx.close_buffer("u")
    assert idx.has_file(grown) and _counts(idx) == (2, 0, 90)
    idx._check_invariants()


@pytest.mark.parametrize("how", ["remove_file", "remove_tree", "forget_root", "rescan"])
def test_a_file_removed_while_evicted_stays_out(tmp_path, how):
    """What a file event, a folder closed or a rescan decides while the file is evicted holds:
    it does not come back when there is room, though it is still on disk."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "sub").mkdir()
    gone, kept = root / "sub" / "gone.txt", root / "kept.txt"
    gone.write_text("<gone>" + "y" * 14)
    kept.write_text("<kept>" + "y" * 14)
    idx = _index()
    idx.index_workspace(root)
    idx.open_buffer("u", "b" * 100)
    assert _counts(idx) == (0, 2, 100)
    if how == "remove_file":  # the watcher found it ignored now, say
        idx.remove_file(gone)
    elif how == "remove_tree":
        idx.remove_tree(root / "sub")
    elif how == "forget_root":
        assert idx.forget_root(root, keep=lambda k: k == str(kept)) == 0  # no file was indexed
    else:
        (root / ".gitignore").write_text("sub/\n")
        idx.index_workspace(root)  # evicts what it installs at once: the buffer fills the bound
    idx.close_buffer("u")
    assert not idx.has_file(gone) and idx.has_file(kept)
    assert idx.stats()["evicted_waiting"] == 0
    idx._check_invariants()


def test_a_file_indexed_again_while_evicted_is_not_read_twice(tmp_path):
    """A file event indexes an evicted file (room or not): it is no longer waiting."""
    (p,) = _files(tmp_path, 1)
    idx = _index()
    idx.index_file(p)
    idx.open_buffer("u", "b" * 100)
    assert not idx.index_file(p)  # no room: evicted again at once, still waiting
    assert idx.stats()["evicted_waiting"] == 1
    idx.open_buffer("u", "b" * 70)
    assert idx.has_file(p) and _counts(idx) == (1, 0, 90)
    assert idx.index_file(p) and _counts(idx) == (1, 0, 90)


def test_how_many_evicted_files_are_remembered_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(ngramd.index.evicted, "MAX_EVICTED_REMEMBERED", 2)
    paths = _files(tmp_path, 4)
    idx = _index()
    for p in paths:
        idx.index_file(p)
    idx.open_buffer("u", "b" * 100)
    assert _counts(idx) == (0, 2, 100)
    idx.close_buffer("u")
    assert [idx.has_file(p) for p in paths] == [False, False, True, True]  # the last two evicted


def test_a_file_event_during_the_read_back_decides(tmp_path, monkeypatch):
    """Newest wins, as for a scan: a file removed (an event) while it was read back stays out."""
    (p,) = _files(tmp_path, 1)
    idx = _index()
    idx.index_file(p)
    idx.open_buffer("u", "b" * 100)
    read_text = ngramd.index.scans.read_text

    def read_then_removed(path, max_bytes):
        text = read_text(path, max_bytes)
        idx.remove_file(path)  # the watcher handles a delete meanwhile
        return text

    monkeypatch.setattr(ngramd.index.scans, "read_text", read_then_removed)
    idx.close_buffer("u")
    assert not idx.has_file(p) and _counts(idx) == (0, 0, 0)


def test_edits_that_leave_too_little_room_for_any_do_not_walk_them_all(tmp_path):
    """In a big buffer at the bound each deleted character makes a little room: once a walk found
    every evicted file larger, no later one walks them again until one could fit."""
    class CountingDict(dict):
        walks = 0

        def items(self):
            CountingDict.walks += 1
            return super().items()

    paths = _files(tmp_path, 4)
    idx = _index()
    for p in paths:
        idx.index_file(p)
    idx._evicted.paths = CountingDict()
    idx.open_buffer("u", "b" * 100)
    for i in range(10):  # 1 to 10 tokens of room, each file needs 20
        idx.edit_buffer("u", 0, 1, "")
    assert CountingDict.walks <= 1 and _counts(idx) == (0, 4, 90)
    idx.edit_buffer("u", 0, 16, "")  # 26 tokens of room, less the reserve (6): one fits
    assert idx.has_file(paths[-1]) and _counts(idx) == (1, 3, 94)


def test_typing_at_the_bound_reads_no_file_back_at_each_backspace(tmp_path, monkeypatch):
    """A keystroke that evicts a file and a backspace that frees a token: the file waits (the
    reserve), where it was read back and evicted again at every pair of keys."""
    (p,) = _files(tmp_path, 1)
    idx = _index()
    idx.index_file(p)
    idx.open_buffer("u", "b" * 80)  # exactly the bound
    reads = []
    read_text = ngramd.index.scans.read_text
    monkeypatch.setattr(ngramd.index.scans, "read_text", lambda path, n: reads.append(path) or read_text(path, n))
    for _ in range(5):
        idx.edit_buffer("u", 0, 0, "b")  # 101 tokens: the file goes
        idx.edit_buffer("u", 0, 1, "")  # 20 tokens of room, less the reserve: it waits
    assert reads == [] and _counts(idx) == (0, 1, 80)
    idx.close_buffer("u")
    assert idx.has_file(p)


@pytest.mark.parametrize("kept", [False, True])
def test_a_buffer_closed_while_forget_root_decides(tmp_path, kept):
    """``forget_root`` asks ``keep`` outside the lock, the folder's evicted files out of a
    restore's reach meanwhile: a buffer closed then (its restore) brought them back for good when
    the folder drops them, and when another folder keeps them, they come back once it is done
    (the restore asked meanwhile, which did not see them, is not lost)."""
    root = tmp_path / "ws"
    root.mkdir()
    paths = _files(root, 3)
    idx = _index()
    idx.index_workspace(root)
    idx.open_buffer("u", "b" * 100)
    assert _counts(idx) == (0, 3, 100)

    def keep(path):
        idx.close_buffer("u")  # room for them all, while the folder is being closed
        return kept

    assert idx.forget_root(root, keep) == 0
    assert all(idx.has_file(p) == kept for p in paths)
    assert _counts(idx) == ((3, 0, 60) if kept else (0, 0, 0))
    idx._check_invariants()


def test_in_the_background_the_caller_does_not_wait_for_the_disk(tmp_path, monkeypatch):
    """``restore_in_background`` (the daemon's setting): closing the buffer returns while the
    files are still being read back on the restore thread."""
    import threading

    paths = _files(tmp_path, 5)  # the whole bound: a close gives them all the room, no reserve
    idx = _index(restore_in_background=True)
    for p in paths:
        idx.index_file(p)
    idx.open_buffer("u", "b" * 100)
    reading, release = threading.Event(), threading.Event()
    read_text = ngramd.index.scans.read_text

    def slow_read(path, n):
        reading.set()
        assert release.wait(10)
        return read_text(path, n)

    monkeypatch.setattr(ngramd.index.scans, "read_text", slow_read)
    idx.close_buffer("u")  # returns with the read blocked
    assert reading.wait(10) and not any(idx.has_file(p) for p in paths)
    assert not idx.wait_restored(0.05)
    release.set()
    assert idx.wait_restored(10)
    assert all(idx.has_file(p) for p in paths) and _counts(idx) == (5, 0, 100)
    idx._check_invariants()


@pytest.mark.parametrize("how", ["remove_file", "remove_tree", "forget_root", "rescan_ignores_it",
                                 "rewritten_smaller", "now_skipped"])
def test_room_freed_by_a_removal_or_a_file_that_shrank_brings_evicted_files_back(tmp_path, how):
    """A workspace over the bound evicts its least recently used files; one removed (deleted, its
    folder deleted, a folder closed, a rescan that no longer finds it or a file now skipped) or
    rewritten smaller gives its room to the most recently evicted."""
    root = tmp_path / "ws"
    root.mkdir()
    big = root / "big.txt"
    big.write_text("<big>" + "y" * 55)  # 60 tokens
    (waiting,) = _files(tmp_path, 1)
    idx = _index()
    idx.index_file(waiting)
    idx.index_workspace(root)
    idx.open_buffer("u", "b" * 30)  # 110 tokens: the least recently used file, waiting, goes
    assert _counts(idx) == (1, 1, 90)
    if how == "remove_file":
        idx.remove_file(big)
    elif how == "remove_tree":
        idx.remove_tree(root)
    elif how == "forget_root":
        assert idx.forget_root(root) == 1
    elif how == "rescan_ignores_it":
        (root / ".gitignore").write_text("big.txt\n")
        assert idx.index_workspace(root)["removed"] == 1
    elif how == "rewritten_smaller":
        big.write_text("<big>")
        assert idx.index_file(big)
    else:
        big.write_bytes(b"\0binary")
        assert not idx.index_file(big)
    assert idx.has_file(waiting) and idx.has_file(big) == (how == "rewritten_smaller")
    expected = {"rewritten_smaller": (2, 0, 55), "rescan_ignores_it": (2, 0, 58)}  # (58: the .gitignore's 8)
    assert _counts(idx) == expected.get(how, (1, 0, 50))
    idx._check_invariants()


def test_evicted_files_a_closed_folder_keeps_wait_in_their_eviction_order(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    _files(root, 2)
    later = tmp_path / "later.txt"
    later.write_text("<later>" + "y" * 13)
    idx = _index()
    idx.index_workspace(root)
    idx.open_buffer("u", "b" * 100)
    order = list(idx._evicted.paths)

    def keep(path):
        idx.index_file(later)  # no room: evicted at once, after them
        return True

    idx.forget_root(root, keep)
    assert list(idx._evicted.paths) == order + [str(later)]
    idx._check_invariants()


def test_a_file_that_shrank_on_disk_but_still_waits_keeps_the_smallest_size_known(tmp_path):
    """Two evicted files read back in one batch: the first grew and takes room the second, which
    shrank, then lacks: it waits with its new, smaller size, which the walk's early exit (no room
    for the smallest) must know."""
    f0, f1 = tmp_path / "f0.txt", tmp_path / "f1.txt"
    f0.write_text("0" * 30)
    f1.write_text("1" * 30)
    idx = _index()
    idx.index_file(f0)
    idx.index_file(f1)  # f1 is the more recently used: read back first
    idx.open_buffer("u", "b" * 60)
    idx.open_buffer("v", "c" * 40)
    assert _counts(idx) == (0, 2, 100)
    f1.write_text("1" * 35)  # fits the 60 of room, leaving 25
    f0.write_text("0" * 26)  # then too big for the 25 left
    idx.close_buffer("u")
    assert idx.has_file(f1) and not idx.has_file(f0)
    assert idx._evicted.paths[str(f0)][0] == 26
    idx._check_invariants()
