#!/usr/bin/env python
"""How far a k-token verification pass's logits are from k one-token passes (float rounding).

Greedy exactness rests on the argmax of both being the same token; they can differ only
where the two best logits are closer than this drift. For each file and cursor, the model
reads ``--context`` tokens, then the next ``--k`` tokens once as one pass and once one at a
time; prints the largest absolute logit difference, and the smallest gap between the two
best logits seen, over all positions.

    .venv/bin/python scripts/measure_pass_drift.py [--model M] [--k 8] [--files a.py,b.py]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from ngramd.daemon.runtime.kv_cache import KVCache  # noqa: E402
from ngramd.daemon.runtime.loading import load_runtime  # noqa: E402

DEFAULT_FILES = ("daemon/engine/loop.py", "index/store.py", "daemon/engine/completer.py", "lsp/server.py")


def drift_at(rt, ids: list[int], k: int) -> tuple[float, float, bool]:
    """(max |logit difference|, min top-2 gap, whether the argmax agrees at every position)
    over the k positions after ``ids[:-k]``.

    The inputs are made on the runtime's device: ``ModelRuntime.forward`` moves nothing (the
    engine makes its inputs there), and a CUDA model given CPU ids fails."""
    def on_device(tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], device=rt.device)

    ctx, new = ids[:-k], on_device(ids[-k:])
    batched, single = KVCache(), KVCache()
    for kv in (batched, single):
        rt.forward(on_device(ctx), kv.cache, keep_last=1)
    one_pass = rt.forward(new, batched.cache)  # [k, vocab]
    step = torch.cat([rt.forward(new[:, i:i + 1], single.cache) for i in range(k)])  # [k, vocab]
    top2 = step.topk(2, dim=-1).values  # [k, 2]
    same_argmax = bool((one_pass.argmax(dim=-1) == step.argmax(dim=-1)).all())
    return float((one_pass - step).abs().max()), float((top2[:, 0] - top2[:, 1]).min()), same_argmax


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--context", type=int, default=600)
    ap.add_argument("--cursors", type=int, default=4, help="cursor positions per file")
    ap.add_argument("--files", default=",".join(DEFAULT_FILES))
    ap.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"),
                    help="where to measure (auto/cuda: on a GPU, in fp32, as the daemon runs there)")
    args = ap.parse_args()
    rt = load_runtime(args.model, device=args.device)
    worst, closest, n, disagreements = 0.0, float("inf"), 0, 0
    for name in args.files.split(","):
        ids = rt.encode((ROOT / name).read_text())
        span = len(ids) - args.context - args.k
        for c in range(args.cursors):
            end = args.context + args.k + span * (c + 1) // (args.cursors + 1)
            d, gap, same = drift_at(rt, ids[end - args.context - args.k:end], args.k)
            worst, closest, n, disagreements = max(worst, d), min(closest, gap), n + 1, disagreements + (not same)
            print(f"{name} @token {end}: max |diff| {d:.2e}, min top-2 gap {gap:.2e}"
                  + ("" if same else ", ARGMAX DIFFERS"))
    print(f"{n} positions x {args.k} tokens: max |logit difference| {worst:.2e}; "
          f"smallest top-2 gap {closest:.2e}; argmax differs at {disagreements} of {n} positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
