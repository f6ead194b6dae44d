#!/usr/bin/env python
"""A cold prompt's prefill by llama_decode batch size: ngramd's llama.cpp runtime and llama-cpp-python's
``Llama``, each at several tokens a call (``--sizes``, 512 among them), in one process, turns rotating from
round to round.

Each case's prompt is the last ``--tokens`` tokens of its document before the cursor (about a
bench prompt's length); a run prefills it into an empty cache. ``Llama`` at its default
(``n_batch`` 512) is the bench's baseline; ngramd's runtime uses ``BATCH``:

    .venv/bin/python scripts/measure_prefill_batch.py [--cases bench/cases/stdlib.jsonl] [--repeat 8] [--only ID,ID] [--tokens 1024] [--sizes 128,256,512] [--decode 48] [--json OUT]

With ``--decode N`` each run then decodes N tokens greedily, one a pass, timed apart: the
prompt-cached flow's cost, which the batch size should not move.

Prints each variant's median ms per case and, paired by round (each run over the same round's
run at 512 tokens a call of the same engine), the median of those ratios over every run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

SIZES = (128, 256, 512)
BASE = 512  # llama-cpp-python's default n_batch: every size is compared with it


def batch_sizes(text: str) -> tuple[int, ...]:
    """``--sizes``: comma-separated positive token counts; 512 is always measured, as the base."""
    try:
        sizes = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes wants comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--sizes wants positive token counts, got {text!r}")
    return tuple(sorted(sizes | {BASE}))


def main() -> int:
    from ngramd.daemon.bench.script_runs import completion_cases, measuring_arguments, write_script_run

    def own_options(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--tokens", type=int, default=1024, help="the prompt's last tokens before the cursor")
        ap.add_argument("--sizes", type=batch_sizes, default=SIZES,
                        help="tokens per llama_decode call, comma-separated")
        ap.add_argument("--decode", type=int, default=0, help="greedy tokens decoded after the prefill, timed apart")

    args = measuring_arguments(__doc__.splitlines()[0], repeat=8, extra=own_options)
    tokens, sizes = args.tokens, args.sizes
    from llama_cpp import Llama

    from ngramd.daemon.runtime.llamacpp import load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    cases = completion_cases(args)
    if not cases:
        print("no completion case to run", file=sys.stderr)
        return 1
    path = args.model or str(embedded_gguf_path())
    ours = {b: load_llamacpp(path, batch=b) for b in sizes}
    base = ours[BASE]
    theirs = {b: Llama(path, n_gpu_layers=0, n_ctx=base.positions, n_batch=b, n_ubatch=b,
                       n_threads=base.threads, n_threads_batch=base.threads, verbose=False) for b in sizes}
    variants = [("ngramd", b) for b in sizes] + [("Llama", b) for b in sizes]
    vocab = base.vocab_size

    def run(engine: str, b: int, ids: list[int]) -> tuple[float, float, list[int]]:
        """(ms prefilling ``ids`` into an empty cache, ms then decoding ``--decode`` tokens greedily
        one a pass, those tokens): whether the batch size moves decoding too, the prompt-cached
        flow's whole cost."""
        out: list[int] = []
        t0 = time.perf_counter()
        if engine == "ngramd":
            rt = ours[b]
            kv = rt.new_cache()
            try:
                for i in range(0, len(ids), b):
                    logits = rt.forward_pass(ids[i:i + b], kv, keep_last=1)  # [1, vocab]
                    kv.extended(ids[i:i + b])
                t1 = time.perf_counter()
                for _ in range(args.decode):
                    token = int(np.argmax(logits[-1]))
                    out.append(token)
                    logits = rt.forward_pass([token], kv, keep_last=1)
                    kv.extended([token])
            finally:
                rt.release_cache(kv)
        else:
            llm = theirs[b]
            llm.reset()
            llm.eval(ids)
            t1 = time.perf_counter()
            for _ in range(args.decode):
                # the last row's logits, in llama.cpp's buffer: Llama keeps no scores without logits_all
                last = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,))
                out.append(int(np.argmax(last)))
                llm.eval(out[-1:])
        t2 = time.perf_counter()
        return (t1 - t0) * 1000, (t2 - t1) * 1000, out

    rows = []
    names = [f"{e} {b}" for e, b in variants]
    ratios: dict[str, dict[str, list[float]]] = {"prefill": {k: [] for k in names}, "decode": {k: [] for k in names}}
    for case in cases:
        ids = base.encode(case.text[:case.offset])[-tokens:]
        ms: dict[str, dict[str, list[float]]] = {"prefill": {k: [] for k in names}, "decode": {k: [] for k in names}}
        answers: set[tuple[int, ...]] = set()  # every variant decodes the same greedy tokens
        for r in range(args.repeat):
            for engine, b in variants[r % len(variants):] + variants[:r % len(variants)]:
                prefill_ms, decode_ms, decoded = run(engine, b, ids)
                answers.add(tuple(decoded))
                ms["prefill"][f"{engine} {b}"].append(prefill_ms)
                ms["decode"][f"{engine} {b}"].append(decode_ms)
        if len(answers) > 1:
            print(f"{case.id}: the variants decoded {len(answers)} different answers", file=sys.stderr)
            return 1
        for phase in ratios:
            for engine, b in variants:
                over = ms[phase][f"{engine} {BASE}"]
                ratios[phase][f"{engine} {b}"].extend(x / y for x, y in zip(ms[phase][f"{engine} {b}"], over) if y > 0)
        med = {phase: {k: round(statistics.median(v), 1) for k, v in m.items()} for phase, m in ms.items()}
        rounded = {phase: {k: [round(x, 1) for x in v] for k, v in m.items()} for phase, m in ms.items()}
        rows.append({"id": case.id, "tokens": len(ids), "ms": rounded["prefill"], "median_ms": med["prefill"],
                     "decode_ms": rounded["decode"],
                     "decode_median_ms": med["decode"]})
        print(f"{case.id:24s} {len(ids):5d} tokens  prefill "
              + "  ".join(f"{k} {v:.0f}" for k, v in med["prefill"].items())
              + (f"  | {args.decode} decoded " + "  ".join(f"{k} {v:.0f}" for k, v in med["decode"].items())
                 if args.decode else "") + " ms", flush=True)
    summary = {phase: {k: round(statistics.median(v), 3) for k, v in r.items() if v} for phase, r in ratios.items()}
    for phase, by in summary.items():
        if by:
            print(f"{phase}, paired by round, time over the same engine's at {BASE} tokens a call: "
                  + ", ".join(f"{k} {v}" for k, v in by.items()))
    write_script_run(args, rows, {"paired_over_512": summary["prefill"], "decode_paired_over_512": summary["decode"],
                                  "tokens": tokens, "sizes": list(sizes), "decode": args.decode})
    for rt in ours.values():
        rt.close()
    for llm in theirs.values():
        llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
