"""Grouped-query attention for verification passes without copying the KV cache.

transformers' SDPA path handles grouped-query attention (fewer key/value heads
than query heads; SmolLM2-135M: 9 query, 3 kv heads) for a multi-token query by
``repeat_kv``: it copies every layer's whole cache, expanded to the query heads, on
every pass (O(context); 6-14 ms per pass at 1k context on the 2-core CPU,
docs/benchmarks.md at 53c478e). torch's SDPA takes ``enable_gqa=True`` and reads the kv heads
directly, with the same result (bitwise, measured on CPU).

``install(model)`` registers this function as attention implementation
``ngramd_sdpa`` (masks as for ``sdpa``) when the model uses ``sdpa``; other
implementations are left alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "ngramd_sdpa"


def sdpa_gqa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
             is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """query [b, heads, q, d], key/value [b, kv_heads, kv, d], mask [b|1, 1, q, kv] -> ([b, q, heads, d], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = (groups == 1 or query.shape[2] == 1 or attention_mask is None or attention_mask.shape[1] != 1
             or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
             or query.device.type != "cpu")
    if plain:  # decoding one token, prefill (causal flag), or anything unusual: transformers' own path
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def install(model: Any) -> bool:
    """Switch a model using ``sdpa`` to ``sdpa_gqa``; returns whether it did."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, sdpa_gqa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
