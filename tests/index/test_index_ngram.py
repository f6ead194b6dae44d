"""Pure matching and ranking functions, and the static segment, on hand-written arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.index.draft import NO_DRAFT, Source
from ngramd.index.ngram import SEP, build_draft, continuation, rank_best, rank_occurrences, scan_longest
from ngramd.index.suffix import StaticSegment


def arr(*xs):
    return np.array(xs, np.int32)


def test_scan_longest_worked_example():
    # [5, 6] occurs twice: followed by 7 (p=2) and by 9 (p=6).
    a = arr(5, 6, 7, 8, 5, 6, 9)
    m, p = scan_longest(a, arr(1, 5, 6), min_n=2)
    assert m == 2 and p.tolist() == [2, 6]
    # [8, 5, 6] is longer and occurs once.
    m, p = scan_longest(a, arr(8, 5, 6), min_n=2)
    assert m == 3 and p.tolist() == [6]


def test_scan_longest_below_min_n_and_at_the_end():
    a = arr(5, 6, 7, 8, 5, 6)
    assert scan_longest(a, arr(9, 6), min_n=2)[0] == 0  # only [6] matches: below min_n
    # The occurrence at the very end has no continuation and does not count.
    m, p = scan_longest(a, arr(5, 6), min_n=2)
    assert m == 2 and p.tolist() == [2]


def test_separator_stops_matches_and_continuations():
    a = arr(SEP, 1, 2, SEP, 3, 1, 2, 4, SEP)
    m, p = scan_longest(a, arr(2, SEP + 1 + 2, 1, 2), min_n=2)  # context [2, 2, 1, 2]
    assert m == 2 and p.tolist() == [7]  # [1, 2] then SEP at p=3: no continuation
    assert continuation(a, 4, 5).tolist() == [3, 1, 2, 4]


def test_many_candidates_take_the_narrowing_path():
    a = np.tile(arr(1, 2, 3), 100)
    a[150] = 9  # one occurrence of [9, 2] among a hundred of [x, 2]
    m, p = scan_longest(a, arr(9, 2), min_n=1, narrow=4)
    assert m == 2 and p.tolist() == [152] and a[150:152].tolist() == [9, 2]


def test_rank_and_build_worked_example():
    # Occurrences: first tokens 7 (buffer, pos 2), 9 (buffer, pos 6), 7 (workspace).
    first = arr(7, 9, 7)
    source = np.array([Source.BUFFER, Source.BUFFER, Source.WORKSPACE], np.int8)
    stamp = np.array([5, 5, 1], np.int64)
    pos = np.array([2, 6, 0], np.int64)
    rows, counts = rank_occurrences(first, source, stamp, pos, w=2)
    assert rows.tolist() == [1, 0] and counts.tolist() == [1, 2]  # later buffer position first
    conts = {0: arr(7, 8, 5), 1: arr(9), 2: arr(7, 7)}
    d = build_draft(rows, counts, source, 2, 3, lambda i, k: conts[i][:k])
    assert [b.tokens.tolist() for b in d.branches] == [[9], [7, 8, 5]]
    assert [(b.count, b.source, b.match_len) for b in d.branches] == [(1, Source.BUFFER, 2), (2, Source.BUFFER, 2)]
    # w=1: a chain, the best branch only.
    rows, counts = rank_occurrences(first, source, stamp, pos, w=1)
    assert rows.tolist() == [1]


def test_source_priority_beats_recency():
    first = arr(4, 5)
    source = np.array([Source.HISTORY, Source.OPEN_BUFFER], np.int8)
    rows, _ = rank_occurrences(first, source, np.array([9, 1]), np.array([0, 0]), w=2)
    assert rows.tolist() == [1, 0]


def test_build_draft_empty_is_no_draft():
    d = build_draft(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8), 2, 4, None)
    assert d is NO_DRAFT and not d


def test_static_segment_worked_example():
    seg = StaticSegment([arr(5, 6, 7), arr(5, 6, 9)], depth=4)
    m, _ = seg.longest(arr(4, 5, 6))
    assert m == 2
    lo, hi = seg.range_of(arr(4, 5, 6), m)
    p = np.sort(seg.positions(lo, hi, cap=10))
    assert p.tolist() == [3, 7]
    assert seg.first_tokens(p).tolist() == [7, 9]
    assert seg.doc_of(p).tolist() == [0, 1]
    assert seg.continuation(7, 5).tolist() == [9]
    assert seg.doc_tokens(1).tolist() == [5, 6, 9]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), max_size=25), min_size=1, max_size=4),
    st.lists(st.integers(0, 3), min_size=1, max_size=9),
)
def test_static_segment_agrees_with_scanning(docs, ctx):
    docs = [np.array(d, np.int32) for d in docs]
    ctx = np.array(ctx, np.int32)[-8:]
    seg = StaticSegment(docs, depth=8)
    cat = np.concatenate([arr(SEP)] + [np.concatenate([d, arr(SEP)]) for d in docs]).astype(np.int32)
    m, p = scan_longest(cat, ctx, min_n=1)
    m2, _ = seg.longest(ctx)
    assert m2 == m
    if m:
        lo, hi = seg.range_of(ctx, m)
        assert np.sort(seg.positions(lo, hi, cap=10_000)).tolist() == p.tolist()
        for q in p.tolist():
            assert seg.continuation(q, 3).tolist() == continuation(cat, q, 3).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1,
                                                       max_size=8, unique_by=lambda x: x[1])),
                min_size=1, max_size=4, unique_by=lambda g: g[0]))
def test_rank_best_equals_rank_occurrences_with_w1(spec):
    # One group per source; each group one document (stamp = its source + 10), unique positions.
    groups = [(s, np.array([f for f, _ in occ], np.int32), np.full(len(occ), 10 + s, np.int64),
               np.array([p for _, p in occ], np.int64)) for s, occ in spec]
    gi, j, count = rank_best(groups)
    rows, counts = rank_occurrences(np.concatenate([g[1] for g in groups]),
                                    np.concatenate([np.full(len(g[1]), g[0]) for g in groups]),
                                    np.concatenate([g[2] for g in groups]), np.concatenate([g[3] for g in groups]), 1)
    assert sum(len(g[1]) for g in groups[:gi]) + j == rows[0] and count == counts[0]


def test_rank_best_with_stamps_past_31_bits():
    # The recency clock ticks per keystroke and per draft; a long-lived daemon may pass 2**31.
    stamps = np.array([2**31 - 1, 2**31, 2**31], np.int64)
    group = (0, arr(7, 8, 7), stamps, np.array([5, 3, 1], np.int64))
    gi, j, count = rank_best([group])
    rows, counts = rank_occurrences(group[1], np.zeros(3, np.int64), stamps, group[3], 1)
    assert (gi, j, count) == (0, 1, 1) and rows.tolist() == [1] and counts.tolist() == [1]
