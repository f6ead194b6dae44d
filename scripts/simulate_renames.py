"""Replay the rename cases as a model that renames exactly would answer them, without the model.

The embedded 135M model seldom does the renames the bench asks for, so the recorded outputs
say little about drafting renamed code. This script takes every case whose instruction is
"Rename the parameter|variable|function OLD to NEW." and builds the answer a model that obeys
would give: the range with the names OLD renamed where Python's ``ast`` sees them (parameters,
variables, the function's own name; not attributes, keyword arguments' names or strings), all
of them, or the first ``--count`` only (a change made once or twice, which a learnt rename gets
wrong), tokenized as the draft is. That answer is replayed through the edit proposer and draft policy
(scripts/simulate_edits.py's loop), with the learnt renames off, after one sighting and after
two (``EditProposerConfig.rename_sightings``).

    python scripts/simulate_renames.py --cases bench/cases/edits.jsonl bench/cases/edits_wide.jsonl \
        --cost 35.4,35.4,40,48.8,66.2,100.1,174.6 [--count 1] [--per-case]
"""

from __future__ import annotations

import argparse
import ast
import re

from simulate_edits import add_cost_argument, cost_model, replay, workspace_index

from daemon.bench_cases import line_starts, load_cases

RENAME = re.compile(r"Rename the (?:parameter|variable|function) (\w+) to (\w+)")


def renamed(text: str, start: int, end: int, old: str, new: str, count: int = 0) -> tuple[str, int]:
    """``text[start:end]`` (a function) with the first ``count`` (0: every) name ``old`` in it
    renamed ``new``, as ``ast`` finds names in the whole file; and how many names ``old`` it has."""
    starts = line_starts(text)  # the line breaks ast counts: \r\n, \r, \n (not \x0c or \u2028)

    def offset(lineno: int, col: int) -> int:  # ast's (line, UTF-8 byte column) -> character offset
        line = text[starts[lineno - 1]:starts[lineno] if lineno < len(starts) else len(text)]
        return starts[lineno - 1] + len(line.encode()[:col].decode())

    spots = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name) and node.id == old:
            at = offset(node.lineno, node.col_offset)
        elif isinstance(node, ast.arg) and node.arg == old:
            at = offset(node.lineno, node.col_offset)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == old:
            at = text.index(old, offset(node.lineno, node.col_offset))  # after "def " / "class "
        else:
            continue
        if start <= at < end:
            spots.append(at)
    spots.sort()
    function = text[start:end]
    for at in reversed(spots[:count] if count else spots):
        function = function[:at - start] + new + function[at - start + len(old):]
    return function, len(spots)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", required=True)
    add_cost_argument(ap)
    ap.add_argument("--count", type=int, default=0, help="rename only the first COUNT occurrences (0: all)")
    ap.add_argument("--per-case", action="store_true")
    args = ap.parse_args()

    from daemon.adaptive import AdaptiveConfig, DraftPolicy
    from daemon.bench_runner import case_document
    from daemon.edit import EditDraftPolicy, edit_proposer
    from daemon.edit_prompt import build_edit_prompt
    from daemon.edit_proposer import EditProposerConfig
    from daemon.model import load_runtime

    cost = cost_model(args.cost)
    rt = load_runtime("tiny", device="cpu")  # only its tokenizer (the default model's) is used
    cases = [(c, *m.groups()) for path in args.cases for c in load_cases(path)
             if c.mode == "edit" and (m := RENAME.search(c.instruction or ""))]
    configs = {"off": EditProposerConfig(learn_substitutions=False),
               "1 sighting": EditProposerConfig(rename_sightings=1),
               "2 sightings": EditProposerConfig(rename_sightings=2)}
    indexes: dict = {}
    totals = {name: [0, 0.0] for name in configs}
    tokens = names_in_originals = 0
    plain_ms = 0.0
    for case, old, new in cases:
        index = workspace_index(indexes, rt, case.workspace)
        uri = case.path.as_uri()
        ep = build_edit_prompt(rt, case.text, case.offset, case.end, case.instruction, uri)
        new_range, names = renamed(case.text, case.offset, case.end, old, new, args.count)
        text = case.text[:case.offset] + new_range + case.text[case.end:]
        answer = list(build_edit_prompt(rt, text, case.offset, case.offset + len(new_range), case.instruction,
                                        uri).draft_ids)
        tokens += len(answer)
        names_in_originals += names
        plain_ms += len(answer) * cost(1)
        row = []
        for name, pcfg in configs.items():
            with case_document(index, case):
                proposer = edit_proposer(ep, index, uri, pcfg, rt.token_bytes)
                policy = EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()))
                passes, ms = replay(proposer, policy, ep.prompt_ids, answer, cost, len(answer) + 8)
            totals[name][0] += passes
            totals[name][1] += ms
            row.append(passes)
        if args.per_case:
            print(f"{case.id:42} {len(answer):5} tokens, passes " + " / ".join(map(str, row)))
    print(f"{len(cases)} renames, {names_in_originals} names in the originals, {tokens} answer tokens"
          + (f", first {args.count} occurrence(s) renamed" if args.count else ", all renamed"))
    for name, (passes, ms) in totals.items():
        print(f"  learnt renames {name:12}: {passes:5} passes, {plain_ms / ms:5.2f}x over plain (projected ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
