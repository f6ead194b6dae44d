"""ScanSet: concatenated documents; an extended set equals one built from scratch."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.index import IndexConfig, NgramIndex
from ngramd.index.keyed import KeyIndex
from ngramd.index.ngram import SEP
from ngramd.index.scan_set import ScanSet

from index_helpers import char_tokenize, ids

docs = st.lists(st.lists(st.integers(0, 5), max_size=12).map(lambda x: np.array(x, np.int32)), max_size=6)


def assert_equal_sets(got: ScanSet, want: ScanSet) -> None:
    assert np.array_equal(got.cat, want.cat) and got.cat.dtype == want.cat.dtype
    assert np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.stamps, want.stamps)
    assert got.keys == want.keys and got.members == want.members
    assert (got.index is None) == (want.index is None)
    if want.index is not None:
        assert np.array_equal(got.index.keys, want.index.keys)
        assert np.array_equal(got.index.pos, want.index.pos)


def test_worked_example():
    s = ScanSet([np.array([5, 6], np.int32), np.array([7], np.int32)], [1, 2], ["a", "b"], 2, 10**9)
    assert s.cat.tolist() == [SEP, 5, 6, SEP, 7, SEP] and s.starts.tolist() == [1, 4]
    m, p, d = s.match(np.array([9, 5], np.int32), 1)
    assert (m, p.tolist(), d.tolist()) == (1, [2], [0])  # after the 5 of document 0 comes 6


@settings(max_examples=200, deadline=None)
@given(docs, docs, st.sampled_from([0, 8, 10**9]), st.sampled_from([1, 2, 3]))
def test_extended_equals_built_from_scratch(head, tail, keyed_min, min_n):
    members = [object() for _ in head + tail]
    stamps = list(range(len(head) + len(tail)))
    keys = [f"k{i}" for i in stamps]
    n = len(head)
    base = ScanSet(head, stamps[:n], keys[:n], min_n, keyed_min, members=members[:n])
    before = (base.cat.copy(), None if base.index is None else (base.index.keys.copy(), base.index.pos.copy()))
    got = base.extended(tail, stamps[n:], keys[n:], members[n:])
    want = ScanSet(head + tail, stamps, keys, min_n, keyed_min, members=members)
    assert_equal_sets(got, want)
    assert got.extends(members) and base.extends(members + [object()])
    if members:
        assert not got.extends(members[:-1] + [object()])  # same length, another last member
    # the base is untouched: a lookup may be using it while its successor is built
    assert np.array_equal(base.cat, before[0])
    if base.index is not None:
        assert np.array_equal(base.index.keys, before[1][0]) and np.array_equal(base.index.pos, before[1][1])
    ctx = np.array([3, 1, 2], np.int32)
    m1, p1, d1 = got.match(ctx, min_n)
    m2, p2, d2 = want.match(ctx, min_n)
    assert m1 == m2 and np.array_equal(p1, p2) and np.array_equal(d1, d2)


def test_appended_key_index_needs_a_separator_at_the_old_end():
    a = np.array([SEP, 1, 2, SEP], np.int32)
    ki = KeyIndex(a, 2)
    b = np.concatenate([a, np.array([1, 2, 3, SEP], np.int32)])
    got = ki.appended(b, len(a))
    want = KeyIndex(b, 2)
    assert np.array_equal(got.keys, want.keys) and np.array_equal(got.pos, want.pos)


def test_lookups_after_writes_do_not_build_the_dynamic_set(tmp_path):
    """Writers build the dynamic set outside the lock; a lookup only uses it."""
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, merge_tokens=10**6, keyed_min_tokens=0))
    built_by_lookup = []
    make, propose = idx._workspace.make_dynamic, idx.propose
    looking_up = threading.local()

    def spy_make(*args):
        if getattr(looking_up, "on", False):
            built_by_lookup.append(1)
        return make(*args)

    def spy_propose(*args, **kwargs):
        looking_up.on = True
        try:
            return propose(*args, **kwargs)
        finally:
            looking_up.on = False

    idx._workspace.make_dynamic, idx.propose = spy_make, spy_propose
    for i in range(3):
        f = tmp_path / f"f{i}.py"
        f.write_text(f"def f{i}(): return {i}\n")
        assert idx.index_file(f)
        d = idx.propose(ids(f"def f{i}("), k=4)
        assert d and "".join(map(chr, d.best.tokens)) == "): r"
    idx.remove_file(tmp_path / "f1.py")  # not an append: built anew, still by the writer
    assert not idx.propose(ids("f1("), k=4)
    assert built_by_lookup == []
    idx._check_invariants()


def test_killed_documents_do_not_match():
    a, b = object(), object()
    s = ScanSet([np.array([5, 6, 7], np.int32), np.array([5, 6, 8], np.int32)], [1, 2], ["a", "b"], 2, 0,
                members=[a, b])
    s.kill("b", object())  # another object under that key: not this set's document
    assert s.match(np.array([5, 6], np.int32), 2)[1].tolist() == [3, 7]
    s.kill("b", b)
    m, p, d = s.match(np.array([5, 6], np.int32), 2)
    assert (m, p.tolist(), d.tolist()) == (2, [3], [0])
    # all occurrences of the longest match dead: no match (not a shorter one)
    assert s.match(np.array([4, 5, 6, 8], np.int32), 2)[0] == 0


def _index_with(*files: tuple[str, str]) -> NgramIndex:
    idx = NgramIndex(char_tokenize, IndexConfig(min_n=2, max_match=8, merge_tokens=10**6))
    with idx._lock:
        for key, body in files:
            idx._workspace.install(key, np.array(ids(body), np.int32))
    idx._workspace.warm_dynamic()
    return idx


def drafted(idx: NgramIndex, context: str) -> str:
    d = idx.propose(ids(context), k=3)
    return "".join(map(chr, d.best.tokens)) if d else ""


def test_until_the_writer_builds_lookups_use_the_last_set_with_removals_tombstoned():
    idx = _index_with(("/w/a.py", "alpha()"))
    with idx._lock:  # what a writer does before it builds the new set outside the lock
        idx._workspace.install("/w/b.py", np.array(ids("beta()"), np.int32))
        idx._workspace.remove("/w/a.py")
    assert drafted(idx, "al") == "" and drafted(idx, "be") == ""  # a.py is dead; b.py not in yet
    idx._workspace.warm_dynamic()
    assert drafted(idx, "al") == "" and drafted(idx, "be") == "ta("
    idx._check_invariants()


def test_a_set_built_while_a_file_was_removed_is_thrown_away():
    idx = _index_with(("/w/a.py", "alpha()"))
    with idx._lock:
        idx._workspace.install("/w/b.py", np.array(ids("beta()"), np.int32))
    make = idx._workspace.make_dynamic

    def remove_meanwhile(base, snap):  # the watcher removes a.py while the writer builds
        built = make(base, snap)
        with idx._lock:
            idx._workspace.remove("/w/a.py")
        return built

    idx._workspace.make_dynamic = remove_meanwhile
    idx._workspace.warm_dynamic()  # its set holds a.py alive: not installed
    idx._workspace.make_dynamic = make
    assert drafted(idx, "al") == ""
    idx._workspace.warm_dynamic()
    assert drafted(idx, "al") == "" and drafted(idx, "be") == "ta("
    idx._check_invariants()


def test_a_file_installed_during_a_merge_is_counted_once(monkeypatch):
    import ngramd.index.files as files

    idx = _index_with(("/w/a.py", "x = f(1)"))
    real = files.StaticSegment

    def install_meanwhile(docs, depth):  # a file event while the merge sorts, outside the lock
        with idx._lock:
            idx._workspace.install("/w/b.py", np.array(ids("y = f(2)"), np.int32))
        return real(docs, depth)

    monkeypatch.setattr(files, "StaticSegment", install_meanwhile)
    idx.merge()
    monkeypatch.setattr(files, "StaticSegment", real)
    idx._workspace.warm_dynamic()
    d = idx.propose(ids(" f("), k=2, w=2)
    assert sorted(("".join(map(chr, b.tokens)), b.count) for b in d.branches) == [("1)", 1), ("2)", 1)]
    idx._check_invariants()
