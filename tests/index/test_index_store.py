"""NgramIndex: proposals from each source, incremental == rebuilt, eviction, bad input."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import sys
import threading
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngramd.index import NO_DRAFT, IndexConfig, NgramIndex, Source
from index_helpers import char_tokenize, ids, text, word_tokenize


def chars(cfg: IndexConfig | None = None) -> NgramIndex:
    return NgramIndex(char_tokenize, cfg or IndexConfig(min_n=2, max_match=8))


def branches(d):
    return [(text(b.tokens), b.count, b.source, b.match_len) for b in d.branches]


def test_buffer_proposal_worked_example():
    # Buffer "ab1_ab2_ab": context "zab" matches "ab" three times; the two with a
    # continuation are followed by "1" and "2". The later one ranks first.
    idx = chars()
    idx.open_buffer("u", "ab1_ab2_ab")
    d = idx.propose(ids("zab"), k=3, w=2, current_uri="u")
    assert branches(d) == [("2_a", 1, Source.BUFFER, 2), ("1_a", 1, Source.BUFFER, 2)]
    assert branches(idx.propose(ids("zab"), k=3, current_uri="u")) == [("2_a", 1, Source.BUFFER, 2)]


def test_longer_match_beats_source_priority():
    # The buffer has "cd" -> "X"; a workspace-like open buffer has "bcd" -> "Y".
    idx = chars()
    idx.open_buffer("cur", "cdX")
    idx.open_buffer("other", "bcdY")
    d = idx.propose(ids("abcd"), k=1, w=2, current_uri="cur")
    assert branches(d) == [("Y", 1, Source.OPEN_BUFFER, 3)]


def test_source_priority_then_recency(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("pqW")
    idx = chars()
    assert idx.index_file(f)
    idx.add_history(ids("pqH"))
    idx.open_buffer("old", "pqO")
    idx.open_buffer("new", "pqN")
    idx.open_buffer("cur", "pqC")
    d = idx.propose(ids("pq"), k=1, w=5, current_uri="cur")
    assert branches(d) == [
        ("C", 1, Source.BUFFER, 2),
        ("N", 1, Source.OPEN_BUFFER, 2),  # newer open buffer first
        ("O", 1, Source.OPEN_BUFFER, 2),
        ("H", 1, Source.HISTORY, 2),
        ("W", 1, Source.WORKSPACE, 2),
    ]
    # Editing "old" makes it the most recent open buffer.
    idx.edit_buffer("old", 2, 3, "o")
    d = idx.propose(ids("pq"), k=1, w=5, current_uri="cur")
    assert [b[0] for b in branches(d)][:3] == ["C", "o", "N"]


def test_counts_group_by_first_token():
    idx = chars()
    idx.open_buffer("u", "xyA.xyA,xyB")
    d = idx.propose(ids("xy"), k=2, w=2, current_uri="u")
    assert branches(d) == [("B", 1, Source.BUFFER, 2), ("A,", 2, Source.BUFFER, 2)]


def test_no_draft_cases():
    idx = chars()
    assert idx.propose(ids("ab"), k=4) is NO_DRAFT  # empty index
    idx.open_buffer("u", "abc")
    assert idx.propose(ids("b"), k=4) is NO_DRAFT  # context shorter than min_n
    assert idx.propose(ids("xb"), k=4) is NO_DRAFT  # only a 1-token match
    assert idx.propose(ids("bc"), k=4) is NO_DRAFT  # match at the end: nothing follows
    assert idx.propose(np.zeros(0, np.int32), k=4) is NO_DRAFT


def test_workspace_static_and_dynamic_segments(tmp_path):
    cfg = IndexConfig(min_n=2, max_match=8, merge_tokens=10)
    idx = chars(cfg)
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def foo(): return 1\n")
    assert idx.index_file(a)  # 20 tokens > merge_tokens: merged into the static segment
    assert idx.stats()["static_tokens"] == 20 and idx.stats()["dynamic_tokens"] == 0
    b.write_text("foo(x)")
    assert idx.index_file(b)  # small: stays in the dynamic set
    assert idx.stats()["dynamic_tokens"] == 6
    d = idx.propose(ids("def fo"), k=4, w=2)
    assert branches(d) == [("o():", 1, Source.WORKSPACE, 6)]
    d = idx.propose(ids(" foo"), k=2, w=2)  # " foo" only in a.py; "foo" in both
    assert branches(d) == [("()", 1, Source.WORKSPACE, 4)]
    d = idx.propose(ids("oo"), k=2, w=2)  # both go on with "(": one branch, from newer b.py
    assert branches(d) == [("(x", 2, Source.WORKSPACE, 2)]
    idx.remove_file(a)  # tombstone in the static segment
    assert branches(idx.propose(ids("def fo"), k=4)) == [("o(x)", 1, Source.WORKSPACE, 2)]
    assert idx.stats()["workspace_tokens"] == 6


# ---- incremental == rebuilt from scratch -----------------------------------

WORDS = ["a", " a", "b", " b", "(", ")", "\n", "\n  ", " ", "x1", "."]
snippets = st.lists(st.sampled_from(WORDS), max_size=12).map("".join)
URIS = ["u0", "u1", "u2"]
NAMES = ["f0.py", "f1.py", "f2.py", "f3.py"]
ops = st.one_of(
    st.tuples(st.just("open"), st.sampled_from(URIS), snippets),
    st.tuples(st.just("edit"), st.sampled_from(URIS), st.tuples(st.integers(0, 60), st.integers(0, 8), snippets)),
    st.tuples(st.just("close"), st.sampled_from(URIS)),
    st.tuples(st.just("write"), st.sampled_from(NAMES), snippets),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("history"), snippets),
    st.tuples(st.just("merge"),),
)


def _contexts(docs_tokens: list[np.ndarray]) -> list[np.ndarray]:
    out = [np.array([1, 2, 3], np.int32)]
    for t in docs_tokens:
        for i in range(1, len(t) + 1):
            out.append(t[max(0, i - 5) : i])
    return out


def _same(d1, d2) -> bool:
    return branches(d1) == branches(d2) and all(
        np.array_equal(a.tokens, b.tokens) for a, b in zip(d1.branches, d2.branches)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=25), st.sampled_from([4, 10**6]))
def test_incremental_index_proposes_what_a_rebuilt_one_does(seq, merge_tokens):
    # merge_tokens 4: nearly every write is merged into the static segment; 10**6: files
    # stay in the dynamic set, whose ScanSet each write extends (or rebuilds after a removal)
    cfg = IndexConfig(min_n=2, max_match=6, merge_tokens=merge_tokens, max_history_tokens=30,
                      max_candidates=10_000)
    with tempfile.TemporaryDirectory() as root:
        # keyed_min_tokens=0: every buffer and scanned set goes through a KeyIndex,
        # spliced on each edit; the reference below scans instead.
        idx = NgramIndex(word_tokenize, dataclasses.replace(cfg, keyed_min_tokens=0))
        buffers: OrderedDict[str, str] = OrderedDict()  # in recency order
        files: OrderedDict[str, str] = OrderedDict()
        history: list[str] = []
        for op in seq:
            kind = op[0]
            if kind == "open":
                idx.open_buffer(op[1], op[2])
                buffers.pop(op[1], None)
                buffers[op[1]] = op[2]
            elif kind == "edit" and op[1] in buffers:
                a, n, new = op[2]
                t = buffers.pop(op[1])
                a = min(a, len(t))
                b = min(a + n, len(t))
                idx.edit_buffer(op[1], a, b, new)
                buffers[op[1]] = t[:a] + new + t[b:]
            elif kind == "close":
                idx.close_buffer(op[1])
                buffers.pop(op[1], None)
            elif kind == "write":
                with open(os.path.join(root, op[1]), "w") as f:
                    f.write(op[2])
                assert idx.index_file(os.path.join(root, op[1]))
                files.pop(op[1], None)
                files[op[1]] = op[2]
            elif kind == "delete":
                if op[1] in files:
                    os.remove(os.path.join(root, op[1]))
                    del files[op[1]]
                idx.remove_file(os.path.join(root, op[1]))
            elif kind == "history":
                idx.add_history(word_tokenize([op[1]])[0])
                history.append(op[1])
            elif kind == "merge":
                idx.merge()
            idx._check_invariants()  # chunked tokens, spliced key indexes, the dynamic set == rebuilt ones
        # The reference never merges and never keys: it answers every lookup by
        # scanning, a different code path from the static segment and the key indexes.
        fresh = NgramIndex(word_tokenize, dataclasses.replace(cfg, merge_tokens=10**9, keyed_min_tokens=10**9))
        for name in files:
            assert fresh.index_file(os.path.join(root, name))
        for h in history:
            fresh.add_history(word_tokenize([h])[0])
        for uri, t in buffers.items():
            fresh.open_buffer(uri, t)
            assert idx.buffer_text(uri) == t
            assert np.array_equal(idx.buffer_tokens(uri), fresh.buffer_tokens(uri))
        assert idx.stats()["indexed_tokens"] == fresh.stats()["indexed_tokens"]
        contexts = _contexts(word_tokenize(list(buffers.values()) + list(files.values()) + history))
        for cur in [None, *URIS]:
            for ctx in contexts:
                want = fresh.propose(ctx, k=4, w=3, current_uri=cur)
                got = idx.propose(ctx, k=4, w=3, current_uri=cur)
                assert _same(got, want), (ctx, cur, branches(got), branches(want))
        idx.rebuild()  # the rebuild path: everything in a fresh static segment
        assert idx.stats()["dynamic_tokens"] == 0 and idx.stats()["static_dead_tokens"] == 0
        for ctx in contexts:
            assert _same(idx.propose(ctx, k=4, w=3, current_uri="u0"), fresh.propose(ctx, k=4, w=3, current_uri="u0"))


# ---- memory bound ------------------------------------------------------------

def test_eviction_keeps_the_bound_and_drops_least_recently_used(tmp_path):
    cfg = IndexConfig(min_n=2, max_match=8, max_indexed_tokens=100, merge_tokens=30)
    idx = chars(cfg)
    idx.open_buffer("u", "0123456789")  # 10 tokens, never evicted
    for i in range(12):
        p = tmp_path / f"f{i}.txt"
        p.write_text(f"<{i:02d}>" + "x" * 15)  # 20 tokens each
        idx.index_file(p)
        s = idx.stats()
        assert s["indexed_tokens"] <= 100
        if i == 3:
            # Drafting from f0 makes it recently used: f1 goes first, not f0.
            assert branches(idx.propose(ids("<00"), k=2)) == [(">x", 1, Source.WORKSPACE, 3)]
    s = idx.stats()
    assert s["evicted_files"] == 8 and s["workspace_files"] == 4 and s["buffer_tokens"] == 10
    assert idx.propose(ids("<11"), k=1)  # the newest file is there
    assert not idx.propose(ids("<05"), k=1)  # an old unused one is gone
    assert s["bytes_per_token"] > 0 and s["index_bytes"] > 0


def test_history_past_what_files_leave_of_the_bound_goes_oldest_first(tmp_path):
    """Evicting every file is not enough when buffers and history fill the bound: the oldest
    accepted completions go then (buffers never), and the bound holds."""
    cfg = IndexConfig(min_n=2, max_match=8, max_indexed_tokens=100, max_history_tokens=1000)
    idx = chars(cfg)
    p = tmp_path / "f.txt"
    p.write_text("y" * 20)
    idx.index_file(p)
    idx.open_buffer("u", "0" * 30)
    for i in range(4):
        idx.add_history(ids(f"<{i}>" + "h" * 27))  # 30 tokens each: 120 in all
    s = idx.stats()
    assert s["indexed_tokens"] <= 100 and s["buffer_tokens"] == 30 and s["workspace_files"] == 0
    assert s["history_tokens"] == 60  # the two newest
    assert idx.propose(ids("<3"), k=1) and not idx.propose(ids("<0"), k=1)


@pytest.mark.parametrize("writer", ["open_buffer", "edit_buffer", "add_history"])
def test_a_file_evicted_by_a_buffer_or_history_hides_no_shorter_match(tmp_path, writer):
    """The evicted file held the only long match ("abcd" then "X"): a lookup must find the
    shorter one left in another file ("bcd" then "Y"), as an index built from scratch does,
    without waiting for the next file write."""
    cfg = IndexConfig(min_n=2, max_match=8, max_indexed_tokens=12)
    idx = chars(cfg)
    (tmp_path / "a.txt").write_text("abcdX")
    (tmp_path / "b.txt").write_text("bcdY")
    idx.index_file(tmp_path / "a.txt")
    idx.index_file(tmp_path / "b.txt")
    if writer == "open_buffer":
        idx.open_buffer("u", "zzzz")  # 13 tokens: a.txt, least recently used, goes
    elif writer == "edit_buffer":
        idx.open_buffer("u", "zzz")
        idx.edit_buffer("u", 3, 3, "z")
    else:
        idx.add_history(ids("zzzz"))
    assert not idx.has_file(tmp_path / "a.txt") and idx.has_file(tmp_path / "b.txt")
    assert branches(idx.propose(ids("abcd"), k=1)) == [("Y", 1, Source.WORKSPACE, 3)]
    idx._check_invariants()


def test_index_bytes_counts_the_per_file_bookkeeping(tmp_path):
    """Many small files: their paths and records outweigh their tokens, and index_bytes says so,
    in the dynamic set and the static segment alike, until a merge drops the removed ones."""
    files = [tmp_path / (f"{i:03d}_" + "n" * 200 + ".py") for i in range(50)]
    for p in files:
        p.write_text("a\n")
    idx = chars()
    assert idx.index_workspace(tmp_path)["indexed"] == 50
    path_bytes = sum(len(os.fspath(p)) for p in files)
    for step in ("dynamic", "static", "removed"):
        s = idx.stats()
        assert s["index_bytes"] > path_bytes + 50 * 64 + s["workspace_tokens"] * 4, step
        if step == "dynamic":
            idx.merge()
        elif step == "static":
            for p in files:  # tombstoned: the static segment still holds their paths
                idx.remove_file(p)
            assert idx.stats()["static_dead_tokens"] == 100
    idx.merge()
    assert idx.stats()["index_bytes"] < path_bytes // 2


def test_f0_survives_eviction_when_used(tmp_path):
    cfg = IndexConfig(min_n=2, max_match=8, max_indexed_tokens=60, merge_tokens=1000)
    idx = chars(cfg)
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text(f"<{i}>" + "y" * 17)
        idx.index_file(tmp_path / f"f{i}.txt")
    assert idx.propose(ids("<0"), k=1)  # uses f0: f1 is now the least recently used
    (tmp_path / "f3.txt").write_text("<3>" + "y" * 17)
    idx.index_file(tmp_path / "f3.txt")
    assert idx.propose(ids("<0"), k=1) and not idx.propose(ids("<1"), k=1)
    assert idx.stats()["indexed_tokens"] <= 60


# ---- bad input ----------------------------------------------------------------

def test_bad_files_are_skipped_and_counted(tmp_path, monkeypatch):
    idx = chars(IndexConfig(min_n=2, max_file_bytes=100))
    (tmp_path / "bin").write_bytes(b"ab\0cd")
    (tmp_path / "latin1").write_bytes(b"\x01\x02caf\xe9")  # not UTF-8, and control bytes: not Latin-1 text
    (tmp_path / "huge").write_text("x" * 101)
    os.symlink("loop", tmp_path / "loop")
    assert not idx.index_file(tmp_path / "bin")
    assert "binary" in idx.last_skip and "NUL" in idx.last_skip
    assert not idx.index_file(tmp_path / "latin1")
    assert not idx.index_file(tmp_path / "huge")
    assert "max_file_bytes=100" in idx.last_skip
    assert not idx.index_file(tmp_path / "missing")
    assert not idx.index_file(tmp_path / "loop")
    assert not idx.index_file(tmp_path)  # a directory
    assert idx.stats()["skipped"] == {
        "binary": 2, "too_large": 1, "vanished": 1, "symlink_loop": 1, "not_a_file": 1
    }
    # Unreadable (we may run as root, so simulate the permission error).
    ok = tmp_path / "ok.txt"
    ok.write_text("hello")
    real_open = os.open  # read_text opens the path with os.open (non-blocking), then reads the descriptor

    def deny(path, *a, **kw):
        if os.fspath(path) == os.fspath(ok):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", deny)
    assert not idx.index_file(ok)
    assert idx.stats()["skipped"]["unreadable"] == 1 and "Permission denied" in idx.last_skip


def test_vanished_file_leaves_the_index(tmp_path):
    idx = chars()
    f = tmp_path / "f.txt"
    f.write_text("abcdef")
    assert idx.index_file(f)
    assert idx.propose(ids("bc"), k=1)
    f.unlink()
    assert not idx.index_file(f)  # the watcher's modify event arrives after the delete
    assert not idx.propose(ids("bc"), k=1)
    assert idx.stats()["workspace_files"] == 0


def test_bad_calls_raise_clear_errors():
    idx = chars()
    idx.open_buffer("u", "abc")
    with pytest.raises(ValueError, match="out of range"):
        idx.edit_buffer("u", 2, 9, "x")
    with pytest.raises(ValueError, match="out of range"):
        idx.edit_buffer("u", -1, 1, "x")
    with pytest.raises(ValueError, match="not open"):
        idx.edit_buffer("nope", 0, 0, "x")
    with pytest.raises(ValueError, match="1-D"):
        idx.propose(np.zeros((2, 2), np.int32), k=2)
    with pytest.raises(ValueError, match="outside"):
        idx.propose([-5, 3], k=2)
    # an int32 context is checked without a copy (the engine's own array): the same rejections
    for bad in (-5, -(2**31), 2**31 - 1):
        with pytest.raises(ValueError, match="outside"):
            idx.propose(np.array([bad, 3], np.int32), k=2)
    with pytest.raises(ValueError, match="k >= 1"):
        idx.propose(ids("ab"), k=0)
    with pytest.raises(ValueError, match="1-D"):
        idx.add_history([[1, 2]])
    with pytest.raises(ValueError, match="min_n"):
        IndexConfig(min_n=0)
    assert idx.buffer_text("u") == "abc"  # the failed edits changed nothing


def test_lookups_work_while_a_workspace_is_indexed(tmp_path):
    for i in range(40):
        (tmp_path / f"m{i}.py").write_text(f"def fn{i}(x):\n    return x + {i}\n" * 5)
    gate, resume = threading.Event(), threading.Event()

    def slow_tokenize(texts):
        if len(texts) > 1:  # a workspace batch: let the main thread look up meanwhile
            gate.set()
            resume.wait(5)
        return char_tokenize(texts)

    idx = NgramIndex(slow_tokenize, IndexConfig(min_n=2, max_match=8, batch_files=10))
    idx.open_buffer("u", "hello world")
    seen = []
    t = threading.Thread(target=lambda: seen.append(idx.index_workspace(tmp_path, progress=lambda d, n: seen.append((d, n)))))
    t.start()
    assert gate.wait(5)
    assert branches(idx.propose(ids("hel"), k=2, current_uri="u")) == [("lo", 1, Source.BUFFER, 3)]
    resume.set()
    t.join(10)
    assert seen[-1]["indexed"] == 40 and seen[-1]["stopped"] is False
    assert (40, 40) in seen and (10, 40) in seen
    assert idx.propose(ids("fn39("), k=3)


def test_edit_with_the_callers_result_keeps_that_string():
    idx = chars()
    idx.open_buffer("u", "hello world")
    after = "hello there"
    idx.edit_buffer("u", 6, 11, "there", after)
    assert idx.buffer_text("u") is after  # one string for the daemon and the index
    idx._check_invariants()
    for wrong in ("hello thereX", "hello thorn"):  # wrong length; new text not at start
        with pytest.raises(ValueError, match="result"):
            idx.edit_buffer("u", 6, 11, "there", wrong)
    assert idx.buffer_text("u") is after


def test_an_edit_tokenizes_outside_the_lock_and_a_concurrent_edit_is_not_lost():
    """A keystroke in a long single-line buffer re-tokenizes the whole line: lookups must not
    wait for it. An edit made while another one tokenizes (here: from inside the tokenizer)
    makes that one's plan stale; it is redone on the newer text."""
    seen = []

    def tokenize(texts):
        if idx._buffers.by_uri:  # the edits, not the open
            seen.append(idx._lock._is_owned())
            if len(seen) == 1:
                idx.edit_buffer("u", 19, 19, ";")  # lands between the plan and its splice
        return char_tokenize(texts)

    idx = NgramIndex(tokenize, IndexConfig(min_n=2, max_match=8))
    idx.open_buffer("u", "x = [1, 2, 3, 4, 5]")
    idx.edit_buffer("u", 4, 5, "[0, ")
    assert idx.buffer_text("u") == "x = [0, 1, 2, 3, 4, 5];"  # as if the lock had ordered them
    assert seen[:2] == [False, False]  # the first plan and the concurrent edit ran unlocked
    idx._check_invariants()
    assert text(idx.buffer_tokens("u")) == "x = [0, 1, 2, 3, 4, 5];"


