"""Acceptance rules of speculative decoding, as pure functions.

Vocabulary: the *target* is the model being served; a *draft* token is a
guess put to it for verification (here from an n-gram lookup, so the draft
distribution q is a point mass: q(x) = 1). One forward pass over the pending
token and k draft tokens yields k+1 rows of target logits; row i is the
target's distribution for the token after draft[:i]. *Accepted* draft tokens
are kept; the first rejected position yields the target's own token instead
(a *correction*); a fully accepted draft yields one *bonus* token from the
last row. Every pass therefore emits between 1 and k+1 tokens.

Leviathan, Kalman, Matias 2022, "Fast Inference from Transformers via
Speculative Decoding", Algorithm 1: accept x ~ q with probability
min(1, p(x)/q(x)), else sample from norm(max(0, p - q)). With q a point mass
at x this is: accept x with probability p(x); on rejection sample from p with
x removed and renormalised. Several sibling candidates x1, x2, ... at one
position (a tree draft) are tried in turn, each against the residual left by
the previous rejections (SpecInfer, Miao et al. 2023). Either way the emitted
token is distributed exactly as p. This module realises that rule by a seeded
Gumbel-max draw (below), which accepts x with probability p(x) and leaves the
residual on rejection, for one candidate or several.

Worked example (greedy). Draft [7, 8, 9]; target argmax per row [7, 8, 4, 5].
Rows 0 and 1 agree with the draft, row 2 says 4, not 9: accepted = 2, the
correction is 4, the pass emits [7, 8, 4]. With argmax [7, 8, 9, 5] all three
are accepted and the bonus 5 is emitted: [7, 8, 9, 5].

How sampling draws (the Gumbel-max trick): the token at position t of a request
seeded s is argmax_i(log p_i + G_i), with G the Gumbel(0, 1) noise that
(s, t) alone determines (``position_noise``). Over the noise that token is
distributed exactly as p (Gumbel 1954; Maddison et al. 2014), so verifying a
drafted x means checking whether x is that token: it is with probability p(x),
and when it is not, the token drawn is distributed as p with x removed and
renormalised, Algorithm 1's residual; likewise for several siblings. Unlike a
rule that draws a fresh random number per tried candidate, the token depends on
the seed, the position and p only, not on the drafts: with a seed, speculative
sampling is token-identical to plain sampling (as greedy decoding is), and it
reproduces whatever the index or the KV cache held.

Worked example (sampling). p = {3: 0.5, 4: 0.3, 5: 0.2}, noise G = {3: -0.2,
4: 0.9, 5: 0.1}: log p + G = {3: -0.89, 4: -0.30, 5: -1.51}, so the token is 4.
A draft [3] is rejected and 4 emitted; a draft [4] is accepted; plain sampling
emits 4 as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

    from ngramd.daemon.runtime.base import Logits

# Sampling imports torch where it runs (``import torch`` in each function): a greedy request on
# llama.cpp, whose logits are numpy, never does, and the daemon starts a second sooner.


def greedy_accept(draft: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy verification of a chain.

    ``target_argmax``: [k+1] the target's argmax for each row (row i follows draft[:i]).
    Returns (num_accepted, next_token): next_token is the correction at the first
    mismatch, or the bonus token when all of ``draft`` is accepted.
    """
    assert len(target_argmax) == len(draft) + 1, (len(target_argmax), len(draft))
    for i, x in enumerate(draft):
        if int(target_argmax[i]) != int(x):
            return i, int(target_argmax[i])
    return len(draft), int(target_argmax[len(draft)])


def target_probs(logits: Logits, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The sampling distribution p for each row: softmax(logits / T), nucleus-truncated.

    ``logits``: [n, vocab] (or [vocab]); returns the same shape, rows summing to 1.
    Plain and speculative sampling must both draw from exactly this p.
    """
    import torch

    assert temperature > 0.0
    probs = torch.softmax(torch.as_tensor(logits).float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (the crossing token included)
        drop_sorted = (cum - sorted_p) >= top_p
        drop_sorted[..., 0] = False  # the likeliest token always: a top_p below float32's range rounds to 0
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def position_noise(seed: int, position: int, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise [vocab] (float64) for the token at ``position`` (0 = the first
    generated) of a request seeded ``seed``; the same everywhere for the same arguments."""
    import torch

    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, position])))
    u = np.maximum(rng.random(vocab), np.finfo(np.float64).tiny)  # [0, 1) -> (0, 1): no log(0)
    return torch.from_numpy(-np.log(-np.log(u)))


def sample_token(p: torch.Tensor, noise: torch.Tensor) -> int:
    """The token argmax(log p + noise) (``p``: [vocab] on any device, ``noise``: [vocab] from
    ``position_noise``, on the CPU): distributed as p over the noise; a token of probability 0
    never. Computed on the CPU in float64, so a seed draws alike on every device."""
    import torch

    assert p.dim() == 1 and p.shape == noise.shape, (p.shape, noise.shape)
    return int(torch.argmax(torch.log(p.detach().to("cpu", torch.float64)) + noise))
