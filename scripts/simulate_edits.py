"""Replay recorded edit outputs through the edit proposer and draft policy, without the model.

The bench JSON (``ngramd bench --cases bench/cases/edits.jsonl --json``) holds each
edit's exact greedy output. Greedy verification accepts the longest prefix of the
draft that agrees with that output, then emits the next output token, so the
passes of any proposer/policy combination can be replayed in seconds, and their
time projected with the verify-cost curve (ms per pass over n new tokens).

    python scripts/simulate_edits.py --bench-json edits.json --cases bench/cases/edits.jsonl \
        --cost 35,35,45,79,109,142,208

Prints, per case, passes and projected ms of the replay against plain decoding (one
pass per token), and the totals. ``--trace CASE_ID`` prints that case's passes one by one
(how the proposer chose the draft, what was drafted, accepted and emitted): where an edit's
passes go. The loop is daemon/engine.py's, minus the model:
propose, ``policy.choose``, verify against the recorded output, feedback.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json

import numpy as np


def replay(proposer, policy, prompt_ids: list[int], output: list[int], cost, max_tokens: int,
           propose_k: int = 64, width: int = 1, trace=None) -> tuple[int, float]:
    """Greedy speculative decoding of ``output`` replayed: (passes, projected ms).

    Drafts are sized against ``max_tokens`` as in the engine (the replay does not
    know where the output will stop); tokens past the recorded output never agree.
    ``trace(pass, drafted tokens, accepted, emitted tokens)`` is called after each pass.
    """
    context = list(prompt_ids)
    done, passes, ms = 0, 0, 0.0
    n = len(output)
    while done < n:
        budget = max_tokens - done - 1
        chosen = []
        draft = None
        if budget > 0:
            draft = proposer.propose(np.asarray(context, dtype=np.int32), min(propose_k, budget), width)
            if draft:
                chosen = policy.choose(draft, budget)
        truth = output[done:]
        best_branch, best_acc, drafted = -1, 0, sum(len(t) for _, t in chosen)
        for bi, tokens in chosen:
            acc = 0
            for a, t in zip(tokens.tolist(), truth):
                if a != t:
                    break
                acc += 1
            if acc > best_acc:
                best_branch, best_acc = bi, acc
        if chosen:
            branch_len = len(next(t for b, t in chosen if b == best_branch)) if best_branch >= 0 \
                else len(chosen[0][1])
            policy.feedback(draft, best_branch, best_acc, branch_len)
        proposer.feedback(best_acc)
        step = output[done: done + best_acc + 1]
        if trace is not None:  # the branch that was kept, or the first drafted
            kept = next((t for b, t in chosen if b == best_branch), chosen[0][1] if chosen else None)
            trace(passes, [] if kept is None else kept.tolist(), best_acc, step)
        context += step
        done += len(step)
        passes += 1
        ms += cost(1 + drafted)
    return passes, ms


def add_cost_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cost", default="35,35,45,79,109,142,208",
                    help="ms per pass for 1,2,4,8,16,32,64 new tokens")


def cost_model(spec: str):
    """The fixed verify-cost curve of ``--cost`` (no online calibration: a replay is deterministic)."""
    from daemon.adaptive import CostModel

    ms = [float(x) for x in spec.split(",")]
    return CostModel(sizes=[1, 2, 4, 8, 16, 32, 64][: len(ms)], ms=ms, online=False)


def workspace_index(indexes: dict, runtime, workspace):
    """The n-gram index of ``workspace``, built once per run into ``indexes``."""
    if workspace not in indexes:
        from index.store import NgramIndex

        indexes[workspace] = NgramIndex(runtime.tokenize_batch)
        indexes[workspace].index_workspace(str(workspace))
    return indexes[workspace]


def print_pass(tokenizer, proposer, i: int, drafted: list[int], accepted: int, emitted: list[int]) -> None:
    """One line of ``--trace``: how the proposer placed its pointer ("fallback": the index
    drafted instead), what it drafted, how much was accepted, what the pass emitted."""
    mode = "fallback" if getattr(proposer, "_used_fallback", False) else proposer.mode
    print(f"  pass {i:3}: {mode:8} drafted {tokenizer.decode(drafted)!r:.50} "
          f"accepted {accepted:2} emitted {tokenizer.decode(emitted)!r:.40}")


def proposer_config(default, settings: list[str]):
    """``default`` (a dataclass) with ``FIELD=VALUE`` settings, each value read as its field's type."""
    changes = {}
    for setting in settings:
        name, _, text = setting.partition("=")
        if not hasattr(default, name):
            raise SystemExit(f"--config: no field {name!r} in {type(default).__name__}")
        kind = type(getattr(default, name))
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise SystemExit(f"--config {name}: true or false, not {text!r}")
            changes[name] = text.lower() == "true"
        elif kind in (int, float, str):
            try:
                changes[name] = kind(text)
            except ValueError:
                raise SystemExit(f"--config {name}: {text!r} is not a valid {kind.__name__}") from None
        else:
            raise SystemExit(f"--config: {name} is a {kind.__name__}, not settable here")
    return dataclasses.replace(default, **changes)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-json", required=True)
    ap.add_argument("--cases", required=True)
    add_cost_argument(ap)
    ap.add_argument("--trace", metavar="CASE_ID", help="print this case's passes one by one")
    ap.add_argument("--by-tokens", action="store_true",
                    help="re-synchronise by tokens, as without a tokenizer (the default matches bytes)")
    ap.add_argument("--config", action="append", default=[], metavar="FIELD=VALUE",
                    help="an EditProposerConfig field other than its default (repeatable), "
                         "e.g. --config cheaper_bytes=false")
    args = ap.parse_args()

    from daemon.adaptive import AdaptiveConfig, DraftPolicy
    from daemon.bench_cases import load_cases
    from daemon.bench_runner import case_document
    from daemon.edit import EditDraftPolicy, edit_proposer
    from daemon.edit_prompt import build_edit_prompt
    from daemon.edit_proposer import EditProposerConfig
    from daemon.model import load_runtime

    cost = cost_model(args.cost)
    rt = load_runtime("tiny", device="cpu")  # only its tokenizer (the default model's) is used
    bench = {c["id"]: c for c in json.load(open(args.bench_json))["cases"]}
    cases = [c for c in load_cases(args.cases) if c.id in bench and c.mode == "edit"]
    indexes: dict = {}
    total = {"passes": 0, "plain": 0, "ms": 0.0, "plain_ms": 0.0}
    print(f"{'case':40} {'tokens':>6} {'passes':>6} {'x passes':>8} {'x ms':>6}")
    for case in cases:
        index = workspace_index(indexes, rt, case.workspace)
        uri = case.path.as_uri()
        ep = build_edit_prompt(rt, case.text, case.offset, case.end or case.offset, case.instruction or "", uri)
        output = list(bench[case.id]["token_ids"])
        pcfg = proposer_config(EditProposerConfig(), args.config)
        with case_document(index, case):  # as in the bench: the file is an open buffer
            proposer = edit_proposer(ep, index, uri, pcfg, None if args.by_tokens else rt.token_bytes)
            policy = EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()), width=pcfg.branches)
            trace = functools.partial(print_pass, rt.tokenizer, proposer) if case.id == args.trace else None
            passes, proj = replay(proposer, policy, ep.prompt_ids, output, cost, case.max_tokens,
                                  pcfg.k_max, pcfg.branches, trace)
        plain_ms = len(output) * cost(1)
        total["passes"] += passes
        total["plain"] += len(output)
        total["ms"] += proj
        total["plain_ms"] += plain_ms
        print(f"{case.id:40} {len(output):>6} {passes:>6} {len(output) / passes:>8.2f} {plain_ms / proj:>6.2f}")
    print(f"{'total':40} {total['plain']:>6} {total['passes']:>6} {total['plain'] / total['passes']:>8.2f} "
          f"{total['plain_ms'] / total['ms']:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