def test_lookup_sets_are_built_outside_the_lock_and_equal_a_fresh_build(monkeypatch):
    """The other buffers' and the history's scan sets, stale after a buffer switch or a new
    accepted completion, are built before the lookup takes the lock: other index calls do not
    wait for the build. A writer changing a set meanwhile makes the lookup build it again."""
    import ngramd.index.buffers as store

    builds = []  # (documents built, lock held by the builder's thread)

    class Recording(store.ScanSet):
        def __init__(self, docs, *a, **kw):
            builds.append(([text(d) for d in docs], idx._lock._is_owned()))
            if len(builds) == 4:  # a writer edits "b" between this build and the lookup
                idx.edit_buffer("b", 0, 0, "Q")
            super().__init__(docs, *a, **kw)

    monkeypatch.setattr(store, "ScanSet", Recording)
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, keyed_min_tokens=4))
    idx.open_buffer("a", "xy1 ab")
    idx.open_buffer("b", "cd2 xy3")
    assert branches(idx.propose(ids("cd"), k=1, current_uri="a")) == [("2", 1, Source.OPEN_BUFFER, 2)]
    assert builds == [(["cd2 xy3"], False)]
    idx.propose(ids("cd"), k=1, current_uri="a")  # nothing changed: nothing built
    idx.add_history(ids("hi!"))
    assert branches(idx.propose(ids("hi"), k=1, current_uri="a")) == [("!", 1, Source.HISTORY, 2)]
    assert builds[1:] == [(["hi!"], False)]
    idx.propose(ids("xy"), k=1, current_uri="b")  # a buffer switch: "others" is now "a"
    assert builds[2:] == [(["xy1 ab"], False)]
    # back to "a": while "others" is built, "b" is edited (by the recording builder): built again
    assert branches(idx.propose(ids("Qc"), k=1, current_uri="a")) == [("d", 1, Source.OPEN_BUFFER, 2)]
    assert builds[3:] == [(["cd2 xy3"], False), (["Qcd2 xy3"], False)]
    monkeypatch.undo()
    for part in (idx._buffers, idx._history):  # what the lookups left equals a set built from scratch
        key, got = part.cache.key, part.cache.set
        want_key, make = part.lookup_set("a")
        want = make()
        assert key == want_key
        assert np.array_equal(got.cat, want.cat) and np.array_equal(got.starts, want.starts)
        assert np.array_equal(got.stamps, want.stamps) and got.keys == want.keys
        assert np.array_equal(got.index.keys, want.index.keys) and np.array_equal(got.index.pos, want.index.pos)


