#!/usr/bin/env python
"""What a prepared completion spends outside the model, a pass: ngramd's plain and speculative
decoding on llama.cpp beside llama-cpp-python's own ``Llama`` decoding plainly, in one process.

Every ``llama_decode`` call is timed (the binding's function, which the runtime and ``Llama``
both call); a run's time outside them, over its passes, is what its loop costs a pass: the
proposer, the policy, the acceptance walk, the stops, the logits' copy. The three variants run
in turns that rotate from round to round, on the bench's completion cases:

    .venv/bin/python scripts/measure_loop_overhead.py [--cases bench/cases/stdlib.jsonl] [--repeat 3] [--only ID,ID] [--json OUT]

Prints each case's median ms outside the model a pass for each variant, then the median over
all runs of each. Every run's tokens are compared with an untimed plain run's (``Llama``'s
first tokens: it decodes ``max_tokens``, where ngramd's stops end the answer before).
"""

from __future__ import annotations

import statistics
import sys
import time

VARIANTS = ("plain", "spec", "llamacpp_plain")


class DecodeClock:
    """Times every ``llama_decode`` of the binding while installed: (start, seconds) pairs."""

    def __init__(self) -> None:
        import llama_cpp
        import llama_cpp.llama_cpp as bound

        self._modules = (llama_cpp, bound)  # the runtime calls the package's name, ``Llama`` the module's
        self._decode = bound.llama_decode
        self.calls: list[tuple[float, float]] = []

    def __enter__(self) -> "DecodeClock":
        def timed(ctx, batch):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return self._decode(ctx, batch)
            finally:
                self.calls.append((t0, time.perf_counter() - t0))

        for module in self._modules:
            module.llama_decode = timed
        return self

    def __exit__(self, *exc: object) -> None:
        for module in self._modules:
            module.llama_decode = self._decode

    def since(self, start: float) -> tuple[float, int]:
        """Seconds inside llama_decode and calls, of the calls that began at ``start`` or later."""
        inside = [s for t0, s in self.calls if t0 >= start]
        return sum(inside), len(inside)


def main() -> int:
    from ngramd.daemon.bench.script_runs import completion_cases, measuring_arguments, write_script_run

    args = measuring_arguments(__doc__.splitlines()[0], repeat=3)

    from ngramd.daemon.bench.runner import BenchRunner, case_document
    from ngramd.daemon.runtime.loading import load_runtime

    cases = completion_cases(args)
    if not cases:
        print("no completion case to run", file=sys.stderr)
        return 1
    runtime = load_runtime(args.model, runtime="llamacpp")
    runner = BenchRunner(runtime, hf=False, prepared=True)
    if runner.peers is None:
        print("llama-cpp-python's Llama is needed beside the runtime", file=sys.stderr)
        return 1
    rows: list[dict] = []
    every: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        with DecodeClock() as clock:
            for case in cases:
                index = runner.index_for(case.workspace)
                runner.warm_up(case)
                per_pass: dict[str, list[float]] = {v: [] for v in VARIANTS}
                passes: dict[str, list[int]] = {v: [] for v in VARIANTS}
                same = True
                with case_document(index, case):
                    reference = runner._engine_run(case, index, False)  # untimed: the prompt and the answer
                    prompt_ids, answer = runner._prompt_ids(reference), list(reference.result.token_ids)
                    for r in range(args.repeat):
                        for variant in VARIANTS[r % 3:] + VARIANTS[:r % 3]:
                            if variant == "llamacpp_plain":  # decodes max_tokens, past where the answer stops
                                run = runner.peers.run(variant, prompt_ids, case.max_tokens, prepared=True)
                                ms, tokens = run.ms, run.ids[:len(answer)]
                            else:
                                engine_run = runner._engine_run(case, index, variant == "spec", prepared=True)
                                ms, tokens = engine_run.ms, list(engine_run.result.token_ids)
                            start = time.perf_counter() - ms / 1000  # the timed part's start
                            inside, calls = clock.since(start)
                            per_pass[variant].append((ms - inside * 1000) / max(1, calls))
                            passes[variant].append(calls)
                            same = same and tokens == answer
                med = {v: statistics.median(per_pass[v]) for v in VARIANTS}
                for v in VARIANTS:
                    every[v].extend(per_pass[v])
                rows.append({"id": case.id, "outside_ms_per_pass": {v: [round(x, 3) for x in per_pass[v]] for v in VARIANTS},
                             "median": {v: round(med[v], 3) for v in VARIANTS}, "passes": passes, "identical": same})
                print(f"{case.id:26s} ms outside the model a pass: plain {med['plain']:.3f}  spec {med['spec']:.3f}  "
                      f"Llama {med['llamacpp_plain']:.3f}  (passes {passes['spec'][0]}/{passes['plain'][0]})  "
                      f"same tokens: {same}", flush=True)
    finally:
        runner.close()
    summary = {v: round(statistics.median(every[v]), 3) for v in VARIANTS}
    summary["identical"] = sum(r["identical"] for r in rows)
    print(f"{len(rows)} cases, median over runs, ms outside the model a pass: plain {summary['plain']}, "
          f"speculative {summary['spec']}, Llama {summary['llamacpp_plain']}; every run the same tokens in "
          f"{summary['identical']}")
    write_script_run(args, rows, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
