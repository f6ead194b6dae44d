"""Time to first token of an edit asked again on the same selection (KV cache reuse).

    .venv/bin/python scripts/bench_edit_reuse.py [--case ID]

Runs one bench edit case (bench/cases/edits.jsonl) through one ``Completer`` four
times: cold, the same instruction again, and two other instructions. Each edit
prompt differs from the previous one only in its instruction, so the daemon's
per-document edit KV cache (key ``("edit", uri)``) leaves only the instruction to prefill.
"""

from __future__ import annotations

import argparse
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "bench" / "cases" / "edits.jsonl"
INSTRUCTIONS = ("Add type hints.", "Add type hints.", "Add type hints to the function.", "Rename s to text.")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="edit-hints-json-py_encode_basestring")
    ap.add_argument("--max-tokens", type=int, default=100)
    args = ap.parse_args()

    from daemon.bench_cases import load_cases
    from daemon.completer import Completer
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime
    from daemon.requests import EditRequest

    case = next(c for c in load_cases(CASES) if c.id == args.case)
    completer = Completer(load_runtime(None, device="cpu"), None, EngineConfig(add_history=False))
    print("| instruction | prompt tokens prefilled / reused | first token | total | passes |")
    print("|---|---:|---:|---:|---:|")
    for instruction in INSTRUCTIONS:
        r = completer.edit(EditRequest(uri=case.path.as_uri(), text=case.text, start=case.offset,
                                       end=case.end or case.offset, instruction=instruction,
                                       max_tokens=args.max_tokens))
        st = r.stats
        print(f"| {instruction} | {st.prefill_tokens} / {st.reused_tokens} | {st.first_token_ms:,.0f} ms "
              f"| {st.ms:,.0f} ms | {st.forward_passes} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
