"""An explicit KV cache: transformers' DynamicCache plus the token ids it covers.

Invariant: ``len(kv.tokens) == kv.cache.get_seq_length()``, and entry i of every
layer's keys/values was computed for ``tokens[i]`` at position i, attending to
tokens[:i+1] only. Rollback is a crop (a view, no reallocation); keeping a tree
path moves the few accepted entries down and crops. ``KVPool`` keeps one cache
per document so that successive requests reuse their longest common prefix.

Rebuild path: ``reset()`` empties the cache; a cold prefill of the same tokens
yields the same entries (tested: KV reuse gives the same output as a cold run).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import torch


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVCache:
    def __init__(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.tokens = []

    def _layers(self) -> list[Any]:
        return [layer for layer in getattr(self.cache, "layers", []) if getattr(layer, "is_initialized", True)
                and getattr(layer, "keys", None) is not None]

    def seq_length(self) -> int:
        return int(self.cache.get_seq_length())

    def extended(self, new_tokens: Sequence[int]) -> None:
        """Record that a forward pass appended ``new_tokens`` to the cache."""
        self.tokens.extend(int(t) for t in new_tokens)
        assert len(self.tokens) == self.seq_length(), (len(self.tokens), self.seq_length())

    def crop(self, n: int) -> None:
        """Keep the first ``n`` entries (rollback past rejected draft tokens)."""
        assert 0 <= n <= len(self.tokens), (n, len(self.tokens))
        if n == len(self.tokens):
            return
        if n == 0:
            self.reset()
            return
        for layer in self._layers():
            layer.keys = layer.keys[..., :n, :]
            layer.values = layer.values[..., :n, :]
        del self.tokens[n:]

    def select(self, keep: int, positions: Sequence[int]) -> None:
        """Keep entries [0, keep) followed by the entries at absolute ``positions`` (ascending, >= keep).

        After a tree pass the accepted path is scattered among rejected siblings;
        its entries are gathered (index_select on every layer) into [keep, keep+len)
        and the rest is cropped. Only the tail is copied, never the prefix.
        """
        positions = [int(p) for p in positions]
        assert all(p >= keep for p in positions) and positions == sorted(positions)
        if positions == list(range(keep, keep + len(positions))):
            self.crop(keep + len(positions))
            return
        src = torch.tensor(positions, dtype=torch.long)
        for layer in self._layers():
            idx = src.to(layer.keys.device)
            moved_k = layer.keys.index_select(-2, idx)
            moved_v = layer.values.index_select(-2, idx)
            layer.keys = torch.cat([layer.keys[..., :keep, :], moved_k], dim=-2)
            layer.values = torch.cat([layer.values[..., :keep, :], moved_v], dim=-2)
        self.tokens = self.tokens[:keep] + [self.tokens[p] for p in positions]
        assert len(self.tokens) == self.seq_length()

    def reuse_for(self, tokens: Sequence[int]) -> int:
        """Crop to the longest common prefix with ``tokens``; returns how many entries were kept."""
        keep = common_prefix_len(self.tokens, tokens)
        self.crop(keep)
        return keep


class KVPool:
    """Per-document caches, least recently used evicted beyond ``max_caches``."""

    def __init__(self, max_caches: int = 4) -> None:
        assert max_caches >= 1
        self.max_caches = max_caches
        self._caches: OrderedDict[str, KVCache] = OrderedDict()

    def get(self, uri: str) -> KVCache:
        kv = self._caches.pop(uri, None)
        if kv is None:
            kv = KVCache()
        self._caches[uri] = kv
        while len(self._caches) > self.max_caches:
            self._caches.popitem(last=False)
        return kv

    def drop(self, uri: str) -> None:
        self._caches.pop(uri, None)

    def __len__(self) -> int:
        return len(self._caches)

    def cached_tokens(self) -> int:
        return sum(len(kv) for kv in self._caches.values())