def _assert_same_scan_set(got, want) -> None:
    assert np.array_equal(got.cat, want.cat) and np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.stamps, want.stamps) and got.keys == want.keys


def test_a_lookup_building_while_rebuild_runs_does_not_bring_back_the_old_tokens(monkeypatch):
    """rebuild() repairs a buffer's tokens without changing its stamp. A lookup that snapshotted
    the other buffers before it, and builds their scan set while it runs, must not install that
    set: its key would still match, and the pre-rebuild tokens would be served until the next edit."""
    import ngramd.index.buffers as store

    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, keyed_min_tokens=4))
    idx.open_buffer("a", "xy1 ab")
    idx.open_buffer("b", "cd2 xy3")
    idx._buffers.by_uri["b"].doc.tokens = np.array(ids("cd9 xy3"), np.int32)  # diverged: what rebuild() repairs
    builds = []

    class RebuildMidBuild(store.ScanSet):
        def __init__(self, docs, *a, **kw):
            builds.append([text(d) for d in docs])
            if len(builds) == 1:
                idx.rebuild()  # another thread, while this lookup builds unlocked
            super().__init__(docs, *a, **kw)

    monkeypatch.setattr(store, "ScanSet", RebuildMidBuild)
    assert branches(idx.propose(ids("cd"), k=1, current_uri="a")) == [("2", 1, Source.OPEN_BUFFER, 2)]
    assert branches(idx.propose(ids("cd"), k=1, current_uri="a")) == [("2", 1, Source.OPEN_BUFFER, 2)]
    assert builds == [["cd9 xy3"], ["cd2 xy3"]]  # the pre-rebuild build was dropped, the lookup built again
    monkeypatch.undo()
    idx._check_invariants()


