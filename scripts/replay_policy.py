#!/usr/bin/env python
"""Replay a bench run's answers through the real proposer and draft policy, priced by the cost curve.

A bench run (``ngramd bench ... --json``) records each case's greedy answer: an edit's or a
completion's. Speculation never changes that answer, so how a drafting policy would fare on it
needs no model: a stand-in runtime (``AnswerRuntime``) answers every pass with the recorded
tokens, the engine runs its real loop (proposer, draft policy, acceptance, stops) in the prepared
flow the bench times, and each pass is priced at the runtime's calibrated cost curve (the one the
daemon's policy reads). The figures are free of the machine's noise, so two policies compare on
the same answers; the bench still measures them.

    .venv/bin/python scripts/replay_policy.py bench/runs/2026-12-06-edits-llamacpp-declined.json
    .venv/bin/python scripts/replay_policy.py bench/runs/2026-12-07-llamacpp-stdlib-f16-reduce-repeat5.json --foresight

Edits draft through ``EditDraftPolicy``, completions through ``DraftPolicy``; ``--foresight``
drafts exactly what the answer takes, the bound of any policy with these proposers, and
``--fixed K`` drafts K tokens of an edit's original whenever it can. Per case: passes, tokens
per pass and the priced speedup over plain decoding (one pass a token), beside the measured one
where the run has it (prepared, against ngramd's plain decoding).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ngramd.daemon.runtime.cache_pool import common_prefix_len

ROOT = Path(__file__).resolve().parents[1]


class AnswerCache:
    """The KV cache of ``AnswerRuntime``: the token ids only (daemon/runtime/base.py KVCache)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens = []

    def reuse_for(self, tokens: Sequence[int]) -> int:
        keep = common_prefix_len(self.tokens, tokens)
        self.crop(keep)
        return keep

    def crop(self, n: int) -> None:
        del self.tokens[n:]

    def select(self, keep: int, positions: Sequence[int]) -> None:
        self.tokens = self.tokens[:keep] + [self.tokens[p] for p in positions]

    def extended(self, new_tokens: Sequence[int]) -> None:
        self.tokens.extend(int(t) for t in new_tokens)


class AnswerRuntime:
    """A runtime whose passes predict a known answer: the row at position p gives the answer's
    token at p + 1 (its prompt's length known), the end-of-text token past it. Everything else
    (tokenizer, token bytes, the calibration key) is the real runtime's. A recorded answer ends
    with what stopped it (an edit's closing fence), so the engine stops where the model did."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.prompt_len = 0
        self.answer: list[int] = []
        self.top_probability: list[float] = []
        self.passes: list[int] = []  # new tokens of each pass, as the caller last emptied it
        self.supports_trees = False
        self.cache: AnswerCache | None = None  # the cache of the newest pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def expect(self, prompt_len: int, answer: Sequence[int], top_probability: Sequence[float] | None = None) -> None:
        """The next answer; ``top_probability``: the model's probability of each of its tokens, if recorded."""
        self.prompt_len, self.answer = prompt_len, [int(t) for t in answer]
        self.top_probability = list(top_probability or [])

    def new_cache(self) -> AnswerCache:
        return AnswerCache()

    def release_cache(self, cache: Any) -> None:
        cache.reset()

    def synchronize(self) -> None:
        pass

    def forward_pass(self, ids: Sequence[int], cache: AnswerCache, keep_last: int | None = None,
                     tree: Any = None) -> np.ndarray:
        assert tree is None, "chains only, as on llama.cpp"
        self.passes.append(len(ids))
        self.cache = cache
        rows = keep_last or len(ids)
        first = len(cache) + len(ids) - rows  # position of the first returned row
        logits = np.zeros((rows, self.vocab_size), dtype=np.float32)  # [rows, vocab]
        eos = self._real.eos_token_id
        for r in range(rows):
            g = first + r + 1 - self.prompt_len  # the answer's index this row predicts
            if g >= 0:
                logits[r, self.answer[g] if g < len(self.answer) else eos] = 1.0
        return logits

    def answer_index(self) -> int:
        """The answer's index of a draft's first token after the newest pass (its pending token is
        the next input)."""
        return len(self.cache or ()) + 1 - self.prompt_len

    def accepted_length(self, draft: Sequence[int]) -> int:
        """How many of ``draft``'s tokens the answer takes after the newest pass: what a policy
        with foresight would draft."""
        g = self.answer_index()
        return common_prefix_len([int(t) for t in draft], self.answer[g:]) if g >= 0 else 0


