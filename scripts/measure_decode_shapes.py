"""One-token decoding on the llama.cpp runtime in several context shapes, against llama.cpp's own
``Llama`` on the same GGUF: ms a token after a 350-token prompt, and each shape's time over
``Llama``'s in the same round (rounds rotate the order, so a burst of load on a shared machine
falls on every shape alike).

    .venv/bin/python scripts/measure_decode_shapes.py [--rounds 12] [--tokens 32] [--model PATH]

Shapes: live sequences x cells per sequence, the file read (as ngramd loads it) or mapped
(as ``Llama`` does). docs/benchmarks.md ("Cost curve") keeps the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
from pathlib import Path

SHAPES = (("1 x 3072, read", 1, 3072, False), ("2 x 3072, read", 2, 3072, False),
          ("5 x 3072, read", 5, 3072, False), ("5 x 1024, read", 5, 1024, False),
          ("1 x 3072, mapped", 1, 3072, True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=32, help="tokens decoded per shape and round")
    ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    args = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    from ngramd.daemon.bench.decode_timing import llama_ms_per_token, runtime_ms_per_token
    from ngramd.daemon.runtime import llamacpp
    from ngramd.daemon.runtime.gguf_tokenizer import load_gguf_tokenizer
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    path = Path(args.model) if args.model else embedded_gguf_path()
    tokenizer = load_gguf_tokenizer(path)
    source = Path(sysconfig.get_paths()["stdlib"]) / "asyncio" / "runners.py"
    ids = tokenizer.encode(source.read_text())[:350]
    runtimes = {}
    read_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    for name, sequences, cells, mapped in SHAPES:
        # the runtime reads the file (LLAMA_LOAD_MODE_NONE); mapped: the same constructor, told to map
        llama_cpp.LLAMA_LOAD_MODE_NONE = llama_cpp.LLAMA_LOAD_MODE_MMAP if mapped else read_mode
        runtimes[name] = llamacpp.LlamaCppRuntime(path, tokenizer, sequences=sequences, ctx_per_sequence=cells)
    llama_cpp.LLAMA_LOAD_MODE_NONE = read_mode
    threads = next(iter(runtimes.values())).threads
    llm = Llama(str(path), n_gpu_layers=0, n_ctx=3072, n_threads=threads, n_threads_batch=threads, verbose=False)

    runs = {name: (lambda rt=rt: runtime_ms_per_token(rt, ids, args.tokens)) for name, rt in runtimes.items()}
    runs["Llama (1 x 3072, mapped)"] = lambda: llama_ms_per_token(llm, ids, args.tokens)
    names = list(runs)
    ms: dict[str, list[float]] = {n: [] for n in names}
    ratio: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        got = {n: runs[n]() for n in order}
        for n in names:
            ms[n].append(got[n])
            ratio[n].append(got[n] / got[names[-1]])
    print(f"{path.name}, {threads} threads, {args.rounds} rounds of {args.tokens} tokens after {len(ids)}")
    print("| shape | ms a token, median | over Llama's, in-round median |\n|---|---|---|")
    for n in names:
        print(f"| {n} | {statistics.median(ms[n]):.2f} | {statistics.median(ratio[n]):.3f} |")


if __name__ == "__main__":
    main()
