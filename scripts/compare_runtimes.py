"""The torch and llama.cpp runtimes side by side in one process, case by case, interleaved:
ngramd's speculative completions in the prepared flow (the editor's: the prompt prefilled while
the cursor rests, the request then timed), on the same GGUF and the same bench cases.

    .venv/bin/python scripts/compare_runtimes.py [--cases bench/cases/stdlib.jsonl] [--repeat 3] [--only ID,ID] [--json OUT]

Every round of a case runs both runtimes, in turns that alternate from round to round, so that the
machine's drift (20% between processes and between minutes here) falls on both alike; two bench
runs one after the other (scripts/compare_bench_runs.py) cannot promise that. Prints each case's
median per runtime and their ratio, the total ratio (the sum of torch's medians over llama.cpp's),
and whether both runtimes made the same tokens. Each runtime keeps its own engine and index, as
``ngramd bench`` does; the tokenizer is the GGUF's in both.
"""

from __future__ import annotations

import statistics
import sys

RUNTIMES = ("torch", "llamacpp")


def main() -> int:
    from ngramd.daemon.bench.script_runs import completion_cases, measuring_arguments, write_script_run

    args = measuring_arguments(__doc__.splitlines()[0], repeat=3, repeat_help="rounds per case (each runs both runtimes)")

    from ngramd.daemon.bench.runner import BenchRunner, case_document
    from ngramd.daemon.runtime.loading import load_runtime

    cases = completion_cases(args)
    if not cases:
        print(f"{args.cases} holds no completion case", file=sys.stderr)
        return 1
    runners = {name: BenchRunner(load_runtime(args.model, device="cpu", runtime=name), hf=False, prepared=True)
               for name in RUNTIMES}
    rows = []
    for case in cases:
        ms: dict[str, list[float]] = {name: [] for name in RUNTIMES}
        answers: dict[str, set[tuple[int, ...]]] = {name: set() for name in RUNTIMES}  # each runtime's, every round
        indexes = {name: runner.index_for(case.workspace) for name, runner in runners.items()}
        for name, runner in runners.items():
            runner.warm_up(case)
        for r in range(args.repeat):
            for name in (RUNTIMES if r % 2 == 0 else RUNTIMES[::-1]):
                runner, index = runners[name], indexes[name]
                with case_document(index, case):
                    run = runner._engine_run(case, index, speculate=True, prepared=True)
                ms[name].append(round(run.ms, 2))
                answers[name].add(tuple(run.result.token_ids))
        med = {name: statistics.median(v) for name, v in ms.items()}
        # the same tokens in every round of both runtimes (each alone is plain decoding's: the bench shows it)
        identical = len(answers["torch"] | answers["llamacpp"]) == 1
        row = {"id": case.id, "generated": len(next(iter(answers["llamacpp"]))), "runs_ms": ms,
               "torch_ms": round(med["torch"], 2), "llamacpp_ms": round(med["llamacpp"], 2),
               "ratio": round(med["torch"] / med["llamacpp"], 3), "identical": identical}
        rows.append(row)
        print(f"{case.id:26s} {row['generated']:3d} tokens  torch {row['torch_ms']:8.1f} ms  "
              f"llama.cpp {row['llamacpp_ms']:7.1f} ms  {row['ratio']:.2f}x  same tokens: {row['identical']}",
              flush=True)
    total = sum(r["torch_ms"] for r in rows) / sum(r["llamacpp_ms"] for r in rows)
    ratios = [r["ratio"] for r in rows]
    summary = {"cases": len(rows), "total_ratio": round(total, 3), "median_ratio": round(statistics.median(ratios), 3),
               "lowest_ratio": round(min(ratios), 3), "identical": sum(r["identical"] for r in rows)}
    print(f"{summary['cases']} cases, prepared speculative completions: llama.cpp {total:.2f}x faster than torch "
          f"in total, median {summary['median_ratio']:.2f}x, lowest {summary['lowest_ratio']:.2f}x; "
          f"same tokens in {summary['identical']} of {summary['cases']}")
    write_script_run(args, rows, summary)
    for runner in runners.values():
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
