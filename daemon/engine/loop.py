"""The speculative decoding loop: propose -> verify in one pass -> accept -> roll back -> adapt.

Lean: direct model forwards on an explicit KV cache, no ``generate``. The KV
cache always covers the context except its last token, the *pending* token,
whose logits are still needed. A pass runs ``[pending] + draft nodes``; row 0
predicts the token after pending, row i+1 the token after draft node i. With no
draft the pass is exactly a plain decoding step (one new token), so plain
decoding is this loop with a proposer that never drafts.

The first pass also runs the last piece of the prompt that is not cached yet
(``prefill(..., fuse=True)``): on a warm cache (a prepared edit, the next
keystroke's completion) that is a few tokens, and a pass of their own would cost
far more than their rows in the first verify pass (on CPU a 16-token pass costs
1.6-2.0x a one-token pass, docs/benchmarks.md at 53c478e). The rows before the pending
token produce no logits.

Exactness: every emitted token is the one plain decoding would choose from the
target's own logits at that position (after the same forced-prefix mask): the
argmax, or with sampling the seeded Gumbel-max draw of daemon/engine/acceptance.py, which
depends on the seed, the position and the logits only. The stop rules see the same
token stream, so speculative output is token-identical to plain output, greedy or
sampled with a seed (and sampled output is distributed exactly as the target's).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ngramd.daemon.engine.acceptance import position_noise, sample_token, target_probs
from ngramd.daemon.engine.policy import AdaptiveConfig, DraftPolicy
from ngramd.daemon.runtime.base import Device, KVCache, Logits, Runtime
from ngramd.daemon.engine.prompt import ForcedPrefix, PromptConfig
from ngramd.daemon.engine.proposer import Proposer
from ngramd.daemon.protocol.requests import GenerationStats, SamplingParams
from ngramd.daemon.engine.stops import StopChecker
from ngramd.daemon.runtime.tree import DraftTree, build_tree
from ngramd.index.draft import NO_DRAFT, Draft, Source


@dataclass(frozen=True)
class EngineConfig:
    prompt: PromptConfig = field(default_factory=PromptConfig)
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    propose_k: int = 32  # tokens per branch asked of the proposer
    prefill_chunk: int = 512  # prompt tokens per prefill pass (cancellation is checked between them)
    max_caches: int = 4  # documents whose KV cache is kept
    reuse_kv: bool = True  # keep the common-prefix KV between requests on a document
    fuse_prefill: bool = True  # the prompt's last prefill pass is the first decoding pass (saves a pass)
    calibrate: bool = True  # measure the verify-cost curve at load (cached) and correct it online; False: fixed prior
    sync_buffers: bool = True  # Completer calls index.open_buffer(uri, text) when the text changed
    add_history: bool = True  # completions go to the index as history
    answer_cache: bool = True  # typing through a remembered answer costs no pass (daemon/engine/answer_cache.py)


@dataclass
class GenerationOutput:
    tokens: list[int]  # emitted token ids (an eos is not included)
    text: str
    stop_reason: str
    cancelled: bool = False


def _source_name(source: int) -> str:
    try:
        return Source(int(source)).name.lower()
    except ValueError:
        return str(int(source))


def prefill(runtime: Runtime, kv: KVCache, prompt_ids: Sequence[int], stats: GenerationStats,
            cancel: threading.Event | None, chunk: int, reuse: bool = True, fuse: bool = False) -> bool:
    """Make ``kv`` cover ``prompt_ids[:-1]``, reusing its common prefix, in passes of ``chunk``
    tokens. ``fuse``: all but the last pass, which ``generate``'s first pass runs instead
    (with the pending token and a draft). False if cancelled."""
    target = [int(t) for t in prompt_ids[:-1]]
    keep = kv.reuse_for(target) if reuse else (kv.reset() or 0)
    stats.reused_tokens += keep
    uncached = len(target) - keep
    end = len(target) - ((uncached - 1) % chunk + 1) if fuse and uncached else len(target)
    for i in range(keep, end, chunk):
        if cancel is not None and cancel.is_set():
            return False
        piece = target[i: min(i + chunk, end)]
        _prefill_piece(runtime, kv, piece)
        stats.prefill_tokens += len(piece)
    return True


def _prefill_piece(runtime: Runtime, kv: KVCache, piece: list[int]) -> None:
    try:
        runtime.forward_pass(piece, kv, keep_last=1)
        # wait for a GPU: else every piece is queued at once, a cancel between pieces
        # cancels nothing, and a prepare's time shows up in the request that follows it
        runtime.synchronize()
    except BaseException:
        kv.reset()  # a half-written cache is never reused
        raise
    kv.extended(piece)


# tokens of answer the context's array has room for before it grows (``generate``)
CONTEXT_ROOM = 4096


def _cut_at_stop(draft: Draft, chosen: list[tuple[int, np.ndarray]], stopper: StopChecker) -> Draft | None:
    """The ``chosen`` branches of ``draft`` (branch index, tokens), each cut before the token that
    would stop the answer, as a draft of its own; None when no branch reaches a stop. No row
    after that token is ever emitted, and the stop token itself is the target's own row to give:
    only the pass's size changes, never the output. Probed after the policy's choice, so on its
    tokens only (a 32-token probe of a multi-line answer costs 0.2-0.3 ms, a verified row ~3 ms
    on 2 CPU cores)."""
    lengths = [stopper.tokens_before_stop(tokens) for _, tokens in chosen]
    if all(n == len(tokens) for n, (_, tokens) in zip(lengths, chosen)):
        return None
    branches = tuple(replace(draft.branches[b], tokens=tokens[:n]) for n, (b, tokens) in zip(lengths, chosen) if n)
    return Draft(branches) if branches else NO_DRAFT


def _reads_all_rows(device: Device) -> bool:
    """Greedy: whether a pass's tokens are read all at once, before the walk (a GPU)."""
    return device.type != "cpu"


