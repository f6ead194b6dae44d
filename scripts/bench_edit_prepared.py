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

import threading
from pathlib import Path

from prepared_runs import measure_cases, parse_args, total

CASES = Path(__file__).resolve().parents[1] / "bench" / "cases" / "edits.jsonl"


def main() -> int:
    args = parse_args(CASES, "edit")

    from daemon.bench_report import FEW_LINES, changed_lines
    from daemon.requests import FINISHED_EDIT_STOPS, EditRequest

    def calls(completer, case):
        uri, end = case.path.as_uri(), case.end or case.offset
        return (lambda: completer.prepare_edit(uri, case.text, case.offset, end),
                lambda speculate: completer.edit(EditRequest(
                    uri=uri, text=case.text, start=case.offset, end=end, instruction=case.instruction or "",
                    max_tokens=case.max_tokens, speculate=speculate), threading.Event()))

    rows = []
    for case, m in measure_cases(args, "edit", calls):
        ref = m.first["cold_plain"]
        rows.append({"id": case.id, "tokens": len(ref.token_ids), **m.ms, "prepare_ms": m.prepare_ms,
                     "prefill_cold": m.first["cold_spec"].stats.prefill_tokens,
                     "prefill_prepared": m.first["prep_spec"].stats.prefill_tokens,
                     "changed_lines": changed_lines(case.text[case.offset:case.end or case.offset], ref.text),
                     "stop_reason": ref.stop_reason, "identical": m.identical})

    print()
    print("| id | tok | lines | prefill cold / prepared | prepare | cold spec | cold plain | x | prepared spec "
          "| prepared plain | x | same |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['id']} | {r['tokens']} | {r['changed_lines']} | {r['prefill_cold']} / {r['prefill_prepared']} "
              f"| {r['prepare_ms']:,.0f} | {r['cold_spec']:,.0f} | {r['cold_plain']:,.0f} "
              f"| {r['cold_plain'] / r['cold_spec']:.2f}x | {r['prep_spec']:,.0f} | {r['prep_plain']:,.0f} "
              f"| {r['prep_plain'] / r['prep_spec']:.2f}x | {'yes' if r['identical'] else 'NO'} |")
    few = [r for r in rows if r["changed_lines"] <= FEW_LINES and r["stop_reason"] in FINISHED_EDIT_STOPS]
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
