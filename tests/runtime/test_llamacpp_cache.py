"""The llama.cpp runtime's caches: rollback after a rejected draft, reuse of a common prefix,
several documents at once, logits of the rows asked only, and the model held once at its own quantization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.real_model

TEXT = (Path(__file__).resolve().parents[1] / "engine" / "data" / "stops_sample.py.txt")


@pytest.fixture(scope="module")
def ids(llama_rt):
    return llama_rt.encode(TEXT.read_text())


def _run(rt, cache, ids, keep_last=None):
    logits = rt.forward_pass(ids, cache, keep_last=keep_last)  # numpy: [rows, vocab]
    cache.extended(ids)
    return logits


def _fresh(rt, *pieces):
    """Logits of the last piece's rows on a new cache that ran ``pieces`` in turn."""
    cache = rt.new_cache()
    try:
        for piece in pieces[:-1]:
            _run(rt, cache, piece, keep_last=1)
        return _run(rt, cache, pieces[-1])
    finally:
        rt.release_cache(cache)


def test_a_rejected_draft_is_rolled_back(llama_rt, ids):
    rt = llama_rt
    ctx, draft, other = ids[:300], ids[300:306], ids[400:405]
    cache = rt.new_cache()
    try:
        _run(rt, cache, ctx, keep_last=1)
        _run(rt, cache, draft)  # a 6-token verify pass
        cache.crop(len(ctx) + 2)  # two accepted, four rejected
        assert cache.tokens == ctx + draft[:2]
        after = _run(rt, cache, other)
        assert np.array_equal(after, _fresh(rt, ctx, draft[:2], other))
        cache.crop(len(ctx))  # the whole draft rejected: other tokens at its positions
        assert np.array_equal(_run(rt, cache, other), _fresh(rt, ctx, other))
    finally:
        rt.release_cache(cache)


def test_reuse_keeps_the_common_prefix(llama_rt, ids):
    rt = llama_rt
    cache = rt.new_cache()
    try:
        _run(rt, cache, ids[:200], keep_last=1)
        changed = ids[:150] + ids[500:520]
        assert cache.reuse_for(changed) == 150
        assert cache.tokens == ids[:150]
        assert np.array_equal(_run(rt, cache, changed[150:]), _fresh(rt, ids[:150], changed[150:]))
    finally:
        rt.release_cache(cache)


def test_several_documents_keep_their_own_caches(llama_rt, ids):
    rt = llama_rt
    a_ids, b_ids = ids[:256], ids[600:900]
    a, b = rt.new_cache(), rt.new_cache()
    try:
        assert a.seq_id != b.seq_id
        _run(rt, a, a_ids[:200], keep_last=1)
        _run(rt, b, b_ids[:250], keep_last=1)  # a longer document in between
        a_next = _run(rt, a, a_ids[200:])
        b.crop(100)
        b_next = _run(rt, b, b_ids[100:110])
    finally:
        rt.release_cache(a)
        rt.release_cache(b)
    assert np.array_equal(a_next, _fresh(rt, a_ids[:200], a_ids[200:]))
    assert np.array_equal(b_next, _fresh(rt, b_ids[:100], b_ids[100:110]))


def test_sequences_are_handed_back_and_limited(llama_rt):
    rt = llama_rt
    held = [rt.new_cache() for _ in range(rt.sequences)]
    try:
        assert sorted(c.seq_id for c in held) == list(range(rt.sequences))
        with pytest.raises(RuntimeError, match="sequences"):
            rt.new_cache()
    finally:
        for cache in held:
            rt.release_cache(cache)
    released = held[0]
    with pytest.raises(RuntimeError, match="released"):
        rt.forward_pass([1, 2], released)
    again = rt.new_cache()  # a released sequence comes back empty
    try:
        assert len(again) == 0
        assert np.array_equal(_run(rt, again, [504, 1116]), _fresh(rt, [504, 1116]))
    finally:
        rt.release_cache(again)


def test_logits_of_the_rows_asked_only(llama_rt, ids):
    rt = llama_rt
    full = _fresh(rt, ids[:40], ids[40:60])
    cache = rt.new_cache()
    try:
        _run(rt, cache, ids[:40], keep_last=1)
        last = _run(rt, cache, ids[40:60], keep_last=3)
    finally:
        rt.release_cache(cache)
    assert last.shape == (3, rt.vocab_size) and last.dtype == np.float32
    assert np.array_equal(last, full[-3:])


def test_a_pass_longer_than_a_batch_is_split(llama_rt, ids):
    from ngramd.daemon.runtime.llamacpp import BATCH

    rt = llama_rt
    n = BATCH + 100
    long = _fresh(rt, ids[:n])  # rows of both llama_decode calls
    assert long.shape == (n, rt.vocab_size)
    assert np.array_equal(long[-2:], _fresh(rt, ids[:BATCH], ids[BATCH:n])[-2:])
    assert np.array_equal(long[BATCH - 1], _fresh(rt, ids[:BATCH - 1], ids[BATCH - 1:BATCH])[0])


def test_trees_are_refused(llama_rt):
    from ngramd.daemon.runtime.tree import build_tree

    rt = llama_rt
    assert rt.supports_trees is False
    cache = rt.new_cache()
    try:
        _run(rt, cache, [504, 1116, 33, 30], keep_last=1)
        tree = build_tree([np.array([5, 6]), np.array([5, 7])])
        with pytest.raises(NotImplementedError):
            rt.forward_pass([9, 5, 6, 7], cache, tree=tree)
        cache.select(2, [2, 3])  # a chain's path: a crop
        assert cache.tokens == [504, 1116, 33, 30]
        with pytest.raises(NotImplementedError):
            cache.select(2, [3])
    finally:
        rt.release_cache(cache)


def test_the_model_is_held_once_at_its_own_quantization(llama_rt):
    """Read into llama.cpp's buffers, not mapped (a mapped file stays resident beside the CPU's
    repacked copy), and not de-quantized: the process holds about the file, not 4-8x it."""
    maps = Path("/proc/self/maps")
    if not maps.is_file():
        pytest.skip("no /proc/self/maps here")
    assert str(llama_rt.path) not in maps.read_text(), "the file is read once, not left mapped"
    # the tensors at their quantization: about the file (Q4_1), where fp32 would be 6-7x it
    assert llama_rt.memory_figures()["model_bytes"] <= 1.05 * llama_rt.path.stat().st_size