"""Speculative edits: rewrite a range, with the original text as the draft.

    result = run_edit(completer, runtime, index, EditRequest(uri, text, start, end, "rename x to count"))
    result.text  # the replacement for text[start:end]; the caller applies it (the daemon never writes files)

Cursor's "speculative edits" (fast apply): when a model rewrites code following
a small instruction, most of its output repeats the original, so the original
range is an almost perfect draft. The prompt and the answer's format are in
daemon/edit_prompt.py; the aligned-pointer proposer in daemon/edit_proposer.py;
verification is the engine's (daemon/engine.py ``generate``), so greedy output
is token-identical to plain decoding of the same prompt (``speculate=False``).

Draft sizes: drafts from the original are verified as proposed (the proposer
adapts their length itself; the engine's cost-model policy would start them
short, at a prior acceptance rate meant for n-gram lookups). Drafts from the
fallback (the n-gram index, or the context itself when there is no index) go
through the Completer's cost-model policy like any completion.

This module uses the Completer's lock, KV pool, configuration, cost model and
totals: an edit is one more request on the same model.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np

from daemon.edit_prompt import build_edit_prompt, check_range, clean_answer
from daemon.edit_proposer import EditProposer, EditProposerConfig
from daemon.engine import generate, prefill
from daemon.proposer import IndexProposer, NullProposer, SequenceProposer
from daemon.requests import CompletionResult, EditRequest, GenerationStats
from daemon.stops import StopChecker, StopConfig
from index.draft import Draft, Source

MAX_TOKENS_CAP = 4096


class _EditStopChecker(StopChecker):
    """The engine's stop rules without ``block_end``: a rewritten range may dedent."""

    def _check_block_end(self) -> None:
        return


class EditDraftPolicy:
    """Sizes drafts from the original by their measured acceptance; other drafts go to the inner policy.

    While the output follows the original, a long draft is nearly free per
    accepted token, so the first drafts are long (prior per-token acceptance
    ``PRIOR_ACCEPTANCE``). When the model departs from the original (it rewrites,
    or loops), the per-token acceptance ``a`` (an exponential moving average over
    the tokens judged) falls, and the draft length m is the one that maximises
    expected tokens per ms, (1 - a^(m+1)) / (1 - a) / cost(1 + m), down to m = 0:
    plain decoding, so a lost edit costs no more than plain decoding.
    """

    PRIOR_ACCEPTANCE = 0.9
    ALPHA = 0.15
    RECOVERY = 0.05

    def __init__(self, inner: Any, width: int = 1) -> None:
        self.inner = inner
        self.cfg = inner.cfg
        self.width = width
        self.acceptance = self.PRIOR_ACCEPTANCE

    def __getattr__(self, name: str) -> Any:
        # everything else the engine asks of a policy (its cost model, ...) is the inner one's
        return getattr(self.inner, name)

    @staticmethod
    def _is_original(draft: Draft) -> bool:
        return bool(draft) and all(b.source == Source.EDIT_ORIGINAL for b in draft.branches)

    def _best_length(self, longest: int) -> int:
        a, cost = self.acceptance, self.inner.cost
        best_m, best_rate = 0, 1.0 / cost(1)
        expected, value = 1.0, 1.0
        for m in range(1, longest + 1):
            value *= a
            expected += value
            rate = expected / cost(1 + m)
            if rate > best_rate:
                best_m, best_rate = m, rate
        return best_m

    def choose(self, draft: Draft, budget: int) -> list[tuple[int, np.ndarray]]:
        if not self._is_original(draft):
            return self.inner.choose(draft, budget)
        budget = min(budget, self._best_length(min(budget, max(len(b.tokens) for b in draft.branches))))
        if budget == 0:
            # not drafting teaches nothing: drift back towards the prior so that a model
            # that returns to the original is noticed after a few plain passes
            self.acceptance += self.RECOVERY * (self.PRIOR_ACCEPTANCE - self.acceptance)
        out = []
        for bi, b in enumerate(draft.branches[: self.width]):
            take = min(len(b.tokens), budget)
            if take <= 0:
                break
            out.append((bi, b.tokens[:take]))
            budget -= take
        return out

    def feedback(self, draft: Draft, taken_branch: int, accepted: int, drafted_len: int) -> None:
        if not self._is_original(draft):
            self.inner.feedback(draft, taken_branch, accepted, drafted_len)
            return
        judged = min(accepted + 1, max(drafted_len, 1))  # tokens after the first rejection were never judged
        for i in range(judged):
            self.acceptance += self.ALPHA * ((1.0 if i < accepted else 0.0) - self.acceptance)
        self.acceptance = min(max(self.acceptance, 0.01), 0.99)


