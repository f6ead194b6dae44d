#!/usr/bin/env python
"""Engine figures (docs/benchmarks.md at 53c478e, "## Engine"), all in one run on this machine:

1. the verify-cost curve: ms per forward pass over n new tokens after a ~1k-token KV cache;
2. plain vs speculative (chain, tree) on real-code positions: tokens/pass, ms, identical output;
3. time to first token after a one-character edit (KV reuse) against a cold request.

    .venv/bin/python scripts/bench_verify_cost.py [--model SPEC] [--runtime auto|torch|llamacpp]
                                                  [--positions 6] [--max-tokens 48] [--curve-only]

Timing uses the minimum of repeats for the curve (other processes only ever add
time) and alternates the decoders per position, so a busy CPU biases no side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from ngramd.daemon.engine.policy import AdaptiveConfig  # noqa: E402
from ngramd.daemon.engine.completer import Completer  # noqa: E402
from ngramd.daemon.engine.loop import EngineConfig  # noqa: E402
from ngramd.daemon.runtime.loading import load_runtime  # noqa: E402
from ngramd.daemon.protocol.requests import CompletionRequest  # noqa: E402

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


def verify_curve(rt, context_tokens: list[int], repeats: int,
                 sizes: tuple[int, ...] = SIZES) -> list[tuple[int, float, float]]:
    """Through the runtime seam (daemon/runtime/base.py): torch and llama.cpp alike; every row's
    logits, as a verify pass asks."""
    kv = rt.new_cache()
    ctx = context_tokens[:1000]
    rt.forward_pass(ctx, kv, keep_last=1)
    kv.extended(ctx)
    extra = context_tokens[1000:1000 + max(sizes)]
    rows = []
    try:
        for n in sizes:
            times = []
            for _ in range(repeats + 1):
                rt.synchronize()
                t0 = time.perf_counter()
                rt.forward_pass(extra[:n], kv)
                rt.synchronize()
                times.append((time.perf_counter() - t0) * 1000)
                kv.extended(extra[:n])
                kv.crop(len(ctx))
            rows.append((n, min(times[1:]), statistics.median(times[1:])))
    finally:
        rt.release_cache(kv)
    return rows


def positions(files: list[Path], n: int) -> list[tuple[Path, str, int]]:
    """Cursor positions at the start of a code line (after its indentation), spread over the files."""
    out = []
    per_file = max(1, n // len(files))
    for f in files:
        text = f.read_text()
        lines = text.split("\n")
        starts, off = [], 0
        for line in lines:
            if len(line.strip()) > 12 and off > 2000:
                starts.append(off + len(line) - len(line.lstrip()))
            off += len(line) + 1
        step = max(1, len(starts) // (per_file + 1))
        out += [(f, text, starts[(i + 1) * step]) for i in range(per_file) if (i + 1) * step < len(starts)]
    return out[:n]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--runtime", choices=["auto", "torch", "llamacpp"], default="auto",
                    help="what runs the model (auto: llama.cpp for a GGUF file on the CPU)")
    ap.add_argument("--curve-only", action="store_true", help="the verify-cost curve alone")
    ap.add_argument("--positions", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the raw figures here")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (1 is steadier than 2 on a shared 2-core machine)")
    ap.add_argument("--sizes", default=None, help="comma-separated pass sizes for the curve")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else SIZES
    rt = load_runtime(args.model, "cpu", args.runtime)
    threads = getattr(rt, "threads", None) or torch.get_num_threads()
    print(f"# model {rt.name} on {rt.device} ({getattr(rt, 'kind', 'torch')}), threads {threads}, "
          f"load average {os.getloadavg()[0]:.1f}")

    files = [ROOT / "daemon" / "engine" / "loop.py", ROOT / "index" / "store.py", ROOT / "daemon" / "engine" / "completer.py"]
    curve = verify_curve(rt, rt.encode("\n".join(f.read_text() for f in files)), args.repeats, sizes)
    print("\n| new tokens | ms/pass (min) | ms/pass (median) |\n|---:|---:|---:|")
    for n, lo, med in curve:
        print(f"| {n} | {lo:.1f} | {med:.1f} |")
    if args.curve_only:
        if args.json:
            Path(args.json).write_text(json.dumps({"runtime": getattr(rt, "kind", "torch"), "curve": curve}, indent=1))
        return 0

    from ngramd.index.store import NgramIndex

    index = NgramIndex(rt.tokenize_batch)
    index.index_workspace(str(ROOT / "index"))
    base = dict(calibrate=True, add_history=False, reuse_kv=False)
    decoders = {
        "plain": Completer(rt, index, EngineConfig(**base)),
        "chain": Completer(rt, index, EngineConfig(**base, adaptive=AdaptiveConfig(max_width=1))),
        "tree3": Completer(rt, index, EngineConfig(**base, adaptive=AdaptiveConfig(max_width=3))),
    }
    print(f"\ncost model: {decoders['plain'].cost.to_dict()}")
    rows = []
    print("\n| case | plain ms | chain ms | tree3 ms | chain tok/pass | tree3 tok/pass | identical |\n"
          "|---|---:|---:|---:|---:|---:|---|")
    totals = {k: 0.0 for k in decoders}
    cursors = positions(files, args.positions)
    for i, (f, text, off) in enumerate(cursors):
        res = {}
        order = list(decoders) if i % 2 == 0 else list(reversed(decoders))
        for name in order:
            c = decoders[name]
            c.drop_cache("bench")
            r = c.complete(CompletionRequest("bench", text, off, max_tokens=args.max_tokens,
                                             speculate=name != "plain"))
            res[name] = r
        ident = res["chain"].token_ids == res["plain"].token_ids == res["tree3"].token_ids
        for k in decoders:
            totals[k] += res[k].stats.ms
        rows.append({"case": f"{f.name}:{off}", **{f"{k}_ms": round(v.stats.ms, 1) for k, v in res.items()},
                     **{f"{k}_tpp": round(v.stats.tokens_per_pass, 2) for k, v in res.items()},
                     "identical": ident})
        print(f"| {f.name}:{off} | {res['plain'].stats.ms:.0f} | {res['chain'].stats.ms:.0f} | "
              f"{res['tree3'].stats.ms:.0f} | {res['chain'].stats.tokens_per_pass:.2f} | "
              f"{res['tree3'].stats.tokens_per_pass:.2f} | {ident} |")
    print(f"\nspeedup over plain (total ms): chain {totals['plain'] / totals['chain']:.2f}x, "
          f"tree3 {totals['plain'] / totals['tree3']:.2f}x")

    # time to first token: cold vs after typing one character at the cursor
    f, text, off = cursors[0]
    edited = text[:off] + text[off] + text[off:]  # the user types one more character at the cursor
    warm_c = Completer(rt, index, EngineConfig(calibrate=True, add_history=False, reuse_kv=True))
    ttft = []
    for _ in range(3):
        warm_c.drop_cache("ttft")
        cold = warm_c.complete(CompletionRequest("ttft", text, off, max_tokens=1))
        warm = warm_c.complete(CompletionRequest("ttft", edited, off + 1, max_tokens=1))
        ttft.append((cold.stats.first_token_ms, cold.stats.prefill_tokens, warm.stats.first_token_ms,
                     warm.stats.prefill_tokens, warm.stats.reused_tokens))
    best = min(ttft, key=lambda t: t[0])
    best_w = min(ttft, key=lambda t: t[2])
    print(f"\ntime to first token: cold {best[0]:.0f} ms (prefill {best[1]} tokens); after a one-character "
          f"edit {best_w[2]:.0f} ms (prefill {best_w[3]}, reused {best_w[4]}); min of 3")
    if args.json:
        Path(args.json).write_text(json.dumps({"curve": curve, "rows": rows, "ttft": ttft}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
