"""Speculative sampling through the whole loop (tiny model) is distributed as plain sampling.

The pure rules are tested on a synthetic p in test_acceptance.py; this test runs
``generate`` itself: prefill, a verification pass over a drafted chain, the
acceptance walk, KV rollback and the next pass. Two tokens are sampled at a low
temperature (so a few outcomes carry most of the mass) many times with a
drafted chain and with no draft; a chi-square test of homogeneity on the joint
outcome (is each token the greedy one) must not tell the two apart, and a deliberately
broken acceptance rule must be told apart (the test has power).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency

import ngramd.daemon.engine.loop as engine
from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy
from ngramd.daemon.engine.loop import generate, prefill
from ngramd.daemon.runtime.kv_cache import KVCache
from ngramd.daemon.engine.proposer import NullProposer
from ngramd.daemon.protocol.requests import GenerationStats, SamplingParams
from ngramd.daemon.engine.stops import StopChecker, StopConfig

pytestmark = pytest.mark.slow

PROMPT = "def add(a, b):\n    return a + b\n"
SAMPLES = 400


@pytest.fixture(scope="module")
def temperature(tiny):
    """The temperature at which the first token's most likely outcome has probability 1/2,
    so that accepting and rejecting the drafted token both happen often (bisection)."""
    prompt = tiny.encode(PROMPT)
    logits = tiny.forward(torch.tensor([prompt]), KVCache().cache)[-1].double()  # [vocab]
    lo, hi = 1e-4, 10.0
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if torch.softmax(logits / mid, -1).max() > 0.5:
            lo = mid
        else:
            hi = mid
    return lo


def _sample_pairs(tiny, proposer, policy, seed, temperature):
    """SAMPLES draws of two tokens; returns (pairs, total drafted tokens)."""
    prompt = tiny.encode(PROMPT)
    kv = KVCache()
    pairs, drafted = [], 0
    for i in range(SAMPLES):
        stats = GenerationStats()
        prefill(tiny, kv, prompt, stats, None, 128)  # reuses the prompt's entries after the first run
        stopper = StopChecker(StopConfig(max_tokens=2), tiny.token_bytes)
        out = generate(tiny, kv, prompt, proposer, policy, stopper,
                       SamplingParams(temperature=temperature, seed=seed * 100_000 + i), None, stats)
        pairs.append(tuple(out.tokens))
        drafted += stats.drafted
    return pairs, drafted


def _top_pair(tiny):
    """The greedy two tokens: the draft most likely to be accepted, so both branches of the rule run."""
    prompt = tiny.encode(PROMPT)
    kv = KVCache()
    prefill(tiny, kv, prompt, GenerationStats(), None, 128)
    out = generate(tiny, kv, prompt, NullProposer(), None, StopChecker(StopConfig(max_tokens=2), tiny.token_bytes),
                   SamplingParams(), None, GenerationStats())
    return out.tokens


def _homogeneity_pvalue(a, b, greedy_pair):
    """Chi-square homogeneity on the outcome (first == greedy first, second == greedy second).

    At this temperature the tail of 49k tokens is broad, so outcomes are bucketed
    by whether each token is the greedy one; rare buckets are pooled."""
    g0, g1 = greedy_pair
    a = [(x[0] == g0, x[1] == g1) for x in a]
    b = [(x[0] == g0, x[1] == g1) for x in b]
    keys = sorted(set(a) | set(b))
    ca, cb = Counter(a), Counter(b)
    table = np.array([[ca[k] for k in keys], [cb[k] for k in keys]])
    # pool rare outcomes so that every expected count is large enough for chi-square
    common = table.sum(axis=0) >= 20
    pooled = np.concatenate([table[:, common], table[:, ~common].sum(axis=1, keepdims=True)], axis=1)
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    return chi2_contingency(pooled).pvalue, pooled


class ChainProposer:
    def __init__(self, tokens):
        from ngramd.index.draft import Branch, Draft, Source

        self.draft = Draft((Branch(tokens=np.array(tokens, dtype=np.int32), count=1, source=Source.BUFFER,
                                   match_len=4),))

    def propose(self, context, k, w):
        return self.draft

    def feedback(self, num_accepted):
        pass


def _policy():
    return DraftPolicy(CostModel(), AdaptiveConfig(fixed_k=8, max_width=1))


@pytest.fixture(scope="module")
def plain_pairs(tiny, temperature):
    pairs, drafted = _sample_pairs(tiny, NullProposer(), None, 1, temperature)
    assert drafted == 0
    return pairs


def test_speculative_sampling_matches_plain_sampling(tiny, plain_pairs, temperature):
    draft = _top_pair(tiny)
    spec, drafted = _sample_pairs(tiny, ChainProposer(draft), _policy(), 2, temperature)
    assert drafted == SAMPLES, "every run verifies one drafted token (max_tokens=2 leaves room for one)"
    pvalue, table = _homogeneity_pvalue(spec, plain_pairs, draft)
    assert table.shape[1] >= 2, f"too few distinct outcomes to compare: {table}"
    assert pvalue > 1e-3, f"speculative and plain sampling differ (p={pvalue:.2e}):\n{table}"


def test_a_wrong_sampling_rule_is_detected(tiny, plain_pairs, temperature, monkeypatch):
    """Taking the most likely token (ignoring the noise) must be caught by the same test."""
    draft = _top_pair(tiny)
    monkeypatch.setattr(engine, "sample_token", lambda p, noise: int(torch.argmax(p)))
    spec, _ = _sample_pairs(tiny, ChainProposer(draft), _policy(), 3, temperature)
    pvalue, table = _homogeneity_pvalue(spec, plain_pairs, draft)
    assert pvalue < 1e-3, f"a broken rule went unnoticed (p={pvalue:.2e}):\n{table}"


class TreeProposer(ChainProposer):
    """Three branches: the greedy continuation, and two that start with other tokens."""

    def __init__(self, branches):
        from ngramd.index.draft import Branch, Draft, Source

        self.draft = Draft(tuple(Branch(tokens=np.array(b, dtype=np.int32), count=1, source=Source.BUFFER,
                                        match_len=4) for b in branches))


@pytest.mark.parametrize("width", [1, 3])
def test_seeded_speculative_sampling_is_token_identical_to_plain_sampling(tiny, temperature, width):
    """The draw at each position depends on the seed, the position and the logits only, so with
    a seed the drafts change nothing: accepted and rejected drafts alike give plain's tokens."""
    prompt = tiny.encode(PROMPT)
    greedy = _greedy(tiny, prompt, 6)
    branches = [greedy] + ([[greedy[0] + 1] + greedy[1:], [greedy[0] + 2]] if width > 1 else [])
    policy = DraftPolicy(CostModel(), AdaptiveConfig(fixed_k=8, max_width=width))
    accepted = rejected = 0
    for seed in range(40):
        runs = []
        for proposer, pol in ((NullProposer(), None), (TreeProposer(branches), policy)):
            kv, stats = KVCache(), GenerationStats()
            prefill(tiny, kv, prompt, stats, None, 128)
            out = generate(tiny, kv, prompt, proposer, pol, StopChecker(StopConfig(max_tokens=6), tiny.token_bytes),
                           SamplingParams(temperature=temperature, top_p=0.9, seed=seed), None, stats)
            runs.append(out.tokens)
        assert runs[0] == runs[1], f"seed {seed}: plain {runs[0]} speculative {runs[1]}"
        accepted += stats.accepted
        rejected += stats.drafted - stats.accepted
    assert accepted > 0 and rejected > 0, (accepted, rejected)  # both branches of the rule ran


def _greedy(tiny, prompt, n):
    kv = KVCache()
    prefill(tiny, kv, prompt, GenerationStats(), None, 128)
    return generate(tiny, kv, prompt, NullProposer(), None, StopChecker(StopConfig(max_tokens=n), tiny.token_bytes),
                    SamplingParams(), None, GenerationStats()).tokens
