"""What a bf16 prefill would buy, and what it would change (an experiment, not a code path).

Times one 512-token prefill (last row's logits only) of the embedded model three ways,
min of --rounds: fp32 through ``F.linear``, fp32 through the runtime's fast paths (what
runs: pre-packed oneDNN weights), and bf16 through ``F.linear``; then prints how far
the bf16 last-row logits are from the fp32 ones. docs/benchmarks.md ("Tried, not
adopted: bf16 prefill") records a run.

    .venv/bin/python scripts/measure_bf16_prefill.py [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch
from torch import nn

from daemon import fast_linear
from daemon.model import load_runtime

ROOT = Path(__file__).resolve().parents[1]


def without_fast_paths(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose FastLinear layers are plain nn.Linear over the same weights."""
    model = copy.deepcopy(model)

    def replace(module: nn.Module) -> None:
        for name, child in list(module.named_children()):
            if isinstance(child, fast_linear.FastLinear):
                linear = nn.Linear(child.weight.shape[1], child.weight.shape[0], bias=child.bias is not None)
                linear.weight = child.weight
                if child.bias is not None:
                    linear.bias = child.bias
                setattr(module, name, linear)
            else:
                replace(child)

    replace(model)
    return model


def last_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:  # ids [1, n] -> [vocab]
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()


def best_ms(model: nn.Module, ids: torch.Tensor, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        last_logits(model, ids)
        times.append(time.perf_counter() - t0)
    return min(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runtime = load_runtime(None, device="cpu")
    ids = torch.tensor([runtime.encode((ROOT / "daemon" / "engine.py").read_text())[:512]])  # [1, 512]
    fp32 = without_fast_paths(runtime.model)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    ms = {name: best_ms(model, ids, args.rounds)
          for name, model in (("fp32 F.linear", fp32), ("fp32 runtime (packed)", runtime.model), ("bf16 F.linear", bf16))}
    print(f"{ids.shape[1]}-token prefill, last row's logits, min of {args.rounds}: "
          + ", ".join(f"{name} {v:.0f} ms" for name, v in ms.items()))
    a, b = last_logits(fp32, ids), last_logits(bf16, ids)
    print(f"bf16 vs fp32 last-row logits: max |difference| {float((a - b).abs().max()):.3g}, "
          f"same top-1: {int(a.argmax()) == int(b.argmax())}")


if __name__ == "__main__":
    main()
