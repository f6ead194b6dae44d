"""Where a prepared speculative edit's time goes: the model's forward passes against the rest.

Runs each case as ``ngramd bench --prepared --typed-instruction`` runs its prepared speculative
variant (the bench runner's own ``_engine_run``: the prompt prefilled through the instruction,
then the timed edit) and times every forward pass of the timed part with module hooks. What
is not a forward pass is the engine's own work: drafting, acceptance, stop rules, detokenizing.

    .venv/bin/python scripts/edit_time_split.py --cases bench/cases/edits_few.jsonl --rounds 2

Prints one line per case (the last round's figures; earlier rounds warm up) with its passes'
sizes and times, then the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="a bench case file of edits")
    ap.add_argument("--ids", help="a JSONL file of cases whose ids alone are run (e.g. a subset)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the cases; the last is reported")
    args = ap.parse_args()

    from daemon.bench_cases import load_cases
    from daemon.bench_runner import BenchRunner, case_document
    from daemon.model import load_runtime

    cases = [c for c in load_cases(args.cases) if c.mode == "edit"]
    if args.ids:
        wanted = {json.loads(line)["id"] for line in Path(args.ids).read_text().splitlines() if line.strip()}
        cases = [c for c in cases if c.id in wanted]
    rt = load_runtime(None, "cpu")
    runner = BenchRunner(rt, hf=False, prepared=True, typed_instruction=True)
    pass_ms: list[float] = []  # every forward pass's time, the prepare's included
    started: list[float] = []
    rt.model.register_forward_pre_hook(lambda m, a, k: started.append(time.perf_counter()), with_kwargs=True)
    rt.model.register_forward_hook(lambda m, a, k, o: pass_ms.append((time.perf_counter() - started.pop()) * 1000),
                                   with_kwargs=True)
    total = forward = 0.0
    for rnd in range(args.rounds):
        last = rnd == args.rounds - 1
        for case in cases:
            index = runner.index_for(case.workspace)
            runner.warm_up(case)
            with case_document(index, case):
                run = runner._engine_run(case, index, speculate=True, prepared=True)
            timed = pass_ms[-len(run.passes):] if run.passes else []  # the passes after the prepare
            pass_ms.clear()
            if not last:
                continue
            f = sum(timed)
            total += run.ms
            forward += f
            sizes = [(len(p.ids), round(ms)) for p, ms in zip(run.passes, timed)]
            print(f"{case.id[:44]:44s} {run.ms:7.1f} ms, forward {f:7.1f} in {len(timed):2d} passes, "
                  f"other {run.ms - f:5.1f}  (tokens, ms): {sizes}", flush=True)
    if total:
        print(f"total {total:.1f} ms, forward passes {forward:.1f} ms, other {total - forward:.1f} ms "
              f"({(total - forward) / total:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
