"""KeyIndex: sorted n-gram keys of one array, spliced on edits, against scans and rebuilds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.index import IndexConfig, NgramIndex
from ngramd.index.keyed import KeyIndex
from ngramd.index.ngram import SEP, scan_longest

from index_helpers import word_tokenize


def arr(*xs):
    return np.array(xs, np.int32)


def test_worked_example():
    # Positions of a = [5, 6, 7, 5, 6] (K=2): 2 (after [5, 6], continues with 7),
    # 3 (after [6, 7]) and 4 (after [7, 5]); 5 would follow [5, 6] but has no continuation.
    a = arr(5, 6, 7, 5, 6)
    ki = KeyIndex(a, 2)
    assert sorted(ki.pos.tolist()) == [2, 3, 4]
    m, p = ki.match(a, arr(1, 5, 6), min_n=2)
    assert m == 2 and p.tolist() == [2]
    assert ki.match(a, arr(9, 6), min_n=2)[0] == 0  # only [6] occurs: below min_n


def test_splice_shifts_later_positions():
    a = arr(1, 2, 3, 4, 1, 2, 3)
    ki = KeyIndex(a, 2)
    b = np.concatenate([a[:2], arr(9, 9, 9), a[3:]])  # [3] -> [9, 9, 9]: +2 tokens
    ki.splice(b, 2, 3, 3)
    ki.check(b)
    m, p = ki.match(b, arr(4, 1, 2), min_n=2)
    assert m == 3 and p.tolist() == [8] and b[8] == 3  # was position 6 before the splice


def test_separators_are_never_keys_or_continuations():
    a = arr(SEP, 1, 2, SEP, 3, 1, 2, 4, SEP)
    ki = KeyIndex(a, 2)
    assert sorted(ki.pos.tolist()) == [6, 7]  # [3, 1] -> 2, [1, 2] -> 4
    assert ki.match(a, arr(1, 2), 2)[1].tolist() == [7]


tokens = st.lists(st.integers(0, 4), max_size=40)


@settings(max_examples=300, deadline=None)
@given(tokens, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), tokens.map(lambda x: x[:6])), max_size=8),
       st.sampled_from([1, 2, 3]), st.lists(tokens.map(lambda x: x[:7]), min_size=1, max_size=6))
def test_spliced_index_equals_rebuilt_and_matches_like_a_scan(start, edits, min_n, ctxs):
    a = np.array(start, np.int32)
    k = min(min_n, 2)
    ki = KeyIndex(a, k)
    for lo, n, new in edits:
        lo = min(lo, len(a))
        hi = min(lo + n, len(a))
        a = np.concatenate([a[:lo], np.array(new, np.int32), a[hi:]])
        ki.splice(a, lo, hi, len(new))
        ki.check(a)
    for c in ctxs:
        ctx = np.array(c, np.int32)
        m, p = scan_longest(a, ctx, min_n, narrow=2)
        km, kp = ki.match(a, ctx, min_n)
        assert (km, kp.tolist()) == (m, p.tolist())


def test_buffer_edits_splice_the_key_index():
    # Multi-line buffers re-tokenize only the edited lines, so the splice is partial.
    idx = NgramIndex(word_tokenize, IndexConfig(keyed_min_tokens=0))
    ref = NgramIndex(word_tokenize, IndexConfig(keyed_min_tokens=10**9))  # scans
    text = "".join(f"def f{i}(x):\n    return x + {i % 3}\n" for i in range(30))
    idx.open_buffer("u", text)
    rng = np.random.default_rng(0)
    for _ in range(40):
        s = int(rng.integers(0, len(text)))
        e = min(len(text), s + int(rng.integers(0, 12)))
        new = ["", "x", "\n    y = 1\n", " + 2"][int(rng.integers(0, 4))]
        idx.edit_buffer("u", s, e, new)
        text = text[:s] + new + text[e:]
        idx._check_invariants()
    ref.open_buffer("u", text)
    toks = ref.buffer_tokens("u")
    for i in range(2, len(toks)):
        ctx = toks[max(0, i - 6) : i]
        got, want = idx.propose(ctx, k=4, w=2, current_uri="u"), ref.propose(ctx, k=4, w=2, current_uri="u")
        assert [(b.tokens.tolist(), b.count, b.source, b.match_len) for b in got.branches] == \
               [(b.tokens.tolist(), b.count, b.source, b.match_len) for b in want.branches]
