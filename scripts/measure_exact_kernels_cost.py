#!/usr/bin/env python
"""What exactness costs on one GGUF: prefill, one-token decoding and k-token passes under
ggml's kernel choices, each in its own process (ggml reads ``GGML_CPU_TILED_MM`` once):

- ``fastest``: ggml's own kernels, as ngramd loads a model by default (the tiled K-quant
  product and repacked weights on);
- ``untiled``: the tiled product off, repacked weights on (to tell the two apart);
- ``plain``: both off, as ``--exact-kernels`` loads it;
- ``one-column``: as ``fastest``, but without the exact kernels of ngramd's llama.cpp build
  (scripts/llamacpp/exact-gemm.patch; ``GGML_CPU_EXACT_GEMM=0``): Q4_1 and Q8_0 weights meet
  several columns one ``vec_dot`` at a time, and attention's F16 products are one
  ``ggml_vec_dot_f16`` an output, as in an unpatched build;
- ``no-f16``: as ``fastest``, without the patch's F16 kernel alone (``GGML_CPU_EXACT_F16=0``).

Each configuration also runs the exactness check (daemon/runtime/exactness.py).

    .venv/bin/python scripts/measure_exact_kernels_cost.py MODEL.gguf [--rounds 3] [--configs fastest,one-column]

Rounds rotate the configurations' order; a round's figures are medians of its passes (24
one-token passes, 3 of each k), and the table shows their medians over rounds.
Figures: docs/design/batch-invariance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# name -> (GGML_CPU_TILED_MM, load with exact_kernels: no repacking, GGML_CPU_EXACT_GEMM, GGML_CPU_EXACT_F16)
CONFIGS = {"fastest": ("1", False, "1", "1"), "untiled": ("0", False, "1", "1"), "plain": ("0", True, "1", "1"),
           "one-column": ("1", False, "0", "1"), "no-f16": ("1", False, "1", "0")}
SIZES = (2, 4, 8, 16)
CONTEXT = 1000  # tokens of context before the timed passes
DECODE = 24  # one-token passes timed


def measure_here(model: Path, exact_kernels: bool) -> dict:
    """In this process: load (``exact_kernels``: no repacking), time a prefill, one-token passes and k-token passes."""
    from ngramd.daemon.runtime.exactness import check_exactness
    from ngramd.daemon.runtime.gguf_tokenizer import load_gguf_tokenizer
    from ngramd.daemon.runtime.llamacpp import LlamaCppRuntime

    runtime = LlamaCppRuntime(model, load_gguf_tokenizer(model), exact_kernels=exact_kernels)
    exact = check_exactness(runtime).exact
    text = (Path(__file__).resolve().parents[1] / "index" / "store.py").read_text()
    ids = runtime.encode(text)[:CONTEXT + max(SIZES) + DECODE]
    context, extra = ids[:CONTEXT], ids[CONTEXT:]
    cache = runtime.new_cache()
    t0 = time.perf_counter()
    runtime.forward_pass(context, cache, keep_last=1)
    prefill_ms = (time.perf_counter() - t0) * 1000
    cache.extended(context)
    one = []
    for token in extra[:DECODE]:
        t0 = time.perf_counter()
        runtime.forward_pass([token], cache)
        one.append((time.perf_counter() - t0) * 1000)
        cache.extended([token])
    cache.crop(CONTEXT)
    passes = {}
    for k in SIZES:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            runtime.forward_pass(extra[:k], cache)
            times.append((time.perf_counter() - t0) * 1000)
            cache.extended(extra[:k])
            cache.crop(CONTEXT)
        passes[k] = statistics.median(times)
    runtime.close()
    return {"exact": exact, "prefill_ms": prefill_ms, "one_token_ms": statistics.median(one), "pass_ms": passes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, of {', '.join(CONFIGS)} (default: all)")
    ap.add_argument("--child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure_here(args.model, CONFIGS[args.child][1])))
        return 0
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        ap.error(f"unknown configuration(s) {', '.join(unknown) or '(none)'}: choose from {', '.join(CONFIGS)}")
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            env = dict(os.environ, GGML_CPU_TILED_MM=CONFIGS[name][0], GGML_CPU_EXACT_GEMM=CONFIGS[name][2],
                       GGML_CPU_EXACT_F16=CONFIGS[name][3], NGRAMD_HUGE_PAGES="0")
            out = subprocess.run([sys.executable, __file__, str(args.model), "--child", name], env=env,
                                 capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.model.name}, {args.rounds} rounds, medians (ms)")
    print(f"{'config':9} {'exact':>5} {'prefill ' + str(CONTEXT):>13} {'1 token':>8} "
          + " ".join(f"{'k=' + str(k):>7}" for k in SIZES) + "   k=16 / 16 one-token")
    for name in names:
        rows = runs[name]
        med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
        one = med(lambda r: r["one_token_ms"])
        ks = [med(lambda r, k=k: r["pass_ms"][str(k)]) for k in SIZES]
        exact = "yes" if all(r["exact"] for r in rows) else "no"
        print(f"{name:9} {exact:>5} {med(lambda r: r['prefill_ms']):13.0f} {one:8.1f} "
              + " ".join(f"{v:7.1f}" for v in ks) + f"   {ks[-1] / (16 * one):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
