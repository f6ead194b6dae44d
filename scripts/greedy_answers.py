#!/usr/bin/env python
"""The greedy answers of a cases file, in a bench run's shape, untimed: what
scripts/replay_policy.py replays, for many more cases than a timed bench run can afford.

Each case is decoded once, plainly, by the engine the bench runs (its prompt, index and stops),
and written as a bench row's ``id``, ``status``, ``prompt_tokens`` and ``token_ids``:

    .venv/bin/python scripts/greedy_answers.py bench/cases/stdlib_wide.jsonl \\
        --json bench/runs/2026-12-07-stdlib-wide-answers.json
    .venv/bin/python scripts/replay_policy.py bench/runs/2026-12-07-stdlib-wide-answers.json --openings
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", type=Path, help="a bench cases file (JSONL)")
    ap.add_argument("--json", type=Path, required=True, help="write the run here")
    ap.add_argument("--model", help="a model as `ngramd bench --model` takes it (default: the embedded one)")
    ap.add_argument("--runtime", default="auto", choices=("auto", "torch", "llamacpp"))
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
            with case_document(index, case):
                run = runner._engine_run(case, index, speculate=False)
            if run.result is None:
                rows.append({"id": case.id, "status": "unsupported", "error": run.unsupported})
                continue
            rows.append({"id": case.id, "status": "ok", "prompt_tokens": len(runner._prompt_ids(run)),
                         "token_ids": list(run.result.token_ids)})
            print(f"{n}/{len(cases)} {case.id}: {len(run.result.token_ids)} tokens "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    finally:
        runner.close()
    meta = script_run_meta(args.cases, 1, args.model) | {"runtime": getattr(runtime, "kind", "torch")}
    args.json.write_text(json.dumps({"meta": meta, "cases": rows}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