def test_an_older_lookup_build_does_not_replace_a_newer_one(monkeypatch):
    """Two lookups build "others": the first snapshotted before an edit of "b", the second after
    it and installed first. The first one's build is stale and must not replace the current set."""
    import ngramd.index.buffers as store

    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, keyed_min_tokens=4))
    idx.open_buffer("a", "xy1 ab")
    idx.open_buffer("b", "cd2 xy3")
    builds = []

    class Interleaved(store.ScanSet):
        def __init__(self, docs, *a, **kw):
            builds.append([text(d) for d in docs])
            if len(builds) == 1:  # while the first lookup builds: an edit, then a second lookup
                idx.edit_buffer("b", 0, 0, "Q")
                assert branches(idx.propose(ids("Qc"), k=1, current_uri="a")) == [("d", 1, Source.OPEN_BUFFER, 2)]
            super().__init__(docs, *a, **kw)

    monkeypatch.setattr(store, "ScanSet", Interleaved)
    assert branches(idx.propose(ids("Qc"), k=1, current_uri="a")) == [("d", 1, Source.OPEN_BUFFER, 2)]
    assert builds == [["cd2 xy3"], ["Qcd2 xy3"]]  # not a third build: the newer set stayed installed
    monkeypatch.undo()
    assert idx._buffers.cache.key == idx._buffers.lookup_set("a")[0]
    idx._check_invariants()


