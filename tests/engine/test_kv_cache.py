"""The in-place KV cache equals transformers' DynamicCache across extend / crop / select walks."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from ngramd.daemon.runtime.kv_cache import InPlaceCache, KVCache, MIN_CAPACITY

from ngramd.daemon.runtime.cache_pool import KVPool


class RefCache:
    """The reference: a DynamicCache rolled back by slicing and gathered by index_select + cat."""

    def __init__(self) -> None:
        self.cache = DynamicCache()
        self.tokens: list[int] = []

    def crop(self, n: int) -> None:
        if n < len(self.tokens):
            self.cache.crop(n - len(self.tokens))
        del self.tokens[n:]

    def select(self, keep: int, positions: list[int]) -> None:
        idx = torch.tensor(positions, dtype=torch.long)
        for layer in self.cache.layers:
            layer.keys = torch.cat([layer.keys[..., :keep, :], layer.keys.index_select(-2, idx)], dim=-2)
            layer.values = torch.cat([layer.values[..., :keep, :], layer.values.index_select(-2, idx)], dim=-2)
        self.tokens = self.tokens[:keep] + [self.tokens[p] for p in positions]


def _same_entries(kv: KVCache, ref: RefCache) -> None:
    assert kv.tokens == ref.tokens
    assert kv.seq_length() == ref.cache.get_seq_length() == len(kv.tokens)
    if not kv.tokens:
        return
    for mine, theirs in zip(kv.cache.layers, ref.cache.layers, strict=True):
        torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values, theirs.values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_walk_matches_dynamic_cache(tiny, seed):
    rng = random.Random(seed)
    kv, ref = KVCache(), RefCache()
    start = MIN_CAPACITY - 20 if seed == 0 else 30  # seed 0 crosses the first capacity doubling
    prompt = [rng.randrange(100, 20000) for _ in range(start)]
    a = tiny.forward(torch.tensor([prompt]), kv.cache)
    b = tiny.forward(torch.tensor([prompt]), ref.cache)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    kv.extended(prompt)
    ref.tokens.extend(prompt)
    ops = []
    for _ in range(14):
        op = rng.choice(["extend", "extend", "crop", "select"])
        ops.append(op)
        if op == "extend":
            new = [rng.randrange(100, 20000) for _ in range(rng.randint(1, 9))]
            a = tiny.forward(torch.tensor([new]), kv.cache)  # [n, vocab]
            b = tiny.forward(torch.tensor([new]), ref.cache)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
            kv.extended(new)
            ref.tokens.extend(new)
        elif op == "crop":
            n = rng.randint(max(1, len(kv) - 12), len(kv))
            kv.crop(n)
            ref.crop(n)
        else:
            keep = rng.randint(max(1, len(kv) - 10), len(kv) - 1)
            tail = list(range(keep, len(kv)))
            positions = sorted(rng.sample(tail, rng.randint(1, len(tail))))
            kv.select(keep, positions)
            ref.select(keep, positions)
        _same_entries(kv, ref)
    assert "extend" in ops
    # after the walk the next pass still agrees
    a = tiny.forward(torch.tensor([[123, 456]]), kv.cache)
    b = tiny.forward(torch.tensor([[123, 456]]), ref.cache)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_crop_moves_length_without_copying(tiny):
    kv = KVCache()
    ids = list(range(200, 240))
    tiny.forward(torch.tensor([ids]), kv.cache)
    kv.extended(ids)
    layer = kv.cache.layers[0]
    ptr = layer.keys.data_ptr()
    kv.crop(25)
    assert layer.keys.shape[-2] == 25 and layer.keys.data_ptr() == ptr
    tiny.forward(torch.tensor([[7, 8, 9]]), kv.cache)
    kv.extended([7, 8, 9])
    assert layer.keys.data_ptr() == ptr and kv.seq_length() == 28
    assert kv.tokens == ids[:25] + [7, 8, 9]


def test_reset_reuse_and_errors(tiny):
    kv = KVCache()
    ids = list(range(300, 320))
    tiny.forward(torch.tensor([ids]), kv.cache)
    kv.extended(ids)
    assert kv.reuse_for(ids[:12] + [1, 2]) == 12 and kv.seq_length() == 12
    kv.crop(0)
    assert len(kv) == 0 and kv.seq_length() == 0
    tiny.forward(torch.tensor([ids[:5]]), kv.cache)
    kv.extended(ids[:5])
    with pytest.raises(AssertionError):
        kv.crop(6)
    with pytest.raises(AssertionError):
        kv.select(2, [4, 3])
    with pytest.raises(AssertionError):
        kv.extended([1])  # the cache did not grow
    with pytest.raises(ValueError):
        kv.cache.layers[0].crop(3)  # transformers' convention: a negative count
    kv.reset()
    assert isinstance(kv.cache, InPlaceCache) and kv.seq_length() == 0 and kv.tokens == []


def test_pool_evicts_least_recent():
    pool = KVPool(max_caches=2, new_cache=KVCache)
    a = pool.get("a")
    pool.get("b")
    assert pool.get("a") is a
    pool.get("c")
    assert len(pool) == 2 and pool.get("a") is a and pool.get("b") is not None
