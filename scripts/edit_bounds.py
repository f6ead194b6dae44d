"""Upper bounds on the edit speedup: the recorded answers replayed with drafters that know them.

``scripts/simulate_edits.py`` replays the real proposer and draft policy. This script asks
how much faster the same answers could go with better drafts, each bound knowing more:

- ``policy``: the real proposer and policy (the replay of simulate_edits.py, for reference);
- ``length``: the real proposer, with each draft cut to exactly what the model will accept
  (none when nothing will be): what a perfect draft-length policy could gain;
- ``original``: draft the longest prefix of the rest of the answer found anywhere in the
  original (the selection as shown) or in the answer so far (a loop, a repeated line): a
  perfect re-synchronisation into what the proposer drafts from;
- ``prompt``: the same, found anywhere in the prompt or the answer so far (prompt lookup
  that always picks the right place);
- ``answer``: the answer itself, ``k_max`` tokens a pass (a drafter that is never wrong).

Every pass drafts at most ``k_max`` tokens and is priced on the cost curve; plain decoding
is one 1-token pass per token. The gap between two bounds is what the knowledge the
second adds is worth on these answers.

    python scripts/edit_bounds.py --bench-json edits.json --cases bench/cases/edits.jsonl \
        --cost 35.4,35.4,40,48.8,66.2,100.1,174.6
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import simulate_edits  # noqa: E402  (a sibling script)

BOUNDS = ("policy", "length", "original", "prompt", "answer")


def agreeing(draft: list[int], truth: list[int]) -> int:
    """Tokens of ``draft`` that agree with ``truth`` from the start."""
    n = 0
    for a, t in zip(draft, truth):
        if a != t:
            break
        n += 1
    return n


def longest_copy(source: np.ndarray, truth: list[int], k: int) -> int:
    """Length of the longest prefix of ``truth`` (at most ``k`` tokens) found anywhere in ``source``.

    Example: longest_copy(np.array([1, 2, 3, 1, 2, 4]), [1, 2, 4, 9], 8) == 3.
    """
    if k <= 0 or not truth:
        return 0
    starts = np.flatnonzero(source == truth[0])
    n = 1 if len(starts) else 0
    while len(starts) and n < min(k, len(truth)):
        starts = starts[starts + n < len(source)]
        starts = starts[source[starts + n] == truth[n]]
        if len(starts):
            n += 1
    return n


def replay_bound(bound: str, answer: list[int], prompt_ids: list[int], original: list[int], cost, max_tokens: int,
                 k_max: int, proposer=None, policy=None) -> tuple[int, float]:
    """(passes, projected ms) of decoding ``answer`` with the drafter ``bound`` names."""
    if bound == "policy":
        return simulate_edits.replay(proposer, policy, prompt_ids, answer, cost, max_tokens, k_max)
    context = list(prompt_ids)
    done, passes, ms = 0, 0, 0.0
    written = list(original)  # the original, then the answer so far
    while done < len(answer):
        k = min(k_max, max_tokens - done - 1)
        truth = answer[done:]
        if k <= 0:
            drafted = 0
        elif bound == "length":
            draft = proposer.propose(np.asarray(context, dtype=np.int32), k, 1)
            drafted = agreeing(draft.best.tokens.tolist(), truth) if draft else 0
            proposer.feedback(drafted)
        elif bound == "original":
            drafted = longest_copy(np.asarray(written, dtype=np.int64), truth, k)
        elif bound == "prompt":
            drafted = longest_copy(np.asarray(context, dtype=np.int64), truth, k)
        else:  # answer
            drafted = min(k, len(truth) - 1)
        step = answer[done: done + drafted + 1]
        context += step
        written += step
        done += len(step)
        passes += 1
        ms += cost(1 + drafted)
    return passes, ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-json", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--ids", help="a JSONL file of cases whose ids alone are replayed (e.g. a few-line subset)")
    ap.add_argument("--few-lines", action="store_true",
                    help="only the cases of the bench's edit_few_lines group (answers finished, 1-3 lines changed)")
    simulate_edits.add_cost_argument(ap)
    args = ap.parse_args()

    from daemon.adaptive import AdaptiveConfig, DraftPolicy
    from daemon.bench_cases import load_cases
    from daemon.bench_report import is_few_lines_edit
    from daemon.bench_runner import case_document
    from daemon.edit import EditDraftPolicy, edit_proposer
    from daemon.edit_prompt import build_edit_prompt
    from daemon.edit_proposer import EditProposerConfig
    from daemon.model import load_runtime

    cost = simulate_edits.cost_model(args.cost)
    rt = load_runtime("tiny", device="cpu")  # only its tokenizer (the default model's) is used
    bench = {c["id"]: c for c in json.load(open(args.bench_json))["cases"]}
    wanted = None if not args.ids else {json.loads(line)["id"] for line in open(args.ids) if line.strip()}
    cases = [c for c in load_cases(args.cases)
             if c.id in bench and c.mode == "edit" and (wanted is None or c.id in wanted)
             and (not args.few_lines or is_few_lines_edit(bench[c.id]))]
    config = EditProposerConfig()
    indexes: dict = {}
    plain_total, totals = 0.0, dict.fromkeys(BOUNDS, 0.0)
    print(f"{'case':44} {'tokens':>6} " + " ".join(f"{b:>8}" for b in BOUNDS))
    for case in cases:
        index = simulate_edits.workspace_index(indexes, rt, case.workspace)
        uri = case.path.as_uri()
        ep = build_edit_prompt(rt, case.text, case.offset, case.end or case.offset, case.instruction or "", uri)
        answer = list(bench[case.id]["token_ids"])
        plain = len(answer) * cost(1)
        row = {}
        for bound in BOUNDS:
            with case_document(index, case):  # as in the bench: the file is an open buffer
                proposer = edit_proposer(ep, index, uri, config, rt.token_bytes)
                policy = EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()), width=1)
                _, ms = replay_bound(bound, answer, ep.prompt_ids, ep.draft_ids, cost, case.max_tokens,
                                     config.k_max, proposer, policy)
            row[bound] = ms
            totals[bound] += ms
        plain_total += plain
        print(f"{case.id[:44]:44} {len(answer):>6} " + " ".join(f"{plain / row[b]:>7.2f}x" for b in BOUNDS))
    print(f"{'total (' + str(len(cases)) + ' cases)':44} {'':>6} "
          + " ".join(f"{plain_total / totals[b]:>7.2f}x" for b in BOUNDS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
