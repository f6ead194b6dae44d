"""Replay recorded greedy outputs against the index: what would each draft policy accept?

No model runs: the bench JSON (``ngramd bench --json``) holds, per case, the exact
greedy token ids the model produced. At every step the index is asked for a draft
for ``prompt + output[:i]``; the tokens that agree with ``output[i:]`` are what
greedy verification would accept. Passes and time are then projected with a
verify-cost curve (ms per pass for n new tokens), so draft policies can be compared
in seconds instead of re-running the model.

    python scripts/simulate_drafts.py --bench-json bench.json --cases bench/cases/stdlib.jsonl \
        --cost 70,85,90,100,135,190

Per match length it prints how often a draft's first token agrees and how often each later
token does given the one before it did (``next-ok``); among the policies, ``oracle`` drafts
exactly the tokens that will agree (none where none will), step by step: close to the most any
choice of draft length could give with these drafts (greedy per step, not the optimum over a
whole output: where a pass's cost rises steeply with its length, drafting fewer can pay), against
which ``adaptive`` (the engine's policy) is read.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np


def parse_cost(spec: str) -> tuple[list[int], list[float]]:
    """'70,85,90,100,135,190' = ms for 1,2,4,8,16,32 new tokens: (sizes, ms)."""
    ms = [float(x) for x in spec.split(",")]
    return [1, 2, 4, 8, 16, 32, 64][: len(ms)], ms


def load_cost(spec: str):
    """ms of a pass over n new tokens, linear between the sizes of ``parse_cost`` (the engine's CostModel)."""
    from daemon.adaptive import CostModel

    sizes, ms = parse_cost(spec)
    return CostModel(sizes=sizes, ms=ms, online=False)


def trace_case(index, uri, prompt_ids, output, k):
    """Per step: (match_len, source, count, draft agreeing prefix length, draft length)."""
    from daemon.proposer import IndexProposer

    return trace_proposer(IndexProposer(index, uri), prompt_ids, output, k)


def trace_proposer(proposer, prompt_ids, output, k):
    """``trace_case`` for any proposer (``propose(context, k, w)``)."""
    steps = []
    ctx = list(prompt_ids)
    for i in range(len(output)):
        draft = proposer.propose(np.asarray(ctx, dtype=np.int32), k, 1)
        if draft:
            b = draft.best
            truth = output[i:]
            agree = 0
            for a, t in zip(b.tokens.tolist(), truth):
                if a != t:
                    break
                agree += 1
            steps.append((b.match_len, int(b.source), b.count, agree, len(b.tokens)))
        else:
            steps.append((0, -1, 0, 0, 0))
        ctx.append(output[i])
    return steps


def oracle_policy(m, s, c, L, agree):
    """Drafts exactly the tokens that will agree, step by step (greedy: near the best any
    draft-length policy can do, not a strict bound on it)."""
    return min(agree, L)


oracle_policy.knows_agreement = True


def simulate(steps, n_out, cost, choose):
    """Greedy speculative decode replayed: returns (passes, ms)."""
    i, passes, ms = 0, 0, 0.0
    while i < n_out:
        match_len, source, count, agree, length = steps[i]
        if not length:
            d = 0
        elif getattr(choose, "knows_agreement", False):
            d = choose(match_len, source, count, length, agree)
        else:
            d = choose(match_len, source, count, length)
        a = min(agree, d)
        if hasattr(choose, "feedback"):
            choose.feedback(a)
        passes += 1
        ms += cost(1 + d)
        i += a + 1
    return passes, ms


def adaptive_policy(cost_spec: str):
    """The engine's own DraftPolicy, learning acceptance online as the replay goes."""
    from daemon.adaptive import AdaptiveConfig, DraftPolicy
    from index.draft import Branch, Draft, Source

    policy = DraftPolicy(load_cost(cost_spec), AdaptiveConfig())
    state = {}

    def choose(m, s, c, L):
        draft = Draft((Branch(tokens=np.arange(L, dtype=np.int32), count=max(c, 1), source=Source(s),
                              match_len=m),))
        chosen = policy.choose(draft, L)
        d = len(chosen[0][1]) if chosen else 0
        state["last"] = (draft, d)
        return d

    def feedback(accepted):
        draft, d = state.pop("last", (None, 0))
        if draft is not None and d:
            policy.feedback(draft, 0 if accepted else -1, accepted, d)

    choose.feedback = feedback
    return choose


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-json", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--cost", default="70,85,90,100,135,190")
    ap.add_argument("--k", type=int, default=32)
    args = ap.parse_args()

    from daemon.bench_cases import load_cases
    from daemon.bench_runner import case_document
    from daemon.model import load_runtime
    from daemon.prompt import PromptConfig, build_prompt
    from index.store import NgramIndex

    rt = load_runtime("tiny", device="cpu")  # only its tokenizer is used
    bench = {c["id"]: c for c in json.load(open(args.bench_json))["cases"]}
    cases = [c for c in load_cases(args.cases) if c.id in bench]
    cost = load_cost(args.cost)
    indexes = {}
    # match_len bucket -> [steps with draft, first ok, agree sum, later tokens judged, later ok]
    by_bucket = defaultdict(lambda: [0, 0, 0, 0, 0])
    traces = []
    for case in cases:
        if case.workspace not in indexes:  # the bench's index: the whole workspace
            indexes[case.workspace] = NgramIndex(rt.tokenize_batch)
            indexes[case.workspace].index_workspace(str(case.workspace))
        idx = indexes[case.workspace]
        prompt = build_prompt(rt, case.text, case.offset, PromptConfig())
        out = list(bench[case.id]["token_ids"])
        with case_document(idx, case):  # as in the bench: the original file left out
            steps = trace_case(idx, case.path.as_uri(), prompt.ids, out, args.k)
        traces.append((case, out, steps))
        for m, s, c, agree, length in steps:
            if length:
                key = min(m, 12)
                by_bucket[key][0] += 1
                by_bucket[key][1] += agree > 0
                by_bucket[key][2] += agree
                judged = min(agree, length - 1)  # token i > 0 is judged when the i before it agreed
                by_bucket[key][3] += judged
                by_bucket[key][4] += min(agree, length) - 1 if agree else 0

    print("match_len  drafts  first-token-ok  next-ok  mean-agree")
    for m in sorted(by_bucket):
        n, ok, s, judged, later = by_bucket[m]
        nxt = f"{later / judged:>7.2f}" if judged else f"{'-':>7}"
        print(f"{m:>9}  {n:>6}  {ok / n:>14.2f}  {nxt}  {s / n:>10.2f}")

    policies = {
        "plain": lambda m, s, c, L: 0,
        "all k": lambda m, s, c, L: L,
        "m>=3 k8": lambda m, s, c, L: min(L, 8) if m >= 3 else 0,
        "m>=4 k8": lambda m, s, c, L: min(L, 8) if m >= 4 else 0,
        "m>=4 k16": lambda m, s, c, L: min(L, 16) if m >= 4 else 0,
        "m>=6 k16": lambda m, s, c, L: min(L, 16) if m >= 6 else 0,
        "m>=8 k32": lambda m, s, c, L: min(L, 32) if m >= 8 else 0,
        "k=2m": lambda m, s, c, L: min(L, 2 * m) if m >= 3 else 0,
        "k<=2 m>=3": lambda m, s, c, L: min(L, 2) if m >= 3 else 0,
        "k<=3 m>=4": lambda m, s, c, L: min(L, 3) if m >= 4 else 0,
        "k<=4 m>=5": lambda m, s, c, L: min(L, 4) if m >= 5 else 0,
        "adaptive": adaptive_policy(args.cost),
        "oracle": oracle_policy,
    }
    print(f"\n{'policy':<10} " + " ".join(f"{k:>8}" for k in ("ordinary", "repeat", "norepeat", "all")))
    plain_ms = defaultdict(float)
    for case, out, steps in traces:
        plain_ms[case.kind] += simulate(steps, len(out), cost, policies["plain"])[1]
    for name, pol in policies.items():
        ms = defaultdict(float)
        for case, out, steps in traces:
            ms[case.kind] += simulate(steps, len(out), cost, pol)[1]
        row = [plain_ms[k] / ms[k] if ms[k] else 0 for k in ("ordinary", "repeat", "norepeat")]
        row.append(sum(plain_ms.values()) / sum(ms.values()))
        print(f"{name:<10} " + " ".join(f"{x:>8.2f}" for x in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
