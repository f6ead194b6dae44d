"""Pure acceptance rules: worked examples and distribution tests (chi-square)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from daemon.acceptance import greedy_accept, plain_sample, sample_accept, sample_siblings, target_probs


def test_greedy_worked_examples():
    assert greedy_accept([7, 8, 9], [7, 8, 4, 5]) == (2, 4)
    assert greedy_accept([7, 8, 9], [7, 8, 9, 5]) == (3, 5)
    assert greedy_accept([7, 8, 9], [1, 8, 9, 5]) == (0, 1)
    assert greedy_accept([], [3]) == (0, 3)


def test_target_probs_top_p_keeps_crossing_token():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    p = target_probs(logits, 1.0, top_p=0.7)
    assert torch.allclose(p, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(target_probs(logits, 1.0), torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=1e-6)


P = torch.tensor([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])  # a tiny vocabulary of 6 tokens
N = 20000


def _chi2(samples, p):
    counts = np.bincount(samples, minlength=len(p))
    pd = p.double().numpy()
    expected = pd / pd.sum() * len(samples)
    keep = expected > 0
    assert counts[~keep].sum() == 0, "sampled a token of probability 0"
    return chisquare(counts[keep], expected[keep]).pvalue


@pytest.mark.parametrize("candidates", [[], [3], [1, 3], [0, 2, 5], [4, 1, 3, 0, 2]])
def test_siblings_are_distributed_as_p(candidates):
    gen = torch.Generator().manual_seed(1)
    samples = [sample_siblings(candidates, P, gen)[1] for _ in range(N)]
    assert _chi2(samples, P) > 1e-3


def test_sibling_acceptance_rate_is_p_of_candidate():
    gen = torch.Generator().manual_seed(2)
    hits = sum(sample_siblings([1], P, gen)[0] == 0 for _ in range(N))
    assert abs(hits / N - 0.3) < 0.02


def test_chain_is_distributed_as_sequential_sampling():
    """Two positions: a draft chain verified by sample_accept yields the joint p(x0) p(x1)."""
    gen = torch.Generator().manual_seed(3)
    p2 = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.2, 0.1])
    probs = torch.stack([P, p2, P])  # row 1 does not depend on x0 here: a product distribution
    pairs = []
    for _ in range(N):
        n, tok = sample_accept([3, 0], probs, gen)
        if n == 0:
            first = tok
            second = plain_sample(p2, gen)  # the next pass would draw the second token from p2
        else:
            first = 3
            second = tok if n == 1 else 0
        pairs.append(first * 6 + second)
    joint = (P[:, None] * p2[None, :]).reshape(-1)
    assert _chi2(pairs, joint) > 1e-3


def test_plain_sampling_matches_p():
    gen = torch.Generator().manual_seed(4)
    assert _chi2([plain_sample(P, gen) for _ in range(N)], P) > 1e-3


def test_chi2_detects_a_wrong_rule():
    """The test has power: accepting a draft with probability 1/2 instead of p(x) is caught."""
    gen = torch.Generator().manual_seed(5)
    samples = []
    for _ in range(N):
        if float(torch.rand((), generator=gen)) < 0.5:
            samples.append(3)
        else:
            samples.append(plain_sample(P, gen))
    assert _chi2(samples, P) < 1e-6


def test_rejecting_every_token_of_the_support_falls_back_to_p(monkeypatch):
    p = torch.softmax(torch.randn(5, generator=torch.Generator().manual_seed(0)), 0)  # [5]
    left = float(p.sum()) - sum(float(x) for x in p)
    assert left > 1e-12  # the premise: float bookkeeping leaves mass where the residual has none
    # every draw is the largest float32 below 1, so all five candidates are rejected
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(1 - 2 ** -24))
    idx, token = sample_siblings(range(5), p, torch.Generator().manual_seed(1))
    assert idx == -1 and 0 <= token < 5