def _walk_tree(runtime: Runtime, logits: Logits, tops: list[int] | None, tree: DraftTree,
               forced: ForcedPrefix | None, emitted: bytearray, greedy: bool, sampling: SamplingParams,
               seed: int, position: int) -> tuple[list[int], list[int]]:
    """Walk down the draft tree from the pending token, accepting children while the acceptance
    rule allows. ``logits``: [1+n, vocab], row i+1 after tree node i; ``tops``: greedy on a GPU,
    each row's argmax, read once per pass (one wait for it, not one per token); ``position``: the
    request's index of the first token this walk emits (sampling's noise is keyed by it). Returns
    (path of accepted nodes, emitted tokens: the accepted ones and the correction or bonus);
    extends ``emitted``. The token of each row is the one plain decoding would emit there
    (argmax, or the seeded Gumbel-max draw): a child is accepted when it is that token."""
    node = -1
    path: list[int] = []
    new_tokens: list[int] = []
    while True:
        row = logits[node + 1]  # [vocab]
        rem = forced.remaining(emitted) if forced is not None else b""
        if greedy and rem:
            token = forced.best_allowed(row, rem)
        elif greedy:
            token = tops[node + 1] if tops is not None else int(row.argmax())
        else:
            if rem:
                row = forced.mask_logits(row, rem)
            p = target_probs(row, sampling.temperature, sampling.top_p)  # [vocab]
            token = sample_token(p, position_noise(seed, position + len(new_tokens), p.shape[-1]))
        match = next((c for c in tree.children(node) if int(tree.tokens[c]) == token), None)
        new_tokens.append(token)
        emitted.extend(runtime.token_bytes(token))
        if match is None:
            return path, new_tokens
        path.append(match)
        node = match


