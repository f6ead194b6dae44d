"""Edit latency once the instruction is given, with and without ``prepareEdit``.

    .venv/bin/python scripts/bench_edit_prepared.py [--cases bench/cases/edits.jsonl] [--repeat 3] [--ids A,B]

The editors send ``ngramd.prepareRewrite`` when they open the instruction prompt: the
daemon prefills the edit's prompt up to the instruction while the user types it
(``prepare_edit``, daemon/edit.py). What the user then waits for is the edit itself,
which prefills only the instruction and what follows it, and decodes.

Per edit case and repeat, four runs, interleaved, on one Completer with the case's
workspace index (as ``ngramd bench``: the case's file out of the index, its text the
open buffer, no history), each after the document's KV caches are dropped:
- cold speculative / cold plain: the edit alone (``ngramd bench``'s protocol);
- prepared speculative / prepared plain: ``prepare_edit`` first, untimed (its own time
  is reported: it runs while the user types), then the edit, timed.
Each ``ms`` is wall clock around ``Completer.edit``. Medians over the repeats; every
run's tokens must equal the cold plain run's (``identical``). Few-line edits: the
answer changes at most 3 lines (daemon/bench_report.py ``changed_lines``).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "bench" / "cases" / "edits.jsonl"
VARIANTS = ("cold_spec", "cold_plain", "prep_spec", "prep_plain")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=str(CASES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ids", default="", help="comma-separated case ids (default: every edit case)")
    args = ap.parse_args()

    from daemon.bench_cases import load_cases
    from daemon.bench_report import FEW_LINES, changed_lines
    from daemon.bench_runner import BenchRunner, case_document
    from daemon.completer import Completer
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime
    from daemon.requests import EditRequest

    wanted = {i for i in args.ids.split(",") if i}
    cases = [c for c in load_cases(args.cases) if c.mode == "edit" and (not wanted or c.id in wanted)]
    rt = load_runtime(None, device="cpu")
    runner = BenchRunner(rt, hf=False)  # only for its per-workspace index

    def run(completer, case, variant):
        uri = case.path.as_uri()
        completer.drop_cache(uri)
        prepare_ms = None
        if variant.startswith("prep"):
            t0 = time.perf_counter()
            completer.prepare_edit(uri, case.text, case.offset, case.end or case.offset)
            prepare_ms = (time.perf_counter() - t0) * 1000
        req = EditRequest(uri=uri, text=case.text, start=case.offset, end=case.end or case.offset,
                          instruction=case.instruction or "", max_tokens=case.max_tokens,
                          speculate=variant.endswith("spec"))
        t0 = time.perf_counter()
        result = completer.edit(req, threading.Event())
        return result, (time.perf_counter() - t0) * 1000, prepare_ms

    rows = []
    for n, case in enumerate(cases):
        index = runner.index_for(case.workspace)
        completer = Completer(rt, index, EngineConfig(add_history=False))
        with case_document(index, case):
            if n == 0:  # one-time costs (kernels, calibration) out of the first case
                for variant in VARIANTS:
                    run(completer, case, variant)
            ms = {v: [] for v in VARIANTS}
            prep_ms, outs = [], {}
            for _ in range(args.repeat):
                for variant in VARIANTS:
                    result, t, p = run(completer, case, variant)
                    ms[variant].append(t)
                    outs.setdefault(variant, []).append(result)
                    if p is not None:
                        prep_ms.append(p)
        ref = outs["cold_plain"][0]
        identical = all(r.token_ids == ref.token_ids for runs in outs.values() for r in runs)
        med = {v: statistics.median(ms[v]) for v in VARIANTS}
        prepared = outs["prep_spec"][0].stats
        rows.append({"id": case.id, "tokens": len(ref.token_ids), **med, "prepare_ms": statistics.median(prep_ms),
                     "prefill_cold": outs["cold_spec"][0].stats.prefill_tokens,
                     "prefill_prepared": prepared.prefill_tokens,
                     "changed_lines": changed_lines(case.text[case.offset:case.end or case.offset], ref.text),
                     "stop_reason": ref.stop_reason, "identical": identical})
        print(f"{case.id}: done", flush=True)

    print()
    print("| id | tok | lines | prefill cold / prepared | prepare | cold spec | cold plain | x | prepared spec "
          "| prepared plain | x | same |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['id']} | {r['tokens']} | {r['changed_lines']} | {r['prefill_cold']} / {r['prefill_prepared']} "
              f"| {r['prepare_ms']:,.0f} | {r['cold_spec']:,.0f} | {r['cold_plain']:,.0f} "
              f"| {r['cold_plain'] / r['cold_spec']:.2f}x | {r['prep_spec']:,.0f} | {r['prep_plain']:,.0f} "
              f"| {r['prep_plain'] / r['prep_spec']:.2f}x | {'yes' if r['identical'] else 'NO'} |")

    def total(group, num, den):
        return sum(r[num] for r in group) / sum(r[den] for r in group) if group else float("nan")
    few = [r for r in rows if r["changed_lines"] <= FEW_LINES and r["stop_reason"] != "max_tokens"]
    print()
    print(f"identical: {sum(r['identical'] for r in rows)}/{len(rows)}")
    for name, group in (("all edits", rows), (f"edits changing <= {FEW_LINES} lines", few)):
        print(f"{name} ({len(group)}): cold {total(group, 'cold_plain', 'cold_spec'):.2f}x over plain in total; "
              f"prepared {total(group, 'prep_plain', 'prep_spec'):.2f}x over prepared plain; "
              f"prepared speculative vs cold plain {total(group, 'cold_plain', 'prep_spec'):.2f}x; "
              f"prepared vs cold speculative {total(group, 'cold_spec', 'prep_spec'):.2f}x")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
