"""First-suggestion latency where the cursor came to rest, with and without ``prepareComplete``.

    .venv/bin/python scripts/bench_completion_prepared.py [--cases bench/cases/stdlib.jsonl] [--repeat 3]
        [--typed 3] [--ids A,B]

The editors send ``ngramd.prepareCompletion`` when the cursor has rested 300 ms: the
daemon prefills the completion prompt there (``Completer.prepare_complete``) before the
user types. The user then types a few characters and the editor asks for a suggestion,
which prefills only what was typed, and decodes.

Per completion case and repeat, four runs, interleaved, on one Completer with the case's
workspace index (as ``ngramd bench``: the case's file out of the index, its text the open
buffer, multi-line, the case's max_tokens, no history), each after the document's KV
caches are dropped:
- cold speculative / cold plain: the suggestion alone, on a cold cache (a place asked
  about for the first time without a prepare: ``ngramd bench``'s protocol);
- prepared speculative / prepared plain: ``prepare_complete`` at the case's cursor first,
  untimed (its own time is reported: it runs while the user reads, moves, thinks), then
  the suggestion, timed.
The suggestion is asked after the first ``--typed`` characters of the original code at
the cursor (the file as it is on disk; none when they would cross a line) are typed.
Each ``ms`` is wall clock around ``Completer.complete``. Medians over the repeats; every
run's tokens must equal the cold plain run's (``identical``).
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from pathlib import Path

from prepared_runs import measure_cases, parse_args, total

CASES = Path(__file__).resolve().parents[1] / "bench" / "cases" / "stdlib.jsonl"


def typed_case(case, n: int):
    """``case`` with the first ``n`` characters of the original code at its cursor typed."""
    original = (case.workspace / case.file).read_text(encoding="utf-8")
    typed = original[case.offset:case.offset + n] if original[:case.offset] == case.text[:case.offset] else ""
    if "\n" in typed:
        typed = ""
    text = case.text[:case.offset] + typed + case.text[case.offset:]
    return dataclasses.replace(case, text=text, offset=case.offset + len(typed)), typed


def main() -> int:
    args = parse_args(CASES, "completion", lambda ap: ap.add_argument(
        "--typed", type=int, default=3, help="characters typed after the prepare (default 3)"))

    from daemon.requests import CompletionRequest

    typed_of = {}

    def calls(completer, rested):
        asked, typed_of[rested.id] = typed_case(rested, args.typed)
        uri = rested.path.as_uri()
        return (lambda: completer.prepare_complete(uri, rested.text, rested.offset),
                lambda speculate: completer.complete(CompletionRequest(
                    uri=uri, text=asked.text, offset=asked.offset, max_tokens=asked.max_tokens, multiline=True,
                    speculate=speculate), threading.Event()))

    rows = []
    for rested, m in measure_cases(args, "complete", calls):
        rows.append({"id": rested.id, "kind": rested.kind, "typed": typed_of[rested.id],
                     "tokens": len(m.first["cold_plain"].token_ids), **m.ms, "prepare_ms": m.prepare_ms,
                     "prefill_cold": m.first["cold_spec"].stats.prefill_tokens,
                     "prefill_prepared": m.first["prep_spec"].stats.prefill_tokens, "identical": m.identical})

    print()
    print("| id | kind | typed | tok | prefill cold / prepared | prepare | cold spec | cold plain | x "
          "| prepared spec | prepared plain | x | sooner | same |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['id']} | {r['kind']} | `{r['typed']}` | {r['tokens']} | {r['prefill_cold']} / "
              f"{r['prefill_prepared']} | {r['prepare_ms']:,.0f} | {r['cold_spec']:,.0f} | {r['cold_plain']:,.0f} "
              f"| {r['cold_plain'] / r['cold_spec']:.2f}x | {r['prep_spec']:,.0f} | {r['prep_plain']:,.0f} "
              f"| {r['prep_plain'] / r['prep_spec']:.2f}x | {r['cold_spec'] / r['prep_spec']:.2f}x "
              f"| {'yes' if r['identical'] else 'NO'} |")
    print()
    print(f"identical: {sum(r['identical'] for r in rows)}/{len(rows)}")
    for kind in ("all", "ordinary", "repeat", "norepeat"):
        group = [r for r in rows if kind == "all" or r["kind"] == kind]
        if group:
            print(f"{kind} ({len(group)}): cold {total(group, 'cold_plain', 'cold_spec'):.2f}x over plain in total; "
                  f"prepared {total(group, 'prep_plain', 'prep_spec'):.2f}x over prepared plain "
                  f"(median {statistics.median(r['prep_plain'] / r['prep_spec'] for r in group):.2f}x); "
                  f"prepared speculative vs cold plain {total(group, 'cold_plain', 'prep_spec'):.2f}x; "
                  f"answers {total(group, 'cold_spec', 'prep_spec'):.2f}x sooner than unprepared")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
