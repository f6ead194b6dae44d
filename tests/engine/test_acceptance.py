"""Pure acceptance rules: worked examples and distribution tests (chi-square)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import chisquare

from ngramd.daemon.engine.acceptance import greedy_accept, position_noise, sample_token, target_probs


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


def test_target_probs_keeps_the_likeliest_token_however_small_top_p():
    """A top_p below float32's smallest number compared as 0: every token was dropped, the
    row became NaN and token 0 (end of text) was drawn, an empty answer called finished."""
    for top_p in (1e-300, 1e-46, 1e-30):
        p = target_probs(torch.tensor([[3.0, 1.0, 0.5], [0.1, 2.0, 0.3]]), 1.0, top_p)
        assert torch.equal(p, torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])), top_p


def test_sampling_worked_example():
    """The module docstring's example: log p + G picks 4."""
    p = torch.tensor([0.0, 0.0, 0.0, 0.5, 0.3, 0.2])
    noise = torch.tensor([0.0, 0.0, 0.0, -0.2, 0.9, 0.1], dtype=torch.float64)
    assert sample_token(p, noise) == 4


P = torch.tensor([0.05, 0.3, 0.1, 0.25, 0.2, 0.1])  # a tiny vocabulary of 6 tokens
N = 20000


def _draw(p: torch.Tensor, seed: int, position: int) -> int:
    return sample_token(p, position_noise(seed, position, p.shape[-1]))


def _chi2(samples, p):
    counts = np.bincount(samples, minlength=len(p))
    pd = p.double().numpy()
    expected = pd / pd.sum() * len(samples)
    keep = expected > 0
    assert counts[~keep].sum() == 0, "sampled a token of probability 0"
    return chisquare(counts[keep], expected[keep]).pvalue


def test_draws_over_positions_are_distributed_as_p():
    assert _chi2([_draw(P, 1, t) for t in range(N)], P) > 1e-3


def test_draws_over_seeds_are_distributed_as_p():
    assert _chi2([_draw(P, seed, 0) for seed in range(N)], P) > 1e-3


def test_the_draw_depends_on_seed_position_and_p_only():
    assert torch.equal(position_noise(7, 3, 50), position_noise(7, 3, 50))
    assert not torch.equal(position_noise(7, 3, 50), position_noise(7, 4, 50))
    assert not torch.equal(position_noise(7, 3, 50), position_noise(8, 3, 50))
    assert [_draw(P, 7, t) for t in range(100)] == [_draw(P, 7, t) for t in range(100)]


def test_a_drafted_token_is_accepted_with_probability_p_and_a_rejection_leaves_the_residual():
    """Verifying draft x means checking whether the draw is x: accepted with probability p(x);
    the draws that reject it are distributed as p with x removed, renormalised."""
    draws = [_draw(P, 2, t) for t in range(N)]
    hits = sum(d == 1 for d in draws)
    assert abs(hits / N - 0.3) < 0.02
    residual = P.clone()
    residual[1] = 0.0
    assert _chi2([d for d in draws if d != 1], residual) > 1e-3


def test_chain_is_distributed_as_sequential_sampling():
    """Two positions of one request: the joint is p(x0) p(x1) (the noises are independent)."""
    p2 = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.2, 0.1])
    pairs = [_draw(P, seed, 0) * 6 + _draw(p2, seed, 1) for seed in range(N)]
    joint = (P[:, None] * p2[None, :]).reshape(-1)
    assert _chi2(pairs, joint) > 1e-3


def test_a_token_of_probability_zero_is_never_drawn():
    p = torch.tensor([0.0, 0.999999, 0.0, 1e-6])
    draws = {_draw(p, 3, t) for t in range(2000)}
    assert draws <= {1, 3} and 1 in draws


def test_chi2_detects_a_wrong_rule():
    """The test has power: accepting a draft with probability 1/2 instead of p(x) is caught."""
    gen = torch.Generator().manual_seed(5)
    samples = []
    for t in range(N):
        if float(torch.rand((), generator=gen)) < 0.5:
            samples.append(3)
        else:
            samples.append(_draw(P, 5, t))
    assert _chi2(samples, P) < 1e-6


def test_probabilities_on_another_device_are_drawn_on_the_cpu():
    """``p`` lives on the model's device (cuda on a GPU); the noise on the CPU: the draw moves p."""
    p = P.to("meta")  # a device with no data: adding it to CPU noise fails unless p is moved first
    try:
        sample_token(p, position_noise(1, 0, 6))
    except NotImplementedError:  # "Cannot copy out of meta tensor": it was moved, not added
        return
    raise AssertionError("a meta tensor was drawn from: p was not moved to the CPU")
