"""What running the linears on 4-bit weights would buy (an experiment, not a code path).

The embedded model ships as a 4-bit GGUF and runs de-quantized to fp32. torch's CPU int4
kernel (``torch._weight_int4pack_mm_for_cpu``, groups of 32, bf16 activations) reads an
eighth of those bytes. This times verify passes of 1, 4, 16 and 64 new tokens after 700
tokens of context (medians of --rounds): the runtime as it runs (fp32, pre-packed oneDNN
weights), then every linear re-quantized to int4 (min/max per group of 32) with the rest
of the model in bf16. Timing only: the re-quantized weights are near, not equal to, the
file's, and bf16 activations change the logits. docs/benchmarks.md ("Tried, not adopted:
int4 weights") records a run.

    .venv/bin/python scripts/measure_int4_weights.py [--rounds 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from daemon.kv_cache import InPlaceCache
from daemon.model import ModelRuntime, load_runtime

GROUP = 32  # weights per scale and zero, as in the GGUF's 4-bit blocks


class Int4Linear(nn.Module):
    """``linear``'s weight as int4 (asymmetric, per group of ``GROUP`` inputs); bf16 in and out."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()  # [out, in]
        n, k = w.shape
        groups = w.reshape(n, k // GROUP, GROUP)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp_min(1e-8)
        q = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        # the kernel computes (q - 8) * scale + zero
        zero = low + 8 * scale
        self.scales_and_zeros = torch.stack([scale[..., 0], zero[..., 0]], -1).transpose(0, 1) \
            .contiguous().to(torch.bfloat16)  # [in / GROUP, out, 2]
        self.out_features = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        y = torch._weight_int4pack_mm_for_cpu(rows, self.packed, GROUP, self.scales_and_zeros)
        return y.reshape(*x.shape[:-1], self.out_features)


def to_int4(runtime: ModelRuntime) -> None:
    """Every nn.Linear of ``runtime``'s model as Int4Linear, the rest in bf16 (fast paths off)."""
    runtime.fast_paths = False
    for module in list(runtime.model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, Int4Linear(child))
    runtime.model.to(torch.bfloat16)
    runtime.dtype = torch.bfloat16


def pass_ms(runtime: ModelRuntime, rounds: int) -> dict[int, float]:
    """Median ms of a verify pass of n new tokens after 700 cached ones, for n in 1, 4, 16, 64."""
    cache = InPlaceCache()
    runtime.forward(torch.randint(100, 40000, (1, 700)), cache, keep_last=1)

    def one(n: int) -> float:
        x = torch.randint(100, 40000, (1, n))
        t0 = time.perf_counter()
        runtime.forward(x, cache, keep_last=n)
        ms = (time.perf_counter() - t0) * 1000
        cache.crop(-n)
        return ms

    for n in (64, 1, 64, 1):  # warm up
        one(n)
    return {n: statistics.median(one(n) for _ in range(rounds)) for n in (1, 4, 16, 64)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        fp32 = pass_ms(load_runtime(None, device="cpu"), args.rounds)
        runtime = load_runtime(None, device="cpu")
        to_int4(runtime)
        int4 = pass_ms(runtime, args.rounds)
    print(f"{'new tokens':>10} {'fp32 ms':>8} {'int4+bf16 ms':>12}")
    for n in fp32:
        print(f"{n:>10} {fp32[n]:>8.1f} {int4[n]:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