def default_max_tokens(draft_len: int) -> int:
    """Room for an answer twice the original's length (type hints, added lines)."""
    return min(MAX_TOKENS_CAP, 2 * draft_len + 32)


def validate(req: EditRequest) -> None:
    """Raise ValueError (EditRangeError for the range) with a clear message for bad input."""
    if not isinstance(req.text, str):
        raise ValueError("text must be a string")
    check_range(req.text, req.start, req.end)
    if not isinstance(req.instruction, str) or not req.instruction.strip():
        raise ValueError("the instruction is empty")
    if req.max_tokens is not None and (not isinstance(req.max_tokens, int) or req.max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive integer, got {req.max_tokens!r}")
    if req.sampling.temperature < 0 or not 0 < req.sampling.top_p <= 1:
        raise ValueError("temperature must be >= 0 and top_p in (0, 1]")


def run_edit(completer: Any, runtime: Any, index: Any | None, req: EditRequest,
             cancel: threading.Event | None = None,
             proposer_config: EditProposerConfig | None = None) -> CompletionResult:
    """Rewrite ``req.text[req.start:req.end]``; ``result.text`` is the replacement."""
    validate(req)
    t0 = time.perf_counter()
    stats = GenerationStats()
    ep = build_edit_prompt(runtime, req.text, req.start, req.end, req.instruction, req.uri)
    max_tokens = req.max_tokens or default_max_tokens(len(ep.draft_ids))
    cfg = completer.cfg
    eos = {runtime.eos_token_id} if runtime.eos_token_id is not None else set()
    eos_ids = frozenset(int(i) for i in eos | set(runtime.tokenizer.all_special_ids))
    lock = getattr(completer, "_lock", None) or contextlib.nullcontext()
    with lock:
        kv = completer.pool.get(f"{req.uri}#edit")  # the edit prompt's KV, apart from completions'
        if not prefill(runtime, kv, ep.prompt_ids, stats, cancel, cfg.prefill_chunk, reuse=cfg.reuse_kv):
            return _finish(completer, CompletionResult("", [], ep.prompt, stats, True, "cancelled"), t0)
        if not req.speculate:
            proposer, policy = NullProposer(), None
        else:
            pcfg = proposer_config or EditProposerConfig()
            if index is not None:
                sync = getattr(completer, "_sync_buffer", None)
                if sync is not None and cfg.sync_buffers:
                    sync(req.uri, req.text)
                fallback = IndexProposer(index, req.uri)
            else:
                fallback = SequenceProposer()  # prompt lookup over the context
            proposer = EditProposer(np.asarray(ep.draft_ids, dtype=np.int32), len(ep.prompt_ids), pcfg,
                                    fallback=fallback)
            policy = EditDraftPolicy(completer.policy, width=pcfg.branches)
        stopper = _EditStopChecker(StopConfig(max_tokens=max_tokens, stop_strings=ep.stop,
                                              eos_ids=eos_ids), runtime.token_bytes)
        out = generate(runtime, kv, ep.prompt_ids, proposer, policy, stopper, req.sampling, None,
                       stats, cancel, propose_k=(proposer_config or EditProposerConfig()).k_max,
                       t_start=t0)
    closed = out.stop_reason == "stop_string"
    answer = out.text + ("\n" + ep.fence if closed else "")
    text = "" if out.cancelled else clean_answer(answer, ep.original, ep.fence)
    result = CompletionResult(text=text, token_ids=out.tokens, prompt=ep.prompt, stats=stats,
                              cancelled=out.cancelled, stop_reason=out.stop_reason)
    return _finish(completer, result, t0)


def _finish(completer: Any, result: CompletionResult, t0: float) -> CompletionResult:
    finish = getattr(completer, "_finish", None)
    if finish is not None:
        return finish(result, t0)
    result.stats.ms = (time.perf_counter() - t0) * 1000
    return result