def sized_policy(length_of: Any, every_draft: bool) -> type:
    """An ``EditDraftPolicy`` that drafts ``length_of(draft)`` tokens of a draft's best branch: of
    every draft, or (``every_draft`` False) of the original's only, the fallback's going to the
    daemon's policy."""
    from ngramd.daemon.edit.editor import EditDraftPolicy
    from ngramd.daemon.engine.policy import cut_branches

    class Sized(EditDraftPolicy):
        def choose(self, draft: Any, budget: int, opening: bool = False) -> list[tuple[int, np.ndarray]]:
            if not every_draft and not self._is_original(draft):
                return self.inner.choose(draft, budget)
            take = min(budget, length_of(draft))
            return cut_branches(draft.branches[:1], take, take)

    return Sized


def sized_completion_policy(length_of: Any) -> type:
    """A completion ``DraftPolicy`` that drafts ``length_of(tokens)`` tokens of the branch where
    that is longest (none where it is 0)."""
    from ngramd.daemon.engine.policy import DraftPolicy

    class Sized(DraftPolicy):
        def probes_opening(self, budget: int) -> bool:
            return True  # every opening is looked up: its draft may be taken

        def choose(self, draft: Any, budget: int, opening: bool = False) -> list[tuple[int, np.ndarray]]:
            if not draft or budget <= 0:
                return []
            lengths = [min(budget, length_of(b.tokens), len(b.tokens)) for b in draft.branches]
            best = max(range(len(lengths)), key=lengths.__getitem__)
            return [(best, np.asarray(draft.branches[best].tokens[:lengths[best]]))] if lengths[best] > 0 else []

    return Sized


def foresight_policy(oracle: AnswerRuntime) -> type:
    """Drafts exactly the tokens the answer will take (and none where it takes none), from the
    original and from the fallback alike: the bound no policy reading only past outcomes can
    pass, with these proposers."""
    return sized_policy(lambda draft: oracle.accepted_length(draft.best.tokens), every_draft=True)


def fixed_policy(length: int) -> type:
    """Drafts ``length`` tokens of the original whenever it can."""
    return sized_policy(lambda draft: length, every_draft=False)


# bands of the probability the model gave the pending token (--openings, where the run has them)
PROBABILITY_BANDS = ((0.5, "<0.5"), (0.9, "0.5-0.9"), (0.99, "0.9-0.99"), (float("inf"), ">=0.99"))


def probability_band(p: float) -> str:
    return next(label for upper, label in PROBABILITY_BANDS if p < upper)


def first_token_outcomes(run: dict[str, Any], cases: dict[str, Any], runtime: Any) -> list[dict[str, Any]]:
    """Every completion draft the proposer makes on ``run``'s answers (probed at every position,
    none verified), grouped as the daemon's ``AcceptanceTracker`` keys them: the request's opening
    or later, the source, the match-length bucket; and, where the run's rows have
    ``top_probability`` (scripts/greedy_answers.py --top-probability), by the band of the
    probability the model gave the pending token, the answer's token before the draft (None for
    an opening: the model wrote nothing yet). Per group: drafts, how many had their first token
    right, and the mean tokens the answer took. A stand-in runtime, as ``replay``."""
    from unittest import mock

    from ngramd.daemon.engine import policy as policy_module
    from ngramd.daemon.engine.policy import DraftPolicy
    from ngramd.index.draft import Source

    oracle = AnswerRuntime(runtime)
    groups: dict[tuple[bool, str, int, str | None], list[int]] = {}

    class Recording(DraftPolicy):
        def probes_opening(self, budget: int) -> bool:
            return True  # every opening is proposed at, as every later position

        def choose(self, draft: Any, budget: int, opening: bool = False) -> list[tuple[int, np.ndarray]]:
            if draft:
                b = draft.best
                g = oracle.answer_index()  # the answer's index of the draft's first token
                probabilities = oracle.top_probability  # the replayed answer's, where the run has them
                band = probability_band(probabilities[g - 1]) if 1 <= g <= len(probabilities) else None
                key = (opening, Source(int(b.source)).name.lower(), policy_module._bucket(b.match_len), band)
                groups.setdefault(key, []).append(oracle.accepted_length(b.tokens))
            return []  # plain decoding: every position of the answer is proposed at

    completions = dict(run, cases=[r for r in run["cases"] if getattr(cases.get(r["id"]), "mode", "") == "complete"])
    with mock.patch("ngramd.daemon.engine.completer.DraftPolicy", Recording), \
            mock.patch("ngramd.daemon.engine.proposer.ProbeBackoff.MISSES", 1 << 30):
        _replay(completions, cases, oracle, None)
    bands = [label for _, label in PROBABILITY_BANDS]

    def order(item: tuple[tuple[bool, str, int, str | None], list[int]]) -> tuple[bool, str, int, int]:
        (opening, source, bucket, band), _ = item  # openings first, the bands in rising order
        return not opening, source, bucket, -1 if band is None else bands.index(band)

    return [{"opening": opening, "source": source, "bucket": bucket, "drafts": len(taken),
             "first_right": sum(t > 0 for t in taken), "mean_taken": round(sum(taken) / len(taken), 2)}
            | ({"pending_probability": band} if band is not None else {})
            for (opening, source, bucket, band), taken in sorted(groups.items(), key=order)]


