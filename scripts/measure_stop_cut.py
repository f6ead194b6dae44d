"""What cutting drafts before the token that ends the answer saves, in one process: each case's
prepared completion decoded plainly, speculatively with the cut, and speculatively without it
(``StopChecker.tokens_before_stop`` answering "no stop ahead"), the three in turns that rotate
from round to round.

    .venv/bin/python scripts/measure_stop_cut.py [--cases bench/cases/stdlib.jsonl] [--repeat 5] [--only ID,ID] [--json OUT]

Prints each case's medians, the tokens drafted in each run, whether every run of the three made
plain decoding's first tokens, and the totals. The cut changes which rows a pass verifies, never
the output.
"""

from __future__ import annotations

import statistics
import sys

VARIANTS = ("plain", "cut", "whole")


def main() -> int:
    from ngramd.daemon.bench.script_runs import completion_cases, measuring_arguments, write_script_run

    args = measuring_arguments(__doc__.splitlines()[0], repeat=5)

    from ngramd.daemon.bench.runner import BenchRunner, case_document
    from ngramd.daemon.engine.stops import StopChecker
    from ngramd.daemon.runtime.loading import load_runtime

    cases = completion_cases(args)
    if not cases:
        print("no completion case to run", file=sys.stderr)
        return 1
    cut = StopChecker.tokens_before_stop

    def whole(self: StopChecker, tokens) -> int:  # the probe without the cut: "no stop ahead"
        return 0 if self.reason else len(tokens)

    runner = BenchRunner(load_runtime(args.model, device="cpu"), hf=False, prepared=True)
    totals = dict.fromkeys(VARIANTS, 0.0)
    rows: list[dict] = []
    try:
        for case in cases:
            index = runner.index_for(case.workspace)
            runner.warm_up(case)
            ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
            drafted: dict[str, list[int]] = {v: [] for v in VARIANTS}
            answers: set[tuple[int, ...]] = set()  # every run's tokens: one answer if all agree
            with case_document(index, case):
                for r in range(args.repeat):
                    for variant in VARIANTS[r % 3:] + VARIANTS[:r % 3]:
                        StopChecker.tokens_before_stop = whole if variant == "whole" else cut
                        run = runner._engine_run(case, index, variant != "plain", prepared=True)
                        ms[variant].append(run.ms)
                        drafted[variant].append(run.result.stats.drafted)
                        answers.add(tuple(run.result.token_ids))
            StopChecker.tokens_before_stop = cut
            med = {v: statistics.median(ms[v]) for v in VARIANTS}
            for v in VARIANTS:
                totals[v] += med[v]
            same = len(answers) == 1
            generated = len(next(iter(answers)))
            rows.append({"id": case.id, "generated": generated, "runs_ms": {v: [round(x, 2) for x in ms[v]] for v in VARIANTS},
                         "median_ms": {v: round(med[v], 2) for v in VARIANTS}, "drafted": drafted, "identical": same})
            print(f"{case.id:26s} {generated:3d} tokens  plain {med['plain']:7.1f}  cut {med['cut']:7.1f}  "
                  f"whole {med['whole']:7.1f} ms  drafted cut {drafted['cut']} whole {drafted['whole']}  "
                  f"every run the same tokens: {same}", flush=True)
    finally:
        StopChecker.tokens_before_stop = cut
        runner.close()
    summary = {"cases": len(rows), "with_cut": round(totals["plain"] / totals["cut"], 3),
               "without_cut": round(totals["plain"] / totals["whole"], 3), "identical": sum(r["identical"] for r in rows)}
    print(f"{summary['cases']} cases: speculation {summary['with_cut']:.3f}x plain decoding with the cut, "
          f"{summary['without_cut']:.3f}x without; every run the same tokens in {summary['identical']}")
    write_script_run(args, rows, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
