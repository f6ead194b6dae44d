"""Linear layers for a few rows at a time (a verification pass checks 1 + k tokens, k small).

On CPU, ``F.linear(x, W)`` (``x @ W.T``) for a handful of rows hits slow MKL
paths: the 49152 x 576 lm_head of SmolLM2 costs 11 ms for 1 row and 25-37 ms for
2-3 rows (1 thread; docs/benchmarks.md at 53c478e). Two faster forms, chosen by row count:

- ``(W @ x.T).T`` costs 6 ms for 1-2 rows; a single row is computed as two
  identical rows, since the matrix-vector path is as slow as ``F.linear``. Which
  row counts take it is a table measured on the whole forward pass
  (``scripts/profile_forward.py``), not guessed: ``WX_ROWS``.
- From a few rows on (verification passes, prefill chunks), oneDNN with the weight
  re-laid out once at load for its kernels ("packed", ``torch.ops.mkldnn``): a
  second copy of every weight, so only for models whose linear weights fit
  ``PACK_MAX_BYTES`` (fp32 on CPU; docs/benchmarks.md at 53c478e, "Forward pass cost").

The result equals ``F.linear`` up to float rounding (a different summation order);
every forward pass of the runtime goes through the same function, so plain and
speculative decoding see the same arithmetic for the same row count.
"""

from __future__ import annotations

import bisect
import logging

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

# Row counts for which (W @ x.T).T beats F.linear on this CPU (MKL, fp32), per kind of layer.
WX_ROWS = {"head": frozenset(range(1, 9)), "layer": frozenset(range(1, 5))}
# With packed weights: row counts that still take (W @ x.T).T (it wins at 1-2 rows); all others are packed.
PACKED_WX_ROWS = {"head": frozenset({1, 2}), "layer": frozenset({1, 2})}
PACK_BATCH_HINT = 8  # oneDNN picks its weight layout for this many rows; any row count works
PACK_MAX_BYTES = 1 << 30  # the packed copy doubles the linear weights' memory: only up to this size
# oneDNN builds and keeps a kernel for every row count it is called with (~0.6 MB each, and
# calls with ever new counts kept growing memory: +3.2 GB for the default model after two
# sweeps of passes of 1..200 tokens, docs/benchmarks.md at 53c478e), so a call's row count comes from a
# fixed set: every count up to 16 (the common verification passes), then steps of at most
# 25%, up to PACK_BLOCK (the prefill chunk); a call is padded with zero rows up to the next
# bucket, and longer inputs go in blocks of PACK_BLOCK. Rows of a linear are independent,
# so the padding changes no output row.
PACK_BLOCK = 512
PACK_BUCKETS = tuple(range(3, 17)) + tuple(
    step * k for step in (4, 8, 16, 32, 64) for k in (5, 6, 7, 8))  # 20, 24, 28, 32, 40, ..., 448, 512
