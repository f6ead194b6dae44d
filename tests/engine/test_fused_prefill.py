"""The prompt's last prefill piece runs in the first decoding pass (``prefill(..., fuse=True)``).

Output must not change: greedy tokens equal plain decoding's with the whole prompt
prefilled first, for chain drafts (fused), tree drafts (the piece is prefilled apart
first) and no draft; and a fused request runs one forward pass fewer.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy
from ngramd.daemon.engine.loop import generate, prefill
from ngramd.daemon.runtime.kv_cache import KVCache
from ngramd.daemon.engine.proposer import NullProposer
from ngramd.daemon.protocol.requests import GenerationStats, SamplingParams
from ngramd.daemon.engine.stops import StopChecker, StopConfig

SOURCE = Path(__file__).resolve().parents[2] / "daemon" / "engine" / "loop.py"
MAX = 16
CHUNK = 128


@pytest.fixture(scope="module")
def prompt(tiny):
    return tiny.encode(SOURCE.read_text())[:300]


@pytest.fixture(scope="module")
def reference(tiny, prompt):
    """Plain greedy output with the whole prompt prefilled first (the unfused way)."""
    kv = KVCache()
    prefill(tiny, kv, prompt, GenerationStats(), None, CHUNK)
    stopper = StopChecker(StopConfig(max_tokens=MAX), tiny.token_bytes)
    return generate(tiny, kv, prompt, NullProposer(), None, stopper, SamplingParams(), None,
                    GenerationStats()).tokens


class CountingRuntime:
    """The tiny runtime, counting its forward passes."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.passes = 0

    def forward_pass(self, *args, **kwargs):
        self.passes += 1
        return self.runtime.forward_pass(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.runtime, name)


def _run(tiny, prompt, proposer, fuse, kv=None, sampling=SamplingParams(), cancel=None):
    counting = CountingRuntime(tiny)
    kv = kv if kv is not None else KVCache()
    stats = GenerationStats()
    assert prefill(counting, kv, prompt, stats, None, CHUNK, fuse=fuse)
    policy = None if isinstance(proposer, NullProposer) else DraftPolicy(
        CostModel(), AdaptiveConfig(fixed_k=64, max_width=3))
    stopper = StopChecker(StopConfig(max_tokens=MAX), tiny.token_bytes)
    out = generate(counting, kv, prompt, proposer, policy, stopper, sampling, None, stats, cancel)
    return out, stats, kv, counting.passes


def test_fuse_leaves_the_last_piece_to_the_first_pass(tiny, prompt):
    kv = KVCache()
    stats = GenerationStats()
    prefill(tiny, kv, prompt, stats, None, CHUNK, fuse=True)
    assert len(kv) == 256 and stats.prefill_tokens == 256  # 299 to cover: 2 full chunks, 43 left
    # a warm cache: only the uncached tail is left, whole
    kv = KVCache()
    prefill(tiny, kv, prompt[:291], GenerationStats(), None, CHUNK)
    stats = GenerationStats()
    prefill(tiny, kv, prompt, stats, None, CHUNK, fuse=True)
    assert len(kv) == 290 and stats.reused_tokens == 290 and stats.prefill_tokens == 0
    # a tail that fills whole chunks leaves the last one
    kv = KVCache()
    prefill(tiny, kv, prompt[:257], GenerationStats(), None, CHUNK, fuse=True)
    assert len(kv) == 128
    # all cached: nothing to leave
    kv = KVCache()
    prefill(tiny, kv, prompt, GenerationStats(), None, CHUNK)
    prefill(tiny, kv, prompt, GenerationStats(), None, CHUNK, fuse=True)
    assert len(kv) == len(prompt) - 1


def _truth(prompt, reference, context):
    return list(reference[len(context) - len(prompt):])


DRAFTS = {
    "none": None,
    "chain_right": lambda truth: [truth[:6]],
    "chain_wrong": lambda truth: [[(t + 1) % 1000 + 5 for t in truth[:6]]],
    "tree": lambda truth: [[(t + 1) % 1000 + 5 for t in truth[:3]], truth[:5]],
}


@pytest.mark.parametrize("draft", sorted(DRAFTS))
def test_fused_output_equals_plain_and_saves_a_pass(tiny, prompt, reference, scripted, draft):
    def proposer():
        if DRAFTS[draft] is None:
            return NullProposer()
        return scripted(lambda ctx: DRAFTS[draft](_truth(prompt, reference, ctx.tolist())))

    fused, fused_stats, kv, fused_passes = _run(tiny, prompt, proposer(), fuse=True)
    apart, apart_stats, _, apart_passes = _run(tiny, prompt, proposer(), fuse=False)
    assert fused.tokens == reference == apart.tokens
    # the cache covers the context but the pending token, as after any request
    assert kv.tokens[: len(prompt) + MAX - 1] == prompt + reference[: MAX - 1]
    assert fused_stats.prefill_tokens == apart_stats.prefill_tokens == len(prompt) - 1
    assert fused_stats.forward_passes == apart_stats.forward_passes
    # a tree's first pass needs the piece prefilled apart: no pass saved
    assert fused_passes == apart_passes - (draft != "tree")


def test_fused_first_pass_on_a_warm_cache(tiny, prompt, reference, scripted):
    """A prepared request: most of the prompt cached, a short tail, then a chain draft."""
    kv = KVCache()
    prefill(tiny, kv, prompt[:280], GenerationStats(), None, CHUNK)
    proposer = scripted(lambda ctx: [_truth(prompt, reference, ctx.tolist())[:8]])
    out, stats, _, passes = _run(tiny, prompt, proposer, fuse=True, kv=kv)
    assert out.tokens == reference
    assert stats.reused_tokens == 279 and stats.prefill_tokens == len(prompt) - 1 - 279
    assert passes == stats.forward_passes  # no prefill pass of its own


def test_seeded_sampling_is_the_same_fused_or_apart(tiny, prompt, reference, scripted):
    sampling = SamplingParams(temperature=0.8, seed=7)
    plain, _, _, _ = _run(tiny, prompt, NullProposer(), fuse=False, sampling=sampling)
    proposer = scripted(lambda ctx: [_truth(prompt, reference, ctx.tolist())[:6]])
    fused, _, _, _ = _run(tiny, prompt, proposer, fuse=True, sampling=sampling)
    assert fused.tokens == plain.tokens


def test_a_fused_request_cancelled_before_its_first_pass_keeps_the_prefilled_prefix(tiny, prompt, reference):
    cancel = threading.Event()
    cancel.set()
    out, _, kv, passes = _run(tiny, prompt, NullProposer(), fuse=True, cancel=cancel)
    assert out.cancelled and out.tokens == []
    assert kv.tokens == prompt[:256] and passes == 2  # the two full chunks, nothing of the tail
    # the next request reuses them and runs the rest in its first pass
    again, stats, _, _ = _run(tiny, prompt, NullProposer(), fuse=True, kv=kv)
    assert again.tokens == reference and stats.reused_tokens == 256
