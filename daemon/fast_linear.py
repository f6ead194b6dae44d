"""Linear layers for a few rows at a time (a verification pass checks 1 + k tokens, k small).

On CPU, ``F.linear(x, W)`` (``x @ W.T``) for a handful of rows hits slow MKL
paths: the 49152 x 576 lm_head of SmolLM2 costs 11 ms for 1 row and 25-37 ms for
2-3 rows (1 thread; docs/benchmarks.md). The same product written as
``(W @ x.T).T`` costs 6 ms for 1-2 rows; a single row is computed as two
identical rows, since the matrix-vector path is as slow as ``F.linear``. Which rows counts use
the rewritten form is a table measured on the whole forward pass
(``scripts/profile_forward.py``), not guessed: ``WX_ROWS``.

The result equals ``F.linear`` up to float rounding (a different summation order);
every forward pass of the runtime goes through the same function, so plain and
speculative decoding see the same arithmetic for the same row count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Row counts for which (W @ x.T).T beats F.linear on this CPU (MKL, fp32), per kind of layer.
WX_ROWS = {"head": frozenset(range(1, 9)), "layer": frozenset(range(1, 5))}


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, rows: frozenset[int]
                ) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [..., in], weight [out, in]; ``rows``: row counts taking the W @ x.T path."""
    n = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if n not in rows or x.device.type != "cpu":
        return F.linear(x, weight, bias)
    flat = x.reshape(n, x.shape[-1])  # [n, in]
    if n == 1:  # a matrix-vector product is as slow as F.linear; two equal rows take the fast path
        flat = torch.cat([flat, flat])  # a real copy: an expanded (stride-0) operand is slow in MKL
    out = torch.mm(weight, flat.T).T[:n]  # [n, out]
    if bias is not None:
        out = out + bias
    return out.contiguous().reshape(*x.shape[:-1], weight.shape[0])


class FastLinear(nn.Linear):
    """An ``nn.Linear`` (same parameters, shared, not copied) whose forward is ``linear_rows``."""

    kind: str = "layer"

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return linear_rows(x, self.weight, self.bias, WX_ROWS[self.kind])


def install(model: nn.Module, head: nn.Module | None) -> int:
    """Turn the model's ``nn.Linear`` modules into ``FastLinear`` in place (class swap, weights untouched).

    ``head`` is the lm_head (kind "head"); all others are kind "layer". Returns how many were converted.
    """
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = FastLinear
            module.kind = "head" if module is head else "layer"
            count += 1
    return count