assert PACK_BUCKETS[-1] == PACK_BLOCK
_BUCKET_SET = frozenset(PACK_BUCKETS)


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, rows: frozenset[int],
                packed: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [..., in], weight [out, in].

    ``rows``: row counts taking the W @ x.T path; others take ``packed`` (``weight``
    re-laid out by ``pack``) when given, else ``F.linear``.
    """
    n = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if x.device.type != "cpu":
        return F.linear(x, weight, bias)
    if n not in rows:
        if packed is not None and n:
            return packed_linear(x, packed, bias, n)
        return F.linear(x, weight, bias)
    flat = x.reshape(n, x.shape[-1])  # [n, in]
    if n == 1:  # a matrix-vector product is as slow as F.linear; two equal rows take the fast path
        flat = torch.cat([flat, flat])  # a real copy: an expanded (stride-0) operand is slow in MKL
    out = torch.mm(weight, flat.T).T[:n]  # [n, out]
    if bias is not None:
        out = out + bias
    return out.contiguous().reshape(*x.shape[:-1], weight.shape[0])


def onednn_linear(*args):  # torch.ops.mkldnn._linear_pointwise, by a name tests can watch
    return torch.ops.mkldnn._linear_pointwise(*args)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, n: int) -> torch.Tensor:
    """oneDNN's linear on ``packed`` for x [..., in] holding ``n`` rows, called only with row
    counts from ``PACK_BUCKETS`` (blocks of ``PACK_BLOCK``, the last one zero-padded)."""
    if n in _BUCKET_SET:  # one call, as it comes (most passes)
        return onednn_linear(x, packed, bias, "none", [], "")
    flat = x.reshape(n, x.shape[-1])  # [n, in]
    outs = []
    for start in range(0, n, PACK_BLOCK):
        block = flat[start: start + PACK_BLOCK]  # [m, in]
        m = block.shape[0]
        size = PACK_BUCKETS[bisect.bisect_left(PACK_BUCKETS, m)]
        if size > m:
            block = torch.cat([block, block.new_zeros(size - m, block.shape[1])])  # [size, in]
        # [1, size, in], as the engine's own calls come: one kernel per row count, not two
        outs.append(onednn_linear(block[None], packed, bias, "none", [], "")[0, :m])
    out = outs[0] if len(outs) == 1 else torch.cat(outs)  # [n, out]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def can_pack(weights: list[torch.Tensor]) -> bool:
    """Whether these weights get a packed copy: fp32 on CPU, oneDNN present, within PACK_MAX_BYTES."""
    if not weights or not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
        return False
    return sum(w.numel() * w.element_size() for w in weights) <= PACK_MAX_BYTES


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] re-laid out for oneDNN's linear (an opaque tensor, a copy)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_BATCH_HINT)


class FastLinear(nn.Linear):
    """An ``nn.Linear`` (same parameters, shared, not copied) whose forward is ``linear_rows``."""

    kind: str = "layer"
    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if self.packed is not None:
            return linear_rows(x, self.weight, self.bias, PACKED_WX_ROWS[self.kind], self.packed)
        return linear_rows(x, self.weight, self.bias, WX_ROWS[self.kind])


def packed_bytes(model: nn.Module) -> int:
    """Bytes held by the packed weight copies ``install`` made (0 when none): memory on top of the model."""
    return sum(m.packed.numel() * m.packed.element_size() for m in model.modules()
               if getattr(m, "packed", None) is not None)


def pass_row_buckets(model: nn.Module) -> tuple[int, ...]:
    """The row counts a pass of 3+ tokens is padded to (``PACK_BUCKETS``) when the model's
    linears are, or will be, packed by ``install``; () when they run as they come."""
    if any(isinstance(m, FastLinear) for m in model.modules()):  # installed: what it did
        return PACK_BUCKETS if packed_bytes(model) else ()
    return PACK_BUCKETS if can_pack([m.weight for m in model.modules() if type(m) is nn.Linear]) else ()


def install(model: nn.Module, head: nn.Module | None, packed: bool = True) -> int:
    """Turn the model's ``nn.Linear`` modules into ``FastLinear`` in place (class swap, weights untouched).

    ``head`` is the lm_head (kind "head"); all others are kind "layer". ``packed``:
    also give each a packed copy of its weight where ``can_pack`` allows (if packing
    fails, none is packed). Returns how many were converted.
    """
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    for module in linears:
        module.__class__ = FastLinear
        module.kind = "head" if module is head else "layer"
    if packed and can_pack([m.weight for m in linears]):
        try:
            with torch.no_grad():
                copies = [pack(m.weight) for m in linears]
        except RuntimeError as exc:  # an unusual build: the unpacked paths are exact too
            log.warning("oneDNN weight packing failed (%s); using the unpacked linears", exc)
        else:
            for module, copy in zip(linears, copies):
                module.packed = copy
    return len(linears)
