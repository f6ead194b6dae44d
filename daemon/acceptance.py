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
token is distributed exactly as p.

Worked example (greedy). Draft [7, 8, 9]; target argmax per row [7, 8, 4, 5].
Rows 0 and 1 agree with the draft, row 2 says 4, not 9: accepted = 2, the
correction is 4, the pass emits [7, 8, 4]. With argmax [7, 8, 9, 5] all three
are accepted and the bonus 5 is emitted: [7, 8, 9, 5].

Worked example (sampling). p = {3: 0.5, 4: 0.3, 5: 0.2}, siblings [3, 4].
Try 3: accept with probability 0.5. If rejected the residual is {4: 0.6, 5: 0.4};
try 4: accept with probability 0.6; if rejected, emit 5. P(3) = 0.5,
P(4) = 0.5 * 0.6 = 0.3, P(5) = 0.5 * 0.4 = 0.2 — exactly p.
"""

from __future__ import annotations

from typing import Sequence

import torch


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


def target_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The sampling distribution p for each row: softmax(logits / T), nucleus-truncated.

    ``logits``: [n, vocab] (or [vocab]); returns the same shape, rows summing to 1.
    Plain and speculative sampling must both draw from exactly this p.
    """
    assert temperature > 0.0
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        cum = torch.cumsum(sorted_p, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (the crossing token included)
        drop_sorted = (cum - sorted_p) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_siblings(candidates: Sequence[int], p: torch.Tensor, generator: torch.Generator | None
                    ) -> tuple[int, int]:
    """Verify sibling point-mass candidates at one position against p (``p``: [vocab]).

    Returns (index of the accepted candidate or -1, emitted token). Candidates are
    tried in order; each is accepted with its probability under the current
    residual, and a rejected one is removed from the residual (renormalised).
    """
    assert p.dim() == 1
    residual = p.clone()
    mass = float(residual.sum())
    for i, x in enumerate(candidates):
        x = int(x)
        px = float(residual[x]) / mass if mass > 0 else 0.0
        if px > 0.0 and float(torch.rand((), generator=generator)) < px:
            return i, x
        mass -= float(residual[x])
        residual[x] = 0.0
    # every token of p's support was a rejected candidate (cannot happen with exact p): the
    # float bookkeeping in ``mass`` may still be ~1e-8 then, so look at the residual itself
    if float(residual.sum()) <= 0.0:
        residual = p.clone()
    token = int(torch.multinomial(residual, 1, generator=generator))
    return -1, token


def sample_accept(draft: Sequence[int], probs: torch.Tensor, generator: torch.Generator | None
                  ) -> tuple[int, int]:
    """Sampling verification of a chain. ``probs``: [k+1, vocab] from ``target_probs``.

    Returns (num_accepted, next_token) as ``greedy_accept`` does.
    """
    assert probs.dim() == 2 and probs.shape[0] == len(draft) + 1, (probs.shape, len(draft))
    for i, x in enumerate(draft):
        idx, token = sample_siblings([x], probs[i], generator)
        if idx < 0:
            return i, token
    token = int(torch.multinomial(probs[len(draft)], 1, generator=generator))
    return len(draft), token


def plain_sample(p: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from p (``p``: [vocab]); plain decoding's step."""
    return int(torch.multinomial(p, 1, generator=generator))
