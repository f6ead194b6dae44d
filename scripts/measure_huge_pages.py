"""One-token decoding on the llama.cpp runtime with its memory in 4 KB pages and in 2 MB pages
(daemon/runtime/huge_pages.py), in alternated child processes, each beside llama.cpp's own ``Llama``
on the same GGUF (which maps the file, as llama.cpp does by default).

    .venv/bin/python scripts/measure_huge_pages.py [--pairs 3] [--rounds 8] [--tokens 32]

Per child: the median ms a token of ours and of ``Llama``, their in-round ratio, and the
process's memory in 2 MB pages. docs/benchmarks.md ("Huge pages") keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path


def child(rounds: int, tokens: int) -> dict:
    from llama_cpp import Llama

    from ngramd.daemon.bench.decode_timing import llama_ms_per_token, runtime_ms_per_token
    from ngramd.daemon.runtime import llamacpp
    from ngramd.daemon.runtime.gguf_tokenizer import load_gguf_tokenizer
    from ngramd.daemon.runtime.loading import embedded_gguf_path
    from ngramd.daemon.service.methods import huge_page_bytes

    path = embedded_gguf_path()
    tokenizer = load_gguf_tokenizer(path)
    ids = tokenizer.encode((Path(sysconfig.get_paths()["stdlib"]) / "asyncio" / "runners.py").read_text())[:350]
    rt = llamacpp.LlamaCppRuntime(path, tokenizer)
    llm = Llama(str(path), n_gpu_layers=0, n_ctx=rt.positions, n_threads=rt.threads,
                n_threads_batch=rt.threads, verbose=False)

    def ours() -> float:
        return runtime_ms_per_token(rt, ids, tokens)

    def peer() -> float:
        return llama_ms_per_token(llm, ids, tokens)

    o, p, r = [], [], []
    for i in range(rounds):
        a, b = (ours(), peer()) if i % 2 else tuple(reversed((peer(), ours())))
        o.append(a)
        p.append(b)
        r.append(a / b)
    return {"ours_ms": statistics.median(o), "llama_ms": statistics.median(p), "ratio": statistics.median(r),
            "huge_page_mib": (huge_page_bytes() or 0) / (1 << 20)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="child processes of each kind, alternated")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.rounds, args.tokens)))
        return 0
    from ngramd.daemon.runtime.huge_pages import SWITCH, tunables_with_huge_pages

    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | {SWITCH: "0"}
    kinds = {"4 KB pages": base, "2 MB pages": base | {"GLIBC_TUNABLES": tunables_with_huge_pages({})}}
    print("| pages | ours, ms a token | Llama, ms a token | ours over Llama (in-round median) | memory in 2 MB pages, MiB |")
    print("|---|---|---|---|---|")
    for _ in range(args.pairs):
        for name, env in kinds.items():
            out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds),
                                  "--tokens", str(args.tokens)], env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {name} | {got['ours_ms']:.2f} | {got['llama_ms']:.2f} | {got['ratio']:.3f} | {got['huge_page_mib']:.0f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