def test_check_invariants_compares_the_cached_lookup_sets_with_fresh_builds():
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, keyed_min_tokens=4))
    idx.open_buffer("a", "xy1 ab")
    idx.open_buffer("b", "cd2 xy3")
    idx.add_history(ids("hi!"))
    idx.propose(ids("cd"), k=1, current_uri="a")
    idx._check_invariants()
    for part in (idx._buffers, idx._history):
        key, good = part.cache.key, part.cache.set
        bad = idx._buffers.lookup_set("b")[1]()  # a set with other contents under the current key
        part.cache.put(key, bad)
        with pytest.raises(AssertionError):
            idx._check_invariants()
        part.cache.put(key, good)
    idx._check_invariants()


def test_file_bytes_running_total_equals_a_walk(tmp_path):
    """stats()' per-file bookkeeping is a running total kept by every install, removal and
    merge; _check_invariants compares it with a walk over the files."""
    idx = chars(IndexConfig(min_n=2, max_match=8, merge_tokens=10**6))
    paths = [tmp_path / (f"{i:02d}_" + "n" * (i * 7) + ".py") for i in range(30)]
    for p in paths:
        p.write_text("ab\n")

    def check():
        assert (idx._workspace.file_bytes(), idx._workspace.dyn_bytes) == idx._workspace.walk_file_bytes()
        idx._check_invariants()

    check()
    assert idx.index_workspace(tmp_path)["indexed"] == 30
    check()
    idx.merge()
    check()
    for p in paths[:10]:  # tombstoned in the static segment
        idx.remove_file(p)
    check()
    for p in paths[10:15]:  # re-indexed: tombstoned there, live in the dynamic set
        p.write_text("cd\n")
        assert idx.index_file(p)
    check()
    idx.remove_file(paths[12])  # removed from the dynamic set
    check()
    idx.merge()
    check()
    assert idx.stats()["workspace_files"] == 19
    idx.rebuild()
    check()


