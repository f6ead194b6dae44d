#!/usr/bin/env python
"""What the exact F16 kernel of ngramd's llama.cpp build (scripts/llamacpp/exact-gemm.patch:
attention's K*Q and V*KQ products) saves, in one process: passes alternate with the kernel on and
off (``ggml_cpu_exact_f16_set``), so that the machine's drift, which moves a pass by 20% from one
process to the next here, falls on both alike. Every pass's logits are compared too: on and off
must be bitwise equal.

    .venv/bin/python scripts/measure_f16_kernel.py [MODEL.gguf] [--context 1000] [--rounds 20]
        [--sizes 1,2,4,8,16] [--prefills 4]

A round times each size once on and once off, in an order that turns; a prefill of the context
alternates likewise. Medians, ms. Figures: docs/design/batch-invariance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def kernel_switch(lib_dir: Path) -> ctypes.CDLL:
    """The CPU backend the binding loaded, with ``ggml_cpu_exact_f16_set``; exits where the build has none."""
    from ngramd.daemon.runtime.llamacpp import cpu_backend

    cpu = cpu_backend(lib_dir)
    if cpu is None or not hasattr(cpu, "ggml_cpu_exact_f16_set") or not cpu.ggml_cpu_exact_f16():
        sys.exit("this llama.cpp build has no exact F16 kernel in use (scripts/install_llamacpp.sh)")
    cpu.ggml_cpu_exact_f16_set.argtypes = [ctypes.c_int]
    return cpu


def main(argv: list[str] | None = None) -> int:
    from ngramd.daemon.runtime.llamacpp import _library_dir, load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, nargs="?", help="a GGUF file (default: the embedded model)")
    ap.add_argument("--context", type=int, default=1000, help="tokens of context before the timed passes")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sizes", default="1,2,4,8,16", help="tokens a timed pass takes, comma-separated")
    ap.add_argument("--prefills", type=int, default=4, help="prefills of the context timed on and off each")
    args = ap.parse_args(argv)
    sizes = [int(k) for k in args.sizes.split(",") if k.strip()]
    runtime = load_llamacpp(args.model or embedded_gguf_path(), check=False)
    cpu = kernel_switch(_library_dir())
    text = (Path(__file__).resolve().parents[1] / "index" / "store.py").read_text()
    ids = runtime.encode(text * 4)[:args.context + max(sizes)]
    context, extra = ids[:args.context], ids[args.context:]
    times: dict[tuple[str, int], list[float]] = {}
    identical = True

    def timed(on: bool, tokens: list[int], cache, keep_last: int | None = None) -> np.ndarray:
        cpu.ggml_cpu_exact_f16_set(int(on))
        t0 = time.perf_counter()
        logits = runtime.forward_pass(tokens, cache, keep_last=keep_last)
        times.setdefault(("on" if on else "off", len(tokens)), []).append((time.perf_counter() - t0) * 1000)
        return logits

    for r in range(args.prefills):
        for on in ((True, False) if r % 2 else (False, True)):
            cache = runtime.new_cache()
            timed(on, context, cache, keep_last=1)
            runtime.release_cache(cache)
    cache = runtime.new_cache()
    runtime.forward_pass(context, cache, keep_last=1)
    cache.extended(context)
    for r in range(args.rounds):
        for k in sizes:
            logits = {}
            for on in ((True, False) if (r + k) % 2 else (False, True)):
                logits[on] = timed(on, extra[:k], cache)
                cache.extended(extra[:k])
                cache.crop(args.context)
            identical &= logits[True].tobytes() == logits[False].tobytes()
    cpu.ggml_cpu_exact_f16_set(1)
    print(f"{runtime.name}, context {args.context}, {args.rounds} rounds, medians (ms); "
          f"logits on and off bitwise equal: {'yes' if identical else 'NO'}")
    print(f"{'pass':>14} {'kernel on':>10} {'off':>8} {'off / on':>9}")
    for k in ([len(context)] if args.prefills else []) + sizes:
        on, off = statistics.median(times[("on", k)]), statistics.median(times[("off", k)])
        label = f"prefill {k}" if k == len(context) and args.prefills else f"k={k}"
        print(f"{label:>14} {on:10.1f} {off:8.1f} {off / on:9.2f}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
