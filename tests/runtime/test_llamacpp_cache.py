"""The llama.cpp runtime's caches: rollback after a rejected draft, reuse of a common prefix,
more documents than live sequences (parked and brought back bitwise), logits of the rows asked
only, and the model held once at its own quantization."""

from __future__ import annotations

import ctypes
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
    """More documents than live sequences: each pass parks the other document's cells in host
    memory and brings its own back, bitwise, crops made while parked included."""
    rt = llama_rt
    parked_before = rt.memory_figures()["parked_kv_bytes"]  # other tests' documents on the shared runtime
    a_ids, b_ids, c_ids = ids[:256], ids[600:900], ids[300:340]
    a, b, c = rt.new_cache(), rt.new_cache(), rt.new_cache()
    try:
        _run(rt, a, a_ids[:200], keep_last=1)
        _run(rt, b, b_ids[:250], keep_last=1)  # a longer document in between
        _run(rt, c, c_ids, keep_last=1)
        assert sum(x.seq_id >= 0 for x in (a, b, c)) == rt.sequences < 3
        assert rt.memory_figures()["parked_kv_bytes"] > parked_before
        a_next = _run(rt, a, a_ids[200:])
        b.crop(100)  # parked: its cells past 100 are cut when it comes back
        b_next = _run(rt, b, b_ids[100:110])
        c.reset()  # parked cells dropped
        c_again = _run(rt, c, c_ids[:5])
    finally:
        for cache in (a, b, c):
            rt.release_cache(cache)
    assert rt.memory_figures()["parked_kv_bytes"] == parked_before  # released: their parked cells freed
    assert np.array_equal(a_next, _fresh(rt, a_ids[:200], a_ids[200:]))
    assert np.array_equal(b_next, _fresh(rt, b_ids[:100], b_ids[100:110]))
    assert np.array_equal(c_again, _fresh(rt, c_ids[:5]))


def test_a_park_that_cannot_come_back_is_never_used(llama_rt, ids):
    """Cells llama.cpp refuses to restore: a pass on them fails (its positions were counted from
    the cache's tokens); a request's reuse starts the document over instead."""
    rt = llama_rt
    a, b = rt.new_cache(), rt.new_cache()
    try:
        _run(rt, a, ids[:50], keep_last=1)
        _run(rt, b, ids[100:120], keep_last=1)
        assert a.seq_id < 0 and a.parked is not None
        rt._drop_parked(a)
        a.parked = (ctypes.c_uint8 * 16)()  # not a sequence's state
        rt.parked_bytes += 16
        with pytest.raises(RuntimeError, match="restore"):
            rt.forward_pass(ids[50:52], a)
        assert a.tokens == []
        _run(rt, a, ids[:50], keep_last=1)
        _run(rt, b, ids[120:121], keep_last=1)  # parks a again
        rt._drop_parked(a)
        a.parked = (ctypes.c_uint8 * 16)()
        rt.parked_bytes += 16
        assert a.reuse_for(ids[:60]) == 0  # starts over, no error
        after = _run(rt, a, ids[:60])
    finally:
        rt.release_cache(a)
        rt.release_cache(b)
    assert np.array_equal(after, _fresh(rt, ids[:60]))


def test_released_caches_are_refused(llama_rt):
    rt = llama_rt
    released = rt.new_cache()
    _run(rt, released, [504, 1116], keep_last=1)
    rt.release_cache(released)
    with pytest.raises(RuntimeError, match="released"):
        rt.forward_pass([1, 2], released)
    with pytest.raises(RuntimeError, match="released"):
        released.reset()
    again = rt.new_cache()  # the sequence it held comes back empty
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


def test_a_runtime_of_another_batch_gives_the_same_logits(llama_rt, ids):
    """``batch`` (tokens a llama_decode call) splits a pass otherwise: the rows come out bitwise
    the same (the exact kernels' batch invariance), so a smaller batch is a speed setting alone."""
    from ngramd.daemon.runtime.llamacpp import load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    with pytest.raises(ValueError, match="batch"):
        load_llamacpp(embedded_gguf_path(), batch=0, check=False)
    small = load_llamacpp(embedded_gguf_path(), batch=64, check=False)
    try:
        assert small.batch == 64
        n = 150  # three calls of at most 64 tokens
        assert np.array_equal(_fresh(small, ids[:n]), _fresh(llama_rt, ids[:n]))
    finally:
        small.close()


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