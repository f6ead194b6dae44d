"""An explicit KV cache: per-layer preallocated key/value buffers plus the token ids they cover.

Invariant: ``len(kv.tokens) == kv.cache.get_seq_length()``, and entry i of every
layer's keys/values was computed for ``tokens[i]`` at position i, attending to
tokens[:i+1] only. ``KVPool`` keeps one cache per document so that successive
requests reuse their longest common prefix.

Why not transformers' ``DynamicCache``: it appends by ``torch.cat``, which copies
every layer's whole cache on every forward pass (O(context) per pass; measured on
the 2-core CPU: 1-4 ms at 1k tokens, within noise, ~10 ms at 3k; docs/benchmarks.md at 53c478e). ``InPlaceLayer`` instead keeps a buffer
with spare capacity (grown by doubling) and writes the new entries in place;
``keys``/``values`` are views of the filled part, so attention sees exactly the
filled length. Rollback (``crop``) only moves the length; keeping a tree path
(``select``) moves the few accepted entries down in place.

Rebuild path: ``reset()`` empties the cache; a cold prefill of the same tokens
yields the same entries (tested: KV reuse gives the same output as a cold run, and
the in-place cache matches ``DynamicCache`` across extend/crop/select walks).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from ngramd.daemon.runtime.cache_pool import common_prefix_len

MIN_CAPACITY = 256  # entries; a 135M model spends ~46 KB of fp32 K+V per entry over all layers


_ONE_SEQUENCE = "ngramd's in-place KV cache holds one sequence: batch and beam operations are not supported"


class InPlaceLayer(DynamicLayer):
    """One layer's keys/values in buffers ``[batch, kv_heads, capacity, head_dim]``; ``length`` entries are filled.

    ``self.keys``/``self.values`` are always views ``buf[..., :length, :]`` (what
    transformers' code reads). Entries past ``length`` are stale and never seen.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.length = 0
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.length = 0
        self._kbuf = self._vbuf = None
        self.is_initialized = True

    def _reserve(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        cap = 0 if self._kbuf is None else self._kbuf.shape[-2]
        if needed <= cap:
            return
        new_cap = max(MIN_CAPACITY, 2 * cap, needed)
        kshape = (*key_states.shape[:-2], new_cap, key_states.shape[-1])
        vshape = (*value_states.shape[:-2], new_cap, value_states.shape[-1])
        kbuf = torch.empty(kshape, dtype=key_states.dtype, device=key_states.device)
        vbuf = torch.empty(vshape, dtype=value_states.dtype, device=value_states.device)
        if self.length:
            kbuf[..., :self.length, :].copy_(self._kbuf[..., :self.length, :])
            vbuf[..., :self.length, :].copy_(self._vbuf[..., :self.length, :])
        self._kbuf, self._vbuf = kbuf, vbuf

    def _set_views(self) -> None:
        self.keys = self._kbuf[..., :self.length, :]
        self.values = self._vbuf[..., :self.length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states``/``value_states`` ([batch, kv_heads, n, head_dim]); returns views of all filled entries."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        self._reserve(self.length + n, key_states, value_states)
        self._kbuf[..., self.length:self.length + n, :].copy_(key_states)
        self._vbuf[..., self.length:self.length + n, :].copy_(value_states)
        self.length += n
        self._set_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        self.length = 0
        self._kbuf = self._vbuf = None
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' convention: ``tokens_to_remove`` <= 0 removes that many entries from the end."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of entries to remove")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.truncate(max(0, self.length + tokens_to_remove))

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` entries."""
        assert 0 <= n <= self.length, (n, self.length)
        self.length = n
        if self._kbuf is not None:
            self._set_views()

    @torch.inference_mode()  # the buffers were made in the forward's inference mode
    def gather_tail(self, keep: int, positions: torch.Tensor) -> None:
        """Entries at ``positions`` (ascending, >= keep) move to [keep, keep+len); the rest past them is dropped."""
        moved_k = self._kbuf.index_select(-2, positions)  # a copy: source and target may overlap
        moved_v = self._vbuf.index_select(-2, positions)
        m = positions.numel()
        self._kbuf[..., keep:keep + m, :].copy_(moved_k)
        self._vbuf[..., keep:keep + m, :].copy_(moved_v)
        self.length = keep + m
        self._set_views()

    # Batch and beam operations of transformers' cache API: this cache holds exactly one
    # sequence (one document's decoding), so they are refused with a clear error.
    def batch_repeat_interleave(self, repeats: int) -> None:
        raise RuntimeError(_ONE_SEQUENCE)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise RuntimeError(_ONE_SEQUENCE)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise RuntimeError(_ONE_SEQUENCE)


class InPlaceCache(DynamicCache):
    """A ``DynamicCache`` whose layers are ``InPlaceLayer`` (created lazily, one per model layer)."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=InPlaceLayer)


class KVCache:
    def __init__(self) -> None:
        self.cache = InPlaceCache()
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        """Forget every entry. Buffers are dropped too (a reset follows errors; memory is returned)."""
        self.cache = InPlaceCache()
        self.tokens = []

    def _layers(self) -> list[InPlaceLayer]:
        return [layer for layer in self.cache.layers if layer.is_initialized]

    def seq_length(self) -> int:
        return int(self.cache.get_seq_length())

    def extended(self, new_tokens: Sequence[int]) -> None:
        """Record that a forward pass appended ``new_tokens`` to the cache."""
        self.tokens.extend(int(t) for t in new_tokens)
        assert len(self.tokens) == self.seq_length(), (len(self.tokens), self.seq_length())

    def crop(self, n: int) -> None:
        """Keep the first ``n`` entries (rollback past rejected draft tokens): moves the length, copies nothing."""
        assert 0 <= n <= len(self.tokens), (n, len(self.tokens))
        if n == len(self.tokens):
            return
        for layer in self._layers():
            layer.truncate(n)
        del self.tokens[n:]

    def select(self, keep: int, positions: Sequence[int]) -> None:
        """Keep entries [0, keep) followed by the entries at absolute ``positions`` (ascending, >= keep).

        After a tree pass the accepted path is scattered among rejected siblings;
        its entries are moved down in place into [keep, keep+len) and the rest is
        dropped. Only the few moved entries are copied, never the prefix.
        """
        positions = [int(p) for p in positions]
        assert all(keep <= p < len(self.tokens) for p in positions) and positions == sorted(positions), \
            (keep, positions, len(self.tokens))
        if positions == list(range(keep, keep + len(positions))):
            self.crop(keep + len(positions))
            return
        layers = self._layers()
        # one host-to-device copy per pass (all layers sit on one device), not one per layer
        src = torch.tensor(positions, dtype=torch.long, device=layers[0].device if layers else None)
        for layer in layers:
            layer.gather_tail(keep, src.to(layer.device))  # a no-op on the same device
        self.tokens = self.tokens[:keep] + [self.tokens[p] for p in positions]
        assert len(self.tokens) == self.seq_length()

    def reuse_for(self, tokens: Sequence[int]) -> int:
        """Crop to the longest common prefix with ``tokens``; returns how many entries were kept."""
        keep = common_prefix_len(self.tokens, tokens)
        self.crop(keep)
        return keep
