"""Replay the rename cases as a model that renames exactly would answer them, without the model.

The embedded 135M model seldom does the renames the bench asks for, so the recorded outputs
say little about drafting renamed code. This script takes every case whose instruction is
"Rename the parameter|variable|function OLD to NEW." and builds the answer a model that obeys
would give: the range with OLD replaced as a whole word (all occurrences, or the first
``--count`` only: a change made once or twice, which a learnt rename gets wrong), tokenized as
the draft is. That answer is replayed through the edit proposer and draft policy
(scripts/simulate_edits.py's loop), with the learnt renames off, after one sighting and after
two (``EditProposerConfig.rename_sightings``).

    python scripts/simulate_renames.py --cases bench/cases/edits.jsonl bench/cases/edits_wide.jsonl \
        --cost 35.4,35.4,40,48.8,66.2,100.1,174.6 [--count 1] [--per-case]
"""

from __future__ import annotations

import argparse
import re

from simulate_edits import replay

RENAME = re.compile(r"Rename the (?:parameter|variable|function) (\w+) to (\w+)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", required=True)
    ap.add_argument("--cost", default="35,35,45,79,109,142,208", help="ms per pass for 1,2,4,8,16,32,64 new tokens")
    ap.add_argument("--count", type=int, default=0, help="rename only the first COUNT occurrences (0: all)")
    ap.add_argument("--per-case", action="store_true")
    args = ap.parse_args()

    from daemon.adaptive import AdaptiveConfig, CostModel, DraftPolicy
    from daemon.bench_cases import load_cases
    from daemon.bench_runner import case_document
    from daemon.edit import EditDraftPolicy, edit_proposer
    from daemon.edit_prompt import build_edit_prompt
    from daemon.edit_proposer import EditProposerConfig
    from daemon.model import load_runtime
    from index.store import NgramIndex

    cost = CostModel(sizes=[1, 2, 4, 8, 16, 32, 64], ms=[float(x) for x in args.cost.split(",")], online=False)
    rt = load_runtime("tiny", device="cpu")  # only its tokenizer (the default model's) is used
    cases = [(c, *m.groups()) for path in args.cases for c in load_cases(path)
             if c.mode == "edit" and (m := RENAME.search(c.instruction or ""))]
    configs = {"off": EditProposerConfig(learn_substitutions=False),
               "1 sighting": EditProposerConfig(rename_sightings=1),
               "2 sightings": EditProposerConfig(rename_sightings=2)}
    indexes: dict = {}
    totals = {name: [0, 0.0] for name in configs}
    tokens = occurrences = 0
    plain_ms = 0.0
    for case, old, new in cases:
        if case.workspace not in indexes:
            indexes[case.workspace] = NgramIndex(rt.tokenize_batch)
            indexes[case.workspace].index_workspace(str(case.workspace))
        uri = case.path.as_uri()
        ep = build_edit_prompt(rt, case.text, case.offset, case.end, case.instruction, uri)
        original = case.text[case.offset:case.end]
        renamed = re.sub(rf"\b{old}\b", new, original, count=args.count)
        text = case.text[:case.offset] + renamed + case.text[case.end:]
        answer = list(build_edit_prompt(rt, text, case.offset, case.offset + len(renamed), case.instruction,
                                        uri).draft_ids)
        tokens += len(answer)
        occurrences += len(re.findall(rf"\b{old}\b", original))
        plain_ms += len(answer) * cost(1)
        row = []
        for name, pcfg in configs.items():
            with case_document(indexes[case.workspace], case):
                proposer = edit_proposer(ep, indexes[case.workspace], uri, pcfg, rt.token_bytes)
                policy = EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()))
                passes, ms = replay(proposer, policy, ep.prompt_ids, answer, cost, len(answer) + 8)
            totals[name][0] += passes
            totals[name][1] += ms
            row.append(passes)
        if args.per_case:
            print(f"{case.id:42} {len(answer):5} tokens, passes " + " / ".join(map(str, row)))
    print(f"{len(cases)} renames, {occurrences} occurrences in the originals, {tokens} answer tokens"
          + (f", first {args.count} occurrence(s) renamed" if args.count else ", all renamed"))
    for name, (passes, ms) in totals.items():
        print(f"  learnt renames {name:12}: {passes:5} passes, {plain_ms / ms:5.2f}x over plain (projected ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
