"""The prompt's last prefill piece in the first decoding pass (``EngineConfig.fuse_prefill``), on and off.

    .venv/bin/python scripts/bench_fused_prefill.py [--cases bench/cases/edits.jsonl] [--repeat 3] [--ids A,B]

What a user waits for after a prepare (``prepareEdit`` / ``prepareComplete``, docs/rpc.md): the
request prefills only its uncached tail (the instruction, the characters typed) and
decodes. Unfused, that tail is a forward pass of its own before the first draft is
verified; fused, it rides in the first verify pass.

Per case and repeat, four runs, interleaved: fused / apart x speculative / plain, each on
its own Completer (the case's workspace index, as ``ngramd bench``), each after the
document's KV caches are dropped and a prepare (untimed). Edit cases prepare up to the
instruction; completion cases prepare at the cursor and ask after the next ``--typed``
characters of the code there are typed (scripts/bench_completion_prepared.py). Each ``ms`` is wall
clock around the request; medians over the repeats; every run's tokens must equal the
first plain run's (``identical``). ``passes``: the speculative request's forward passes,
prefill ones included (the last run's), fused / apart.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from prepared_runs import parse_args, total

CASES = Path(__file__).resolve().parents[1] / "bench" / "cases" / "edits.jsonl"
VARIANTS = [(fuse, spec) for fuse in (True, False) for spec in (True, False)]


def name(fuse: bool, spec: bool) -> str:
    return f"{'fused' if fuse else 'apart'}_{'spec' if spec else 'plain'}"


def main() -> int:
    args = parse_args(CASES, "edit or completion", lambda ap: ap.add_argument(
        "--typed", type=int, default=3, help="completions: characters typed after the prepare"))

    from bench_completion_prepared import typed_case

    from daemon.bench_cases import load_cases
    from daemon.bench_runner import BenchRunner, case_document
    from daemon.completer import Completer
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime
    from daemon.requests import CompletionRequest, EditRequest

    wanted = {i for i in args.ids.split(",") if i}
    cases = [c for c in load_cases(args.cases) if not wanted or c.id in wanted]
    rt = load_runtime(None, device="cpu")
    forward, calls = rt.forward, [0]

    def counted_forward(*a, **k):
        calls[0] += 1
        return forward(*a, **k)

    rt.forward = counted_forward
    runner = BenchRunner(rt, hf=False)  # only for its per-workspace index
    rows = []
    for n, case in enumerate(cases):
        index = runner.index_for(case.workspace)
        completers = {fuse: Completer(rt, index, EngineConfig(add_history=False, fuse_prefill=fuse))
                      for fuse in (True, False)}
        uri, end = case.path.as_uri(), case.end or case.offset

        def run(fuse: bool, spec: bool):
            completer = completers[fuse]
            completer.drop_cache(uri)
            if case.mode == "edit":
                completer.prepare_edit(uri, case.text, case.offset, end)
                request = EditRequest(uri=uri, text=case.text, start=case.offset, end=end,
                                      instruction=case.instruction, speculate=spec)
                passes = calls[0]
                t0 = time.perf_counter()
                result = completer.edit(request)
            else:
                completer.prepare_complete(uri, case.text, case.offset)
                asked, _ = typed_case(case, args.typed)
                request = CompletionRequest(uri=uri, text=asked.text, offset=asked.offset,
                                            max_tokens=asked.max_tokens, multiline=True, speculate=spec)
                passes = calls[0]
                t0 = time.perf_counter()
                result = completer.complete(request, threading.Event())
            return (time.perf_counter() - t0) * 1000, result, calls[0] - passes

        ms: dict[str, list[float]] = {name(*v): [] for v in VARIANTS}
        outs, passes = [], {}
        with case_document(index, case):
            for r in range(args.repeat + (n == 0)):  # the first case warms up once, untimed
                for fuse, spec in VARIANTS:
                    t, result, passes[name(fuse, spec)] = run(fuse, spec)
                    if n == 0 and r == 0:
                        continue
                    ms[name(fuse, spec)].append(t)
                    outs.append(result.token_ids)
        med = {k: statistics.median(v) for k, v in ms.items()}
        rows.append({"id": case.id, "tokens": len(outs[0]), **med, "identical": all(o == outs[0] for o in outs),
                     "passes": f"{passes['fused_spec']} / {passes['apart_spec']}"})
        print(f"{case.id}: done", flush=True)

    print()
    print("| id | tok | passes | fused spec | apart spec | fused plain | apart plain | x fused | x apart | same |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['id']} | {r['tokens']} | {r['passes']} | {r['fused_spec']:,.0f} | {r['apart_spec']:,.0f} "
              f"| {r['fused_plain']:,.0f} | {r['apart_plain']:,.0f} | {r['fused_plain'] / r['fused_spec']:.2f}x "
              f"| {r['apart_plain'] / r['apart_spec']:.2f}x | {'yes' if r['identical'] else 'NO'} |")

    print()
    print(f"identical: {sum(r['identical'] for r in rows)}/{len(rows)}")
    print(f"speculative over plain, in total: fused {total(rows, 'fused_plain', 'fused_spec'):.2f}x, "
          f"apart {total(rows, 'apart_plain', 'apart_spec'):.2f}x; fusing makes speculative "
          f"{total(rows, 'apart_spec', 'fused_spec'):.3f}x and plain {total(rows, 'apart_plain', 'fused_plain'):.3f}x as fast")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
