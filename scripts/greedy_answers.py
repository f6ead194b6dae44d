#!/usr/bin/env python
"""The greedy answers of a cases file, in a bench run's shape, untimed: what
scripts/replay_policy.py replays, for many more cases than a timed bench run can afford.

Each case is decoded once, plainly, by the engine the bench runs (its prompt, index and stops),
and written as a bench row's ``id``, ``status``, ``prompt_tokens`` and ``token_ids``; with
``--top-probability`` also ``top_probability``, the largest softmax probability of the row that
made each answer token (the token's own, greedy decoding taking the argmax, except under the
prompt's forced prefix, which masks a row's first tokens), which ``replay_policy.py --openings``
then groups drafts by:

    .venv/bin/python scripts/greedy_answers.py bench/cases/stdlib_wide.jsonl \\
        --json bench/runs/2026-12-07-stdlib-wide-answers.json
    .venv/bin/python scripts/replay_policy.py bench/runs/2026-12-07-stdlib-wide-answers.json --openings
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np


@contextlib.contextmanager
def last_row_probabilities(runtime: Any) -> Iterator[list[float]]:
    """While the block runs, the softmax's largest probability of each pass's last row (the token
    greedy decoding takes there), pass by pass, in the list it gives; wraps the runtime's pass."""
    seen: list[float] = []
    found = runtime.__dict__.get("forward_pass")  # another wrapper's, put back on exit
    forward_pass = runtime.forward_pass

    def recording(*args: Any, **kwargs: Any) -> Any:
        logits = forward_pass(*args, **kwargs)
        row = logits[-1]
        row = row.detach().float().cpu().numpy() if hasattr(row, "detach") else np.asarray(row)  # [vocab]
        row = row.astype(np.float64)
        seen.append(float(1.0 / np.exp(row - row.max()).sum()))
        return logits

    runtime.forward_pass = recording
    try:
        yield seen
    finally:
        if found is not None:
            runtime.forward_pass = found
        else:
            runtime.__dict__.pop("forward_pass", None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", type=Path, help="a bench cases file (JSONL)")
    ap.add_argument("--json", type=Path, required=True, help="write the run here")
    ap.add_argument("--model", help="a model as `ngramd bench --model` takes it (default: the embedded one)")
    ap.add_argument("--runtime", default="auto", choices=("auto", "torch", "llamacpp"))
    ap.add_argument("--top-probability", action="store_true",
                    help="also record the probability the model gave each answer token")
    args = ap.parse_args(argv)

    from ngramd.daemon.bench.cases import load_cases
    from ngramd.daemon.bench.run_meta import script_run_meta
    from ngramd.daemon.bench.runner import BenchRunner, case_document
    from ngramd.daemon.runtime.loading import load_runtime

    try:
        cases = load_cases(args.cases)
    except (OSError, ValueError) as exc:
        print(f"greedy_answers: {exc}", file=sys.stderr)
        return 2
    runtime = load_runtime(args.model, runtime=args.runtime)
    runner = BenchRunner(runtime, hf=False)
    runner.peers = None  # the engine's answers only
    rows = []
    t0 = time.perf_counter()
    try:
        for n, case in enumerate(cases, 1):
            index = runner.index_for(case.workspace)
            with case_document(index, case), \
                    (last_row_probabilities(runtime) if args.top_probability else contextlib.nullcontext([])) as probs:
                run = runner._engine_run(case, index, speculate=False)
            if run.result is None:
                rows.append({"id": case.id, "status": "unsupported", "error": run.unsupported})
                continue
            answer = list(run.result.token_ids)
            rows.append({"id": case.id, "status": "ok", "prompt_tokens": len(runner._prompt_ids(run)),
                         "token_ids": answer})
            if args.top_probability:  # plain decoding's passes (after the prompt's) make a token each
                passes = probs[len(probs) - run.result.stats.forward_passes:]
                rows[-1]["top_probability"] = [round(p, 5) for p in passes[:len(answer)]]
            print(f"{n}/{len(cases)} {case.id}: {len(run.result.token_ids)} tokens "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    finally:
        runner.close()
    meta = script_run_meta(args.cases, 1, args.model) | {"runtime": getattr(runtime, "kind", "torch")}
    args.json.write_text(json.dumps({"meta": meta, "cases": rows}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