def test_stats_does_not_walk_the_files(tmp_path, monkeypatch):
    """stats() runs under the lock every few seconds (editors poll status): its cost must not
    grow with the number of workspace files. A walk would iterate the files' dict and call
    sys.getsizeof once per path."""
    import ngramd.index.store as store

    class WatchedFiles(dict):
        walks = 0

        def _walked(self, it):
            WatchedFiles.walks += 1
            return it

        def __iter__(self):
            return self._walked(super().__iter__())

        def values(self):
            return self._walked(super().values())

        def items(self):
            return self._walked(super().items())

    def stats_sizeofs(n: int) -> int:
        root = tmp_path / str(n)
        root.mkdir()
        for i in range(n):
            (root / f"f{i}.py").write_text("ab\n")
        idx = chars()
        idx.index_workspace(root)
        idx.merge()
        idx.remove_file(root / "f0.py")  # a tombstone in the static segment
        idx.index_file(root / "f1.py")  # a file in the dynamic set
        idx._workspace.files = WatchedFiles(idx._workspace.files)
        calls = []
        real = sys.getsizeof
        monkeypatch.setattr(sys, "getsizeof", lambda *a: calls.append(1) or real(*a))
        assert idx.stats()["workspace_files"] == n - 1
        monkeypatch.undo()
        assert WatchedFiles.walks == 0
        return len(calls)

    assert stats_sizeofs(5) == stats_sizeofs(60)


def test_has_file_follows_index_and_remove(tmp_path):
    f = tmp_path / "a.py"
    f.write_text("def alpha():\n    return 1\n")
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8))
    assert not idx.has_file(f)
    assert idx.index_file(f)
    assert idx.has_file(f) and idx.has_file(str(f))
    idx.remove_file(f)
    assert not idx.has_file(f)
