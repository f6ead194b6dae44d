"""Few-row linears (daemon/runtime/fast_linear.py) and copy-free GQA attention (daemon/runtime/fast_attention.py) equal the stock paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ngramd.daemon.runtime import fast_attention
from ngramd.daemon.runtime import fast_linear
from ngramd.daemon.runtime.fast_linear import FastLinear, linear_rows

ALL = frozenset(range(1, 64))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 17])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_rows_equals_f_linear(n, with_bias):
    g = torch.Generator().manual_seed(n)
    w = torch.randn(300, 48, generator=g)
    b = torch.randn(300, generator=g) if with_bias else None
    x = torch.randn(1, n, 48, generator=g)
    got = linear_rows(x, w, b, ALL)
    assert got.shape == (1, n, 300) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    assert torch.equal(linear_rows(x, w, b, frozenset()), F.linear(x, w, b))  # not in the table: F.linear itself


needs_onednn = pytest.mark.skipif(not fast_linear.can_pack([torch.zeros(2, 2)]),
                                  reason="this torch build has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("n", [3, 5, 8, 17, 64, 65, 300, 700])  # in a bucket, padded, in blocks
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_linear_equals_f_linear(n, with_bias):
    g = torch.Generator().manual_seed(n)
    w = torch.randn(300, 48, generator=g)
    b = torch.randn(300, generator=g) if with_bias else None
    x = torch.randn(1, n, 48, generator=g)
    got = linear_rows(x, w, b, frozenset({1, 2}), fast_linear.pack(w))
    assert got.shape == (1, n, 300) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_onednn_sees_only_the_bucket_row_counts_and_padding_changes_no_row(monkeypatch):
    """oneDNN keeps a kernel per row count it is called with (memory that was never given
    back): every call's count is one of PACK_BUCKETS, and a padded call's rows equal an
    unpadded call's."""
    w = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    packed = fast_linear.pack(w)
    seen = []
    real = fast_linear.onednn_linear

    def watch(x, *rest):
        seen.append(x.shape[-2])
        return real(x, *rest)

    monkeypatch.setattr(fast_linear, "onednn_linear", watch)
    for n in list(range(3, 80)) + [131, 511, 513, 1100]:
        x = torch.randn(1, n, 32, generator=torch.Generator().manual_seed(n))
        got = fast_linear.packed_linear(x, packed, None, n)
        assert got.shape == (1, n, 64)
        if n <= fast_linear.PACK_BLOCK:  # padding alone: the same rows as a call with n rows
            assert torch.equal(got, real(x, packed, None, "none", [], ""))
    assert set(seen) <= set(fast_linear.PACK_BUCKETS)
    assert len(set(seen)) <= len(fast_linear.PACK_BUCKETS) < 40


@needs_onednn
def test_install_packs_only_what_fits(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 40, bias=False))
    x = torch.randn(1, 6, 16)  # 6 rows: the packed path
    before = model(x)
    assert fast_linear.packed_bytes(model) == 0
    assert fast_linear.install(model, model[2]) == 2
    assert all(m.packed is not None for m in (model[0], model[2]))
    assert fast_linear.packed_bytes(model) >= 4 * (16 * 32 + 32 * 40)  # a full fp32 copy, maybe padded
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)

    small = nn.Sequential(nn.Linear(16, 32))
    monkeypatch.setattr(fast_linear, "PACK_MAX_BYTES", 16 * 32 * 4 - 1)  # one byte short
    fast_linear.install(small, None)
    assert small[0].packed is None
    assert not fast_linear.can_pack([torch.zeros(2, 2, dtype=torch.bfloat16)])
    unpacked = nn.Sequential(nn.Linear(16, 32))
    fast_linear.install(unpacked, None, packed=False)
    assert unpacked[0].packed is None


def test_install_shares_weights_and_keeps_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 40, bias=False))
    x = torch.randn(3, 16)
    before = model(x)
    head = model[2]
    ptr = head.weight.data_ptr()
    assert fast_linear.install(model, head) == 2
    assert type(head) is FastLinear and head.kind == "head" and model[0].kind == "layer"
    assert head.weight.data_ptr() == ptr
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)


def _gqa_llama(attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    config._attn_implementation = attn
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_gqa_attention_equals_sdpa_with_tree_mask(monkeypatch):
    from types import SimpleNamespace

    from transformers import DynamicCache

    gqa_calls = []

    def spy(*args, **kwargs):
        gqa_calls.append(kwargs.get("enable_gqa"))
        return F.scaled_dot_product_attention(*args, **kwargs)

    monkeypatch.setattr(fast_attention, "F", SimpleNamespace(scaled_dot_product_attention=spy))

    stock = _gqa_llama("sdpa")
    fast = _gqa_llama("sdpa")
    assert fast_attention.install(fast) and fast.config._attn_implementation == fast_attention.NAME
    assert not fast_attention.install(_gqa_llama("eager"))  # only sdpa models are switched
    prompt = torch.randint(0, 500, (1, 40), generator=torch.Generator().manual_seed(1))
    new = torch.tensor([[5, 6, 7, 8]])
    past = prompt.shape[1]
    # a tree: 5 <- 6, 5 <- 7 <- 8 (6 and 7 are siblings)
    parents = [-1, 0, 0, 2]
    mask = torch.full((1, 1, 4, past + 4), float("-inf"))
    mask[..., :past] = 0
    for i, p in enumerate(parents):
        j = i
        while j != -1:
            mask[0, 0, i, past + j] = 0
            j = parents[j]
    pos = torch.tensor([[past, past + 1, past + 1, past + 2]])
    outs = []
    for model in (stock, fast):
        cache = DynamicCache()
        with torch.inference_mode():
            model(input_ids=prompt, cache=cache, use_cache=True)
            chain = model(input_ids=new, cache=cache, use_cache=True).logits  # causal mask, 4 rows
            cache.crop(-4)
            tree = model(input_ids=new, cache=cache, use_cache=True, position_ids=pos, attention_mask=mask).logits
        outs.append((chain, tree))
    assert gqa_calls == [True] * 4  # 2 layers x (chain, tree): the copy-free path, not the fallback
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=1e-5, rtol=1e-5)


@needs_onednn
def test_pass_row_buckets_follow_what_install_does_or_will_do():
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    assert fast_linear.pass_row_buckets(model) == fast_linear.PACK_BUCKETS  # will be packed
    fast_linear.install(model, model[1], packed=False)
    assert fast_linear.pass_row_buckets(model) == ()  # installed without packing: rows run as they come
    other = nn.Sequential(nn.Linear(16, 32))
    fast_linear.install(other, None)
    assert fast_linear.pass_row_buckets(other) == fast_linear.PACK_BUCKETS
