"""Speculative edits: rewrite a range, with the original text as the draft.

    result = run_edit(completer, EditRequest(uri, text, start, end, "rename x to count"))
    result.text  # the replacement for text[start:end]; the caller applies it (the daemon never writes files)

Cursor's "speculative edits" (fast apply): when a model rewrites code following
a small instruction, most of its output repeats the original, so the original
range is an almost perfect draft. The prompt and the answer's format are in
daemon/edit/prompt.py; the aligned-pointer proposer in daemon/edit/proposer.py;
verification is the engine's (daemon/engine/loop.py ``generate``), so greedy output
is token-identical to plain decoding of the same prompt (``speculate=False``).

Draft sizes: drafts from the original are verified as proposed (the proposer
adapts their length itself; the engine's cost-model policy would start them
short, at a prior acceptance rate meant for n-gram lookups). Drafts from the
fallback (the n-gram index, or the context itself when there is no index) go
through the Completer's cost-model policy like any completion.

An edit is one more request on the same model: it runs through the Completer's
``decode`` (its lock, KV pool and configuration) and ``record`` (its totals), and
sizes fallback drafts with the Completer's policy and cost model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ngramd.daemon.engine.policy import DraftPolicy, best_count, cut_branches, ema_acceptance
from ngramd.daemon.engine.context_lookup import ContextLookup, prompt_lookup
from ngramd.daemon.edit.indent import frame_of, line_before, split_layout
from ngramd.daemon.edit.prompt import EditPrompt, build_edit_prompt, check_range
from ngramd.daemon.edit.proposer import EditProposer, EditProposerConfig
from ngramd.daemon.engine.prompt import model_positions
from ngramd.daemon.engine.proposer import IndexProposer, NullProposer
from ngramd.daemon.engine.completer import Completer, edit_cache_key
from ngramd.daemon.protocol.requests import (FINISHED_EDIT_STOPS, CompletionResult, EditRequest, Prepared, check_instruction,
                             check_sampling)
from ngramd.daemon.engine.stops import StopChecker, StopConfig
from ngramd.index.draft import Draft, Source


MAX_TOKENS_CAP = 4096


class EditDraftPolicy:
    """Sizes drafts from the original by their measured acceptance; other drafts go to the inner policy.

    While the output follows the original, a long draft is nearly free per
    accepted token, so the first drafts are long (prior per-token acceptance
    ``PRIOR_ACCEPTANCE``). When the model departs from the original (it rewrites,
    or loops), the per-token acceptance ``a`` (an exponential moving average over
    the tokens judged) falls, and the draft length m is the one that maximises
    expected tokens per ms, (1 - a^(m+1)) / (1 - a) / cost(1 + m), down to m = 0:
    plain decoding, so a lost edit costs no more than plain decoding.

    A declined draft still teaches: the plain pass that runs instead shows whether the draft's
    first token was right (``declined``). So ``a`` climbs back as soon as the output follows the
    original again, and stays low while it does not, with no draft spent to find out. On a
    runtime where a longer pass costs nearly its tokens' worth (llama.cpp on the CPU), waiting
    for a rejected draft's rate to drift back would give plain passes away on every edit.
    """

    PRIOR_ACCEPTANCE = 0.9
    ALPHA = 0.15

    def __init__(self, inner: DraftPolicy, width: int = 1) -> None:
        self.inner = inner
        self.cost = inner.cost  # what the engine reads of a policy: the cost model and the width
        self.width = width  # branches asked of the proposer (2: also the insertion guess)
        self.acceptance = self.PRIOR_ACCEPTANCE

    @staticmethod
    def _is_original(draft: Draft) -> bool:
        return bool(draft) and all(b.source == Source.EDIT_ORIGINAL for b in draft.branches)

    def _best_length(self, longest: int) -> int:
        return best_count(np.cumprod(np.full(longest, self.acceptance)).tolist(), self.cost)  # a, a^2, ...

    def probes_opening(self, budget: int) -> bool:
        """Always: an edit's first draft is the original, the draft it is made to take."""
        return True

    def choose(self, draft: Draft, budget: int, opening: bool = False) -> list[tuple[int, np.ndarray]]:
        if not self._is_original(draft):
            # no opening for the inner policy: an edit's prompt ends in its instruction, not at a
            # cursor in the buffer, so its first fallback draft is not the text after one
            return self.inner.choose(draft, budget)
        budget = min(budget, self._best_length(min(budget, max(len(b.tokens) for b in draft.branches))))
        return cut_branches(draft.branches[: self.width], budget, budget)

    def declined(self, draft: Draft, next_token: int, opening: bool = False) -> None:
        if not self._is_original(draft):
            self.inner.declined(draft, next_token)  # no opening: see ``choose``
            return
        first = draft.branches[0].tokens
        if len(first):
            self.acceptance = ema_acceptance(self.acceptance, int(int(first[0]) == int(next_token)), 1, self.ALPHA)

    def feedback(self, draft: Draft, taken_branch: int, accepted: int, drafted_len: int,
                 opening: bool = False) -> None:
        if not self._is_original(draft):
            self.inner.feedback(draft, taken_branch, accepted, drafted_len)  # no opening: see ``choose``
            return
        self.acceptance = ema_acceptance(self.acceptance, accepted, max(drafted_len, 1), self.ALPHA)


