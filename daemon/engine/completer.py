"""Completer: one completion request from buffer text to ``CompletionResult``.

    c = Completer(runtime, index, EngineConfig())
    result = c.complete(CompletionRequest(uri, text, offset, max_tokens=48), cancel_event)

Buffers and the index: with ``config.sync_buffers`` (the default) the
Completer itself calls ``index.open_buffer(uri, text)`` whenever the text of
``uri`` differs from the text it last gave the index, so a caller that only has
whole texts (the CLI, the bench) needs nothing else. A caller that forwards
incremental edits to the index (the daemon, through ``edit_buffer``) sets
``sync_buffers=False`` and keeps the index current itself.

History: a finished (not cancelled) completion of at least two tokens is added
to the index with ``add_history`` (``config.add_history``), so the next request
at the same place, one keystroke later, drafts the previous answer.

Requests are served one at a time (a lock in ``decode``): there is one model and
one KV pool. ``speculate=False`` runs plain decoding through the same loop and
prompt. Speculative edits (daemon/edit/editor.py) are requests of another kind on the
same Completer: they build their own prompt and proposer and call ``decode`` and
``record`` like ``complete`` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from typing import Any, Hashable, Sequence

from ngramd.daemon.engine.answer_cache import AnswerCache, AnswerParams
from ngramd.daemon.engine.engine_lock import EngineLock
from ngramd.daemon.engine.policy import CostModel, DraftPolicy
from ngramd.daemon.engine.context_lookup import ContextLookup, prompt_lookup
from ngramd.daemon.engine.loop import EngineConfig, GenerationOutput, generate, prefill
from ngramd.daemon.runtime.base import Runtime
from ngramd.daemon.runtime.cache_pool import KVPool, common_prefix_len
from ngramd.daemon.engine.fim_view import PrefixView
from ngramd.daemon.engine.prompt import (ForcedPrefix, Prompt, PromptConfig, RecentPrompts, fim_tokens, model_positions,
                                         within_positions)
from ngramd.daemon.engine.proposer import IndexProposer, NullProposer, ProbeBackoff, Proposer
from ngramd.daemon.protocol.requests import (CompletionRequest, CompletionResult, GenerationStats, Prepared,
                             SamplingParams, check_sampling)
from ngramd.daemon.engine.stops import StopConfig, StopChecker

log = logging.getLogger("ngramd.completer")

# Tokens per prepare pass. A prepare is cancelled between passes when a request comes (it gives
# way, daemon/service/worker.py), so this bounds how long a request can wait behind one: with the
# default model on 2 CPU cores a 128-token pass took ~0.3 s, the 512-token prefill chunk ~1 s,
# and a 1,070-token prepare 2.26 s in 128-token passes against 1.95 s in 512-token ones
# (docs/benchmarks.md at 53c478e, "Prepared edits"): it runs while the user is not waiting.
PREPARE_CHUNK = 128
# The longest request whose next answer is decoded ahead, in tokens: bounds the idle-time work
# to what an editor asks for one suggestion (the extensions ask 64).
PREFETCH_MAX_TOKENS = 64


class Completer:
    def __init__(self, runtime: Runtime, index: Any | None = None, config: EngineConfig | None = None) -> None:
        self.runtime = runtime
        self.index = index
        self.cfg = config or EngineConfig()
        # calibrate=False: the prior curve, fixed (no measuring at load nor online), so that
        # draft decisions do not depend on timing (tests)
        self.cost = CostModel.cached(runtime) if self.cfg.calibrate else CostModel(online=False)
        pad_rows = getattr(runtime, "padded_pass_rows", None)
        self.cost.pad_to = tuple(pad_rows()) if callable(pad_rows) else ()
        self.policy = DraftPolicy(self.cost, self.cfg.adaptive)
        self.pool = KVPool(self.cfg.max_caches, runtime.new_cache, runtime.release_cache)
        # a runtime whose multi-token passes differ from one-token passes (daemon/runtime/base.py
        # Exactness) would make speculation change the output: it then drafts nothing
        self.speculation_exact = bool(getattr(getattr(runtime, "exactness", None), "exact", True))
        self.answers = AnswerCache(runtime.token_bytes, runtime.is_special)
        self.prompts = RecentPrompts(runtime)  # a request takes the prompt its prepare built
        self.totals = GenerationStats()
        self.requests = 0
        self.prepared = {"prepares": 0, "prefill_tokens": 0}  # work done ahead of requests (not in totals)
        self._synced: dict[str, str] = {}  # uri -> digest of the text last given to the index
        self._lock = EngineLock(self._forget_now)  # daemon/engine/engine_lock.py
        eos = {runtime.eos_token_id} if runtime.eos_token_id is not None else set()
        self.eos_ids = frozenset(int(i) for i in eos | set(runtime.tokenizer.all_special_ids))  # stop tokens

    # --- public API ------------------------------------------------------------------
    def complete(self, req: CompletionRequest, cancel: threading.Event | None = None,
                 prefetch: bool = False) -> CompletionResult:
        """Complete ``req.text`` at ``req.offset``. Raises ValueError for bad input.

        A request that types through a remembered answer is answered from it, with no forward
        pass (daemon/engine/answer_cache.py). ``prefetch``: decoded ahead for a buffer the user
        may have next (``prefetch_after``): the index is not told of its text, nor of its answer."""
        _validate(req)
        t0 = time.perf_counter()
        prompt = self.prompts.build(req.text, req.offset, self._prompt_config())
        max_tokens = self._fit_answer(len(prompt.ids), req.max_tokens)
        forced_bytes = prompt.forced.encode("utf-8")
        params = AnswerParams.of(max_tokens, req.stop, req.multiline, req.sampling.temperature, req.sampling.top_p,
                                 req.sampling.seed) if self.cfg.answer_cache else None
        if params is not None:
            with self._lock:
                served = self.answers.serve(req.uri, prompt.ids, forced_bytes, params,
                                            lambda: self._stopper(req, prompt, max_tokens))
            if served is not None:
                stats = GenerationStats(generated=len(served.tokens))
                result = CompletionResult(text=served.text, token_ids=served.tokens, prompt=prompt.text, stats=stats,
                                          stop_reason=served.stop_reason,
                                          answered_from="prefetch" if served.prefetched else "answer_cache")
                return result if prefetch else self.record(result, t0)
        if not req.speculate:
            proposer, policy = NullProposer(), None
        else:
            proposer, policy = self._proposer(req.uri, prompt.ids, prompt.fim), self.policy
        stopper = self._stopper(req, prompt, max_tokens)
        # an answer a newer keystroke cut short goes on from where it was: its tokens are the ones
        # decoding would produce first (daemon/engine/answer_cache.py), and the KV cache holds them
        resumed: list[int] = []
        if params is not None:
            with self._lock:
                resumed = self.answers.resumable(req.uri, prompt.ids, forced_bytes, params) or []
            stopper.push_many(resumed)
            if stopper.reason:  # it would have been served whole: decode afresh (never expected)
                resumed, stopper = [], self._stopper(req, prompt, max_tokens)
        forced = ForcedPrefix(self.runtime, prompt.forced) if prompt.forced else None
        out, stats = self.decode(req.uri, list(prompt.ids) + resumed, proposer, policy, stopper, req.sampling, forced,
                                 cancel, t0=t0, sync=None if prefetch else (req.uri, req.text),
                                 emitted_before=b"".join(self.runtime.token_bytes(t) for t in resumed))
        if resumed:
            out = dataclasses.replace(out, tokens=resumed + out.tokens)
        if params is not None and (out.tokens or not out.cancelled):
            with self._lock:
                self.answers.remember(req.uri, prompt.ids, forced_bytes, params, out.tokens,
                                      self._eos_token() if out.stop_reason == "eos" else None, prefetched=prefetch,
                                      finished=not out.cancelled)
        if (self.index is not None and self.cfg.add_history and not prefetch and not out.cancelled
                and len(out.tokens) >= 2):
            try:
                self.index.add_history(list(out.tokens))
            except Exception as exc:  # the completion stands even if the index refuses it
                log.warning("add_history failed: %s", exc)
        result = CompletionResult(text=out.text, token_ids=out.tokens, prompt=prompt.text, stats=stats,
                                  cancelled=out.cancelled, stop_reason=out.stop_reason)
        if prefetch:
            return result  # idle-time work: not a request of the user's, not in the totals
        return self.record(result, t0)

    def prefetch_after(self, req: CompletionRequest, answer: CompletionResult,
                       cancel: threading.Event | None = None) -> CompletionResult | None:
        """Decode, in idle time, the answer to the request the editor will make once ``answer``
        is accepted (the buffer with it inserted, the cursor after it), and remember it. None
        where there is nothing to prefetch (an empty or cancelled answer, too long a request)."""
        if (not answer.text or answer.cancelled or answer.stop_reason == "eos" or not self.cfg.answer_cache
                or req.max_tokens > PREFETCH_MAX_TOKENS):
            return None
        accepted = req.text[:req.offset] + answer.text + req.text[req.offset:]
        nxt = dataclasses.replace(req, text=accepted, offset=req.offset + len(answer.text))
        return self.complete(nxt, cancel, prefetch=True)

    def _stopper(self, req: CompletionRequest, prompt: Prompt, max_tokens: int) -> StopChecker:
        return StopChecker(
            StopConfig(max_tokens=max_tokens, stop_strings=tuple(req.stop),
                       single_line=not req.multiline, line_prefix=prompt.line_prefix, eos_ids=self.eos_ids),
            self.runtime.token_bytes, skip=prompt.forced.encode("utf-8"))

    def _eos_token(self) -> int:
        """A token the stop rules read as the end (any of ``eos_ids`` stops alike)."""
        eos = self.runtime.eos_token_id
        return int(eos) if eos is not None else min(self.eos_ids)

    def prepare_complete(self, uri: str, text: str, offset: int,
                         cancel: threading.Event | None = None) -> Prepared:
        """Prefill the completion prompt at ``offset`` on ``uri``'s KV cache while the cursor
        rests there: the first completion asked there (after some typing, or at once) prefills
        only what differs: what was typed (and, in a fill-in-the-middle prompt, the suffix after
        the cursor). Output is unchanged: a warm cache, as for any later keystroke. Raises
        ValueError for bad input."""
        if not isinstance(text, str):
            raise ValueError("text must be a string")
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= len(text):
            raise ValueError(f"offset {offset!r} is out of range: the text has {len(text)} characters")
        prompt = self.prompts.build(text, offset, self._prompt_config())
        return self.prepare(uri, prompt.ids, cancel)

    def _prompt_config(self) -> PromptConfig:
        """The prompt budget, within the model's positions (a model with a small context window)."""
        return within_positions(self.cfg.prompt, model_positions(self.runtime))

    def _fit_answer(self, prompt_tokens: int, max_tokens: int) -> int:
        """``max_tokens`` cut to the positions the model has after a prompt of ``prompt_tokens``;
        ValueError when none is left."""
        limit = model_positions(self.runtime)
        if limit is None:
            return max_tokens
        if prompt_tokens >= limit:
            raise ValueError(f"the prompt ({prompt_tokens} tokens) leaves no room in the model's "
                             f"{limit} positions")
        return min(max_tokens, limit - prompt_tokens)

    def decode(self, key: Hashable, prompt_ids: Sequence[int], proposer: Proposer, policy: DraftPolicy | None,
               stopper: StopChecker, sampling: SamplingParams, forced: ForcedPrefix | None = None,
               cancel: threading.Event | None = None, propose_k: int | None = None, t0: float | None = None,
               sync: tuple[str, str] | None = None, emitted_before: bytes = b"") -> tuple[GenerationOutput, GenerationStats]:
        """Prefill ``prompt_ids`` on the KV cache kept under ``key`` (a uri, or an edit's
        ``edit_cache_key``), then ``generate``; one request at a time.

        ``sync``: (uri, text) given to the index first (``config.sync_buffers``, when it
        changed). A request cancelled during prefill returns an empty cancelled output.
        """
        stats = GenerationStats()
        if not self.speculation_exact:
            policy = None  # plain decoding: see ``speculation_exact``
        with self._lock:
            if sync is not None and self.index is not None and self.cfg.sync_buffers:
                self._sync_buffer(*sync)
            kv = self.pool.get(key)
            if not prefill(self.runtime, kv, prompt_ids, stats, cancel, self.cfg.prefill_chunk,
                           reuse=self.cfg.reuse_kv, fuse=self.cfg.fuse_prefill):
                return GenerationOutput([], "", "cancelled", cancelled=True), stats
            out = generate(self.runtime, kv, prompt_ids, proposer, policy, stopper, sampling, forced, stats,
                           cancel, self.cfg.propose_k if propose_k is None else propose_k, t_start=t0,
                           emitted_before=emitted_before)
        return out, stats

    def _proposer(self, uri: str, prompt_ids: Sequence[int], fim: bool) -> Proposer:
        """The index and the output so far (which no index holds yet), or prompt lookup without an
        index; for a FIM prompt, seen from the text before the cursor (daemon/engine/fim_view.py)."""
        # the prompt part of what the proposer sees: all of it, or a FIM prompt's prefix
        prefix_end = prompt_ids.index(fim_tokens(self.runtime.tokenizer)[1]) if fim else len(prompt_ids)
        prefix_start = 1 if fim else 0  # after <fim_prefix>
        if self.index is not None:
            proposer: Proposer = ContextLookup(IndexProposer(self.index, uri), prefix_end - prefix_start)
        else:
            proposer = prompt_lookup()
        return ProbeBackoff(PrefixView(proposer, prefix_start, prefix_end, len(prompt_ids)) if fim else proposer)

    def prepare(self, key: Hashable, prompt_ids: Sequence[int], cancel: threading.Event | None = None) -> Prepared:
        """Prefill ``prompt_ids`` (all but the last, as for any prompt) on the KV cache kept under
        ``key`` and generate nothing: a later request on ``key`` whose prompt starts with them
        prefills only the rest. Work ahead of a request: it runs in ``PREPARE_CHUNK``-token
        passes and ``cancel`` is seen between them (the passes done stay cached). Counted in
        ``stats()["prepared"]``, apart from the requests' totals: the prepares that finished,
        and the tokens every prepare prefilled (a cancelled one's passes too)."""
        stats = GenerationStats()
        target = prompt_ids[:-1]
        with self._lock:
            kv = self.pool.get(key)
            if self.cfg.reuse_kv and common_prefix_len(kv.tokens, target) == len(target):
                # all cached already, maybe with more after it (the answer of a completion just
                # asked here, which the next keystroke may reuse): nothing to do, nothing cropped
                stats.reused_tokens, finished = len(target), True
            else:
                finished = prefill(self.runtime, kv, prompt_ids, stats, cancel, PREPARE_CHUNK,
                                   reuse=self.cfg.reuse_kv)
            # a request that preempted it during its last pass still gets it answered as cancelled
            finished = finished and not (cancel is not None and cancel.is_set())
            self.prepared["prepares"] += finished
            self.prepared["prefill_tokens"] += stats.prefill_tokens
        return Prepared(len(prompt_ids), stats.prefill_tokens, stats.reused_tokens, cancelled=not finished)

    def record(self, result: CompletionResult, t0: float) -> CompletionResult:
        """Stamp ``result`` with its time since ``t0`` and add it to the totals."""
        result.stats.ms = (time.perf_counter() - t0) * 1000
        self.totals.merge(result.stats)
        self.requests += 1
        return result

    def forget(self, uri: str) -> None:
        """Document closed: its KV caches and answer are forgotten before any later work on the
        model, without waiting for the work running now (daemon/engine/engine_lock.py)."""
        self._lock.forget(uri)

    def release_forgotten(self) -> None:
        """Free the memory of the documents ``forget`` noted now: waits for the work running."""
        with self._lock:
            pass  # taking the lock forgets them

    def drop_cache(self, uri: str) -> None:
        """Forget the KV caches of ``uri``, its edits' too, now (a cold measurement wanted)."""
        self.forget(uri)
        self.release_forgotten()

    def _forget_now(self, uri: str) -> None:
        """``uri``'s caches and answer go; the caller holds the engine's lock."""
        self.pool.drop(uri)
        self.pool.drop(edit_cache_key(uri))
        self.answers.forget(uri)

    def release_memory(self) -> None:
        """Memory ran out: forget every KV cache, and hand the GPU's cached blocks back."""
        with self._lock:
            self.pool.clear()
        if self.runtime.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    def stats(self) -> dict[str, Any]:
        """Totals over all requests, the cost model, the learnt acceptance rates, and whether the
        runtime's passes are exact (speculation is off where they are not)."""
        exactness = getattr(self.runtime, "exactness", None)
        return {"requests": self.requests, "totals": self.totals.to_dict(), "prepared": dict(self.prepared),
                "cost_ms": self.cost.to_dict(), "acceptance": self.policy.tracker.snapshot(),
                "answer_cache": self.answers.stats.to_dict(),
                "kv_caches": len(self.pool), "kv_tokens": self.pool.cached_tokens(),
                "runtime": getattr(self.runtime, "kind", "torch"),
                "exactness": exactness.to_dict() if callable(getattr(exactness, "to_dict", None)) else None,
                # llama.cpp: whether its build multiplies Q4_1/Q8_0 weights by many columns at once, exactly
                "exact_gemm": getattr(self.runtime, "exact_gemm", None),
                # and its attention's F16 products through the patch's kernel, exactly
                "exact_f16": getattr(self.runtime, "exact_f16", None),
                "speculation": "on" if self.speculation_exact else "off: this runtime's passes are not exact"}

    # --- internals -------------------------------------------------------------------
    def _sync_buffer(self, uri: str, text: str) -> None:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        if self._synced.get(uri) != digest:
            self.index.open_buffer(uri, text)
            self._synced[uri] = digest


def _validate(req: CompletionRequest) -> None:
    if not isinstance(req.text, str):
        raise ValueError("text must be a string")
    if not isinstance(req.offset, int) or not 0 <= req.offset <= len(req.text):
        raise ValueError(f"offset {req.offset!r} is out of range: the text has {len(req.text)} characters")
    if not isinstance(req.max_tokens, int) or req.max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {req.max_tokens!r}")
    check_sampling(req.sampling)


def edit_cache_key(uri: str) -> tuple[str, str]:
    """The KV cache of a document's edit prompts, kept apart from its completions' (``uri``):
    a tuple, so that no document name (a uri is any string) can share it."""
    return ("edit", uri)