def parse_curve(text: str) -> tuple[list[int], list[float]]:
    """"1:10.8,2:19.7,16:97.4" -> ([1, 2, 16], [10.8, 19.7, 97.4]): pass sizes and their ms."""
    try:
        pairs = sorted((int(n), float(ms)) for n, ms in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise ValueError(f"a cost curve is size:ms pairs, comma-separated (1:10.8,16:97.4), not {text!r}") from None
    if len(pairs) < 2 or pairs[0][0] < 1 or any(ms <= 0 for _, ms in pairs):
        raise ValueError(f"a cost curve needs two sizes or more, from 1 token, with positive ms: {text!r}")
    return [n for n, _ in pairs], [ms for _, ms in pairs]


def replay(run: dict[str, Any], cases: dict[str, Any], runtime: Any,
           curve: tuple[list[int], list[float]] | None = None, foresight: bool = False,
           fixed: int | None = None, prior: float | None = None, alpha: float | None = None) -> dict[str, Any]:
    """Each edit and completion of ``run`` (a bench report) replayed speculative and plain in the
    prepared flow on ``AnswerRuntime(runtime)``, priced at ``curve`` (default: the runtime's
    calibration). The daemon's policies size the drafts, ``EditDraftPolicy`` with its ``prior``
    acceptance and learning rate ``alpha`` where given; ``foresight`` (``foresight_policy``,
    ``sized_completion_policy``) or, for edits, ``fixed`` (``fixed_policy``) instead.
    Returns {"cases": [rows], "total": {...}}."""
    from unittest import mock

    from ngramd.daemon.edit.editor import EditDraftPolicy
    from ngramd.daemon.engine.policy import DraftPolicy

    oracle = AnswerRuntime(runtime)
    policy = (foresight_policy(oracle) if foresight else fixed_policy(fixed) if fixed is not None
              else type("Tuned", (EditDraftPolicy,), {
                  "PRIOR_ACCEPTANCE": EditDraftPolicy.PRIOR_ACCEPTANCE if prior is None else prior,
                  "ALPHA": EditDraftPolicy.ALPHA if alpha is None else alpha}))
    # an edit's fallback drafts are the completion policy's (EditDraftPolicy.inner): --fixed and the
    # tuned priors leave it the daemon's; foresight takes every draft of both itself
    completion_policy = sized_completion_policy(oracle.accepted_length) if foresight else DraftPolicy
    with mock.patch("ngramd.daemon.edit.editor.EditDraftPolicy", policy), \
            mock.patch("ngramd.daemon.engine.completer.DraftPolicy", completion_policy):
        return _replay(run, cases, oracle, curve)


def _replay(run: dict[str, Any], cases: dict[str, Any], oracle: AnswerRuntime,
            curve: tuple[list[int], list[float]] | None) -> dict[str, Any]:
    from ngramd.daemon.bench.runner import BenchRunner, case_document
    from ngramd.daemon.engine.loop import EngineConfig

    runner = BenchRunner(oracle, EngineConfig(calibrate=curve is None), hf=False, prepared=True,
                         typed_instruction=True)
    runner.peers = None  # the peers would decode the real model: nothing to replay
    completer = runner.completer()
    cost = completer.cost  # the policy's own object: changed in place, the policy reads it
    if curve is not None:
        cost.sizes, cost.ms = list(curve[0]), list(curve[1])
    cost.online = False  # priced as calibrated: the stand-in's pass times are not the model's
    rows = []
    try:
        for row in run["cases"]:
            case = cases.get(row["id"])
            if case is None or row.get("status") != "ok" or case.mode not in ("edit", "complete"):
                continue
            oracle.expect(int(row["prompt_tokens"]), row["token_ids"], row.get("top_probability"))  # an edit's closing fence included
            index = runner.index_for(case.workspace)
            priced = {}
            with case_document(index, case):
                for speculate in (False, True):
                    oracle.passes = []
                    result = runner._engine_run(case, index, speculate, prepared=True).result
                    if list(result.token_ids) != row["token_ids"]:
                        raise AssertionError(f"{case.id}: the replay's answer is not the run's")
                    passes = oracle.passes[len(oracle.passes) - result.stats.forward_passes:]  # the answer's, not its prepare's
                    priced[speculate] = (float(sum(cost(n) for n in passes)), passes)
            plain_ms, (spec_ms, passes) = priced[False][0], priced[True]
            measured = (row["prepared_plain_ms"] / row["prepared_ms"]) if row.get("prepared_ms") else None
            rows.append({"id": case.id, "mode": case.mode, "generated": len(row["token_ids"]), "passes": len(passes),
                         "tokens_per_pass": round(len(row["token_ids"]) / max(1, len(passes)), 2),
                         "priced_plain_ms": round(plain_ms, 1), "priced_ms": round(spec_ms, 1),
                         "priced_speedup": round(plain_ms / spec_ms, 3),
                         "measured_speedup": round(measured, 3) if measured else None, "pass_sizes": passes})
    finally:
        runner.close()
    priced_total = sum(r["priced_ms"] for r in rows)
    total = {"cases": len(rows), "passes": sum(r["passes"] for r in rows), "curve": cost.to_dict(),
             "priced_speedup": round(sum(r["priced_plain_ms"] for r in rows) / priced_total, 3) if rows else None}
    return {"cases": rows, "total": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a bench run's JSON (edits or completions, greedy answers)")
    ap.add_argument("--cases", type=Path, help="its cases file (default: the run's meta)")
    ap.add_argument("--curve", help="price passes at this curve, size:ms pairs (1:10.8,16:97.4); "
                                    "default: the runtime's calibration")
    ap.add_argument("--foresight", action="store_true",
                    help="draft exactly what the answer takes: the bound for any policy with this proposer")
    ap.add_argument("--fixed", type=int, metavar="K", help="an edit drafts K tokens of the original whenever it can")
    ap.add_argument("--prior", type=float, help="the daemon's edit policy with this prior acceptance")
    ap.add_argument("--alpha", type=float, help="the daemon's edit policy with this learning rate")
    ap.add_argument("--openings", action="store_true",
                    help="no pricing: every completion draft's first-token outcome, a request's opening apart")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    from ngramd.daemon.bench.cases import load_cases
    from ngramd.daemon.runtime.loading import load_runtime

    try:
        curve = parse_curve(args.curve) if args.curve else None
        run = json.loads(args.run.read_text())
        meta = run["meta"]
        cases = {c.id: c for c in load_cases(args.cases or ROOT / meta["cases_file"])}
    except (OSError, ValueError, KeyError) as exc:
        print(f"replay_policy: {exc}", file=sys.stderr)
        return 2
    model = str(meta.get("model"))
    # the embedded model is recorded by its file's name
    runtime = load_runtime(model if Path(model).exists() or "/" in model or model.startswith("tiny") else None,
                           runtime=meta.get("runtime", "auto"))
    if args.openings:
        groups = first_token_outcomes(run, cases, runtime)
        if args.json:
            print(json.dumps(groups, indent=1))
            return 0
        for g in groups:
            band = f"  p(pending) {g['pending_probability']:8}" if "pending_probability" in g else ""
            print(f"{'opening' if g['opening'] else 'later':8} {g['source']:12} bucket {g['bucket']}{band}  {g['drafts']:5} drafts  "
                  f"first token right {g['first_right']:5} ({g['first_right'] / g['drafts']:.0%})  "
                  f"taken {g['mean_taken']:.2f} tokens on average")
        return 0
    out = replay(run, cases, runtime, curve, args.foresight, args.fixed, args.prior, args.alpha)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for r in out["cases"]:
        measured = f"{r['measured_speedup']:.2f}x" if r["measured_speedup"] else "-"
        print(f"{r['id'][:40]:40} {r['generated']:4} tokens {r['passes']:3} passes "
              f"{r['tokens_per_pass']:5.2f}/pass  priced {r['priced_speedup']:.2f}x  measured {measured}  "
              f"{r['pass_sizes']}")
    t = out["total"]
    print(f"total: priced {t['priced_speedup']}x over plain decoding, {t['passes']} passes; curve {t['curve']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