# The least default room: an empty or short selection is where new code is written (a
# function, a docstring), which twice its few tokens would cut off. Unused room costs nothing.
MIN_DEFAULT_MAX_TOKENS = 256


def default_max_tokens(draft_len: int) -> int:
    """Room for an answer twice the original's length (type hints, added lines), and at least
    ``MIN_DEFAULT_MAX_TOKENS``."""
    return min(MAX_TOKENS_CAP, max(2 * draft_len + 32, MIN_DEFAULT_MAX_TOKENS))


def validate(req: EditRequest) -> None:
    """Raise ValueError (EditRangeError for the range) with a clear message for bad input."""
    if not isinstance(req.text, str):
        raise ValueError("text must be a string")
    check_range(req.text, req.start, req.end)
    check_instruction(req.instruction)
    if req.max_tokens is not None and (not isinstance(req.max_tokens, int) or req.max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive integer, got {req.max_tokens!r}")
    check_sampling(req.sampling)


@dataclass(frozen=True)
class LengthBound:
    """Whether an edit can fit the model at all, judged from characters alone, before anything
    is tokenized (the daemon checks it before queueing, so such an edit supersedes nothing).

    A token spans at most ``longest_token`` bytes, so a text of c characters (c bytes or
    more) takes at least c / longest_token tokens: the selection twice (in the prompt and as
    the draft, both dedented as daemon/edit/indent.py shows it) and the instruction once. An edit that passes may still be found too long
    once tokenized (``fit_positions``).
    """

    positions: int  # the model's positions
    longest_token: int  # bytes of its longest token

    @classmethod
    def of(cls, runtime: Any) -> LengthBound | None:
        """The bound of ``runtime`` (a ModelRuntime); None when it does not tell its positions."""
        positions = model_positions(runtime)
        vocab = getattr(runtime, "vocab_size", None)
        if positions is None or not isinstance(vocab, int) or not callable(getattr(runtime, "token_bytes", None)):
            return None
        return cls(positions, max(1, max(len(runtime.token_bytes(i)) for i in range(vocab))))

    def check(self, text: str, start: int, end: int, instruction: str) -> None:
        """ValueError when rewriting ``text[start:end]`` certainly needs more positions than the model has."""
        original = text[start:end]
        trailing = len(split_layout(original)[1])  # the prompt and the draft leave the layout out
        # the selection as the prompt and the draft show it (dedented) is at most the lead longer
        # than the original, and at least the original without its spaces and tabs; dedenting is
        # a pass over the selection in Python (~15 ms per MB of code here), done only where those
        # bounds do not settle it
        if self._need(len(original) + len(line_before(text, start)), trailing, instruction) <= self.positions:
            return
        need = self._need(len(original) - original.count(" ") - original.count("\t"), trailing, instruction)
        if need <= self.positions:
            need = self._need(len(frame_of(text, start, end).dedent(original)), trailing, instruction)
        if need > self.positions:
            raise ValueError(f"the edit is too long to rewrite: the selection ({len(original)} characters) "
                             f"and the instruction ({len(instruction)}) need at least {need} positions, "
                             f"the model has {self.positions}; select less or shorten the instruction")

    def _need(self, shown_chars: int, trailing: int, instruction: str) -> int:
        """Positions the prompt and the draft take at least: the selection shown in ``shown_chars``
        characters, ``trailing`` of them its layout (which neither holds)."""
        in_prompt = shown_chars - trailing + len(instruction.strip())
        as_draft = shown_chars - trailing
        return -(-in_prompt // self.longest_token) + -(-as_draft // self.longest_token)  # ceilings


def fit_positions(runtime: Any, ep: EditPrompt, max_tokens: int) -> int:
    """``max_tokens`` cut to the positions the model has after the prompt; ValueError when the
    prompt and an unchanged answer (the draft) do not fit at all."""
    limit = model_positions(runtime)
    if limit is None:
        return max_tokens
    need = len(ep.prompt_ids) + len(ep.draft_ids)
    if need > limit:
        raise ValueError(f"the edit is too long to rewrite: the prompt ({len(ep.prompt_ids)} tokens: the file "
                         f"around the selection, the selection and the instruction) and the unchanged selection "
                         f"({len(ep.draft_ids)} tokens) need {need} positions, the model has {limit}; "
                         f"select less or shorten the instruction")
    return min(max_tokens, limit - len(ep.prompt_ids))


# Two instructions whose first tokens differ: their prompts part where the instruction begins.
_PLACEHOLDER_INSTRUCTIONS = ("a", "b")


def instruction_free_prefix(runtime: Any, text: str, start: int, end: int, uri: str = "") -> list[int]:
    """The edit prompt's token ids before the instruction: every instruction's prompt for this
    range starts with them (the file around the range, the selection, the words before the
    instruction), so they can be prefilled while the user is still typing it."""
    return _instruction_free(runtime, text, start, end, uri)[0]


def _instruction_free(runtime: Any, text: str, start: int, end: int, uri: str) -> tuple[list[int], list[int]]:
    """(``instruction_free_prefix``, the draft: the unchanged selection, whatever the instruction)."""
    first, second = (build_edit_prompt(runtime, text, start, end, placeholder, uri)
                     for placeholder in _PLACEHOLDER_INSTRUCTIONS)
    a_ids, b_ids = first.prompt_ids, second.prompt_ids
    shared = next((i for i, (a, b) in enumerate(zip(a_ids, b_ids)) if a != b), min(len(a_ids), len(b_ids)))
    return a_ids[:shared], first.draft_ids


def prepare_edit(completer: Completer, uri: str, text: str, start: int, end: int,
                 cancel: threading.Event | None = None, instruction: str | None = None) -> Prepared:
    """Prefill the prompt of an edit of ``text[start:end]`` on the KV cache the edit will use:
    up to the instruction, or with ``instruction`` (what the user has typed so far) the whole
    prompt for it. The edit itself then prefills only what its prompt does not share with the
    prepared one: the instruction and what follows, or the words typed since (nothing when the
    instruction is the one prepared). Output is unchanged: the edit reuses the cached prefix as
    any request on a warm cache does. A blank ``instruction`` counts as none. Raises ValueError
    for a bad range or instruction, or a prompt longer than the model's positions."""
    if not isinstance(text, str):
        raise ValueError("text must be a string")
    check_range(text, start, end)
    if instruction is not None and not isinstance(instruction, str):
        raise ValueError("the instruction must be a string")
    if instruction is not None and instruction.strip():
        check_instruction(instruction)
        ep = build_edit_prompt(completer.runtime, text, start, end, instruction, uri)
        ids, draft, what = ep.prompt_ids, ep.draft_ids, "the prompt"
    else:
        ids, draft = _instruction_free(completer.runtime, text, start, end, uri)
        what = "the prompt before the instruction"
    limit = model_positions(completer.runtime)
    if limit is not None and len(ids) + len(draft) > limit:  # as fit_positions will find at the edit
        raise ValueError(f"the edit is too long to rewrite: {what} ({len(ids)} tokens) and the unchanged "
                         f"selection ({len(draft)} tokens) need more than the model's {limit} positions; "
                         f"select less")
    return completer.prepare(edit_cache_key(uri), ids, cancel)


def edit_proposer(ep: EditPrompt, index: Any | None, uri: str,
                  config: EditProposerConfig | None = None,
                  token_bytes: Callable[[int], bytes] | None = None) -> EditProposer:
    """The original as the draft; the fallback is the n-gram index and the output so far,
    or prompt lookup over the context when there is no index. With ``token_bytes``
    (the runtime's) the proposer can re-synchronise by bytes."""
    fallback = (ContextLookup(IndexProposer(index, uri), len(ep.prompt_ids)) if index is not None
                else prompt_lookup())
    return EditProposer(np.asarray(ep.draft_ids, dtype=np.int32), len(ep.prompt_ids), config, fallback=fallback,
                        token_bytes=token_bytes)


def run_edit(completer: Completer, req: EditRequest, cancel: threading.Event | None = None,
             proposer_config: EditProposerConfig | None = None) -> CompletionResult:
    """Rewrite ``req.text[req.start:req.end]``; ``result.text`` is the replacement."""
    validate(req)
    t0 = time.perf_counter()
    runtime, index = completer.runtime, completer.index
    ep = build_edit_prompt(runtime, req.text, req.start, req.end, req.instruction, req.uri)
    max_tokens = fit_positions(runtime, ep, req.max_tokens or default_max_tokens(len(ep.draft_ids)))
    pcfg = proposer_config or EditProposerConfig()
    if not req.speculate:
        proposer, policy = NullProposer(), None
    else:
        proposer = edit_proposer(ep, index, req.uri, pcfg, runtime.token_bytes)
        policy = EditDraftPolicy(completer.policy, width=pcfg.branches)
    stopper = StopChecker(StopConfig(max_tokens=max_tokens, eos_ids=completer.eos_ids,
                                     # a loop the prompt does not hold ends it
                                     loop_allowed=ep.prompt.encode() if req.stop_loops else None,
                                     **ep.stop_config()),
                          runtime.token_bytes)
    out, stats = completer.decode(edit_cache_key(req.uri),  # the edit prompt's KV, apart from completions'
                                  ep.prompt_ids, proposer, policy, stopper, req.sampling, None, cancel,
                                  propose_k=pcfg.k_max, t0=t0,
                                  sync=(req.uri, req.text) if req.speculate else None)
    text = "" if out.cancelled else ep.replacement(out.text, out.stop_reason in FINISHED_EDIT_STOPS)
    result = CompletionResult(text=text, token_ids=out.tokens, prompt=ep.prompt, stats=stats,
                              cancelled=out.cancelled, stop_reason=out.stop_reason)
    return completer.record(result, t0)