def generate(runtime: Runtime, kv: KVCache, prompt_ids: Sequence[int], proposer: Proposer,
             policy: DraftPolicy | None, stopper: StopChecker, sampling: SamplingParams,
             forced: ForcedPrefix | None, stats: GenerationStats, cancel: threading.Event | None = None,
             propose_k: int = 32, t_start: float | None = None, emitted_before: bytes = b"") -> GenerationOutput:
    """Decode after a prefilled ``kv`` until ``stopper`` stops or cancel.

    ``kv`` covers ``prompt_ids[:-1]``, or a prefix of it (``prefill``'s ``fuse``): the
    first pass runs the rest. ``policy`` None drafts nothing (plain decoding). Updates
    ``stats`` in place.
    """
    assert len(prompt_ids) >= 1 and len(kv) <= len(prompt_ids) - 1
    t_start = time.perf_counter() if t_start is None else t_start
    greedy = sampling.greedy
    seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)  # none: a fresh one from the OS
    # a runtime without tree passes gets chains: one branch a pass
    width = policy.width if policy is not None and runtime.supports_trees else 1
    context = [int(t) for t in prompt_ids]
    assert kv.tokens == context[:len(kv)], "the KV cache must hold a prefix of the prompt"
    pending = context[len(kv):]  # the prompt's uncached tail, then the newest token
    # the context as int32, filled as it grows: a proposer reads context_ids[:len(context)], not a
    # fresh copy of a 1-2k-token list every pass (25-40 us); positions once written never change
    context_ids = np.empty(len(context) + min(stopper.cfg.max_tokens, CONTEXT_ROOM) + 1, dtype=np.int32)
    context_ids[:len(context)] = context
    out: list[int] = []
    # bytes of generated tokens, for the forced prefix; ``emitted_before``: those of output tokens
    # that ``prompt_ids`` already ends with (a greedy answer resumed: daemon/engine/answer_cache.py)
    emitted = bytearray(emitted_before)
    while True:
        if cancel is not None and cancel.is_set():
            stats.generated += len(out)
            return GenerationOutput(out, stopper.text, "cancelled", cancelled=True)
        budget = stopper.cfg.max_tokens - stopper.num_tokens - 1  # draft tokens that could still be emitted
        draft = NO_DRAFT
        chosen: list[tuple[int, np.ndarray]] = []
        # the request's first pass, before the model wrote anything (a resumed answer's output is
        # the model's): its draft is mostly the text after the cursor (daemon/engine/policy.py)
        opening = len(context) == len(prompt_ids) and not emitted_before
        if policy is not None and budget > 0 and (not opening or policy.probes_opening(budget)):
            draft = proposer.propose(context_ids[:len(context)], min(propose_k, budget), width)
            if draft:
                chosen = policy.choose(draft, budget, opening=opening)
                shorter = _cut_at_stop(draft, chosen, stopper)
                if shorter is not None:  # priced again: a draft cut short may no longer pay for its pass
                    draft = shorter
                    chosen = policy.choose(draft, budget, opening=opening) if draft else []
        tree = build_tree([tokens for _, tokens in chosen])
        chain = tree.size == 0 or tree.is_chain
        if len(pending) > 1 and not chain:
            # a tree's mask and positions are laid out after one pending token
            _prefill_piece(runtime, kv, pending[:-1])
            stats.prefill_tokens += len(pending) - 1
            pending = pending[-1:]
        node_branch = [chosen[int(b)][0] for b in tree.branch_of]  # draft branch index per node
        past, head = len(kv), len(pending) - 1  # head: prompt rows before the pending token
        inputs = pending + tree.tokens.tolist()
        t_pass = time.perf_counter()
        try:
            if chain:
                logits = runtime.forward_pass(inputs, kv, keep_last=len(inputs) - head)  # [1+n, vocab]
            else:
                logits = runtime.forward_pass(inputs, kv, tree=tree)  # [1+n, vocab]
            # greedy on a GPU: every row's token in one read, not one wait per token (it is also the
            # wait for the pass: its time is then known); on the CPU the rows walked are read as
            # walked (all 65 rows of a long draft cost 2.1 ms, the 3 walked 0.2 ms: docs/benchmarks.md at 53c478e)
            tops = logits.argmax(-1).tolist() if greedy and _reads_all_rows(runtime.device) else None
            pass_ms = (time.perf_counter() - t_pass) * 1000
            kv.extended(inputs)
            position = len(context) - len(prompt_ids)  # tokens generated so far
            path, new_tokens = _walk_tree(runtime, logits, tops, tree, forced, emitted, greedy, sampling, seed,
                                          position)
            kv.select(past + head + 1, [past + head + 1 + i for i in path])
        except BaseException:
            # until select the cache holds every draft row (a tree's siblings at shifted
            # positions) under tokens that look reusable: a half-done pass is never reused
            kv.reset()
            raise
        stats.prefill_tokens += head
        if policy is not None and (runtime.device.type == "cpu" or tops is not None) and head == 0:
            # online calibration of the verify cost (on cuda only where ``tops`` waited for the
            # pass: else it is still running); a pass with prompt rows computes fewer logits
            # than a verify pass of its size
            policy.cost.observe(len(inputs), pass_ms)
        stats.forward_passes += 1
        stats.drafted += tree.size
        for bi in node_branch:
            name = _source_name(draft.branches[bi].source)
            stats.drafted_by_source[name] = stats.drafted_by_source.get(name, 0) + 1

        accepted = len(path)
        stats.accepted += accepted
        if path:
            taken = node_branch[path[0]]
            name = _source_name(draft.branches[taken].source)
            stats.accepted_by_source[name] = stats.accepted_by_source.get(name, 0) + accepted
            branch_len = len(next(t for b, t in chosen if b == taken))
        else:
            taken, branch_len = -1, (len(chosen[0][1]) if chosen else 0)
        if policy is not None and chosen:
            policy.feedback(draft, taken, accepted, branch_len, opening=opening)
        elif policy is not None and draft and new_tokens:
            # a draft proposed and declined: the plain pass shows, at no cost, whether its first token was right
            policy.declined(draft, new_tokens[0], opening=opening)
        proposer.feedback(accepted)

        used = stopper.push_many(new_tokens)
        out.extend(new_tokens[:used])
        if stats.first_token_ms == 0.0:
            stats.first_token_ms = (time.perf_counter() - t_start) * 1000
        if len(context) + len(new_tokens) > len(context_ids):  # an answer past CONTEXT_ROOM tokens
            grown = np.empty(2 * (len(context) + len(new_tokens)), dtype=np.int32)
            grown[:len(context)] = context_ids[:len(context)]
            context_ids = grown
        context_ids[len(context):len(context) + len(new_tokens)] = new_tokens
        context.extend(new_tokens)
        pending = new_tokens[-1:]
        if stopper.reason:
            if stopper.reason == "eos" and out:
                out.pop()
            stats.generated += len(out)
            return GenerationOutput(out, stopper.text, stopper.reason)

