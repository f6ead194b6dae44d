"""Running one bench case three ways (five with ``prepared``), side by side, on the same prompt.

Variants (vocabulary of the report):

- ``spec``: ngramd's engine with speculation (n-gram drafts verified in one pass);
- ``plain``: the same engine, ``speculate=False``: one forward pass per token;
- ``hf``: transformers' ``generate(input_ids, do_sample=False,
  prompt_lookup_num_tokens=10, max_new_tokens=N)`` on the engine's own prompt
  token ids (Saxena 2023, prompt lookup decoding), the anchor a user would pick;
- ``prep_spec`` / ``prep_plain`` (``prepared=True`` only): ``spec`` and ``plain`` asked
  where the prompt was prefilled first, as the editors have the daemon do where the
  cursor rests (``Completer.prepare_complete``) or while an edit's instruction is typed
  (``Completer.prepare_edit``). The prepare is untimed (the user is not waiting; its
  own time is ``prepare_ms``); the request then prefills only the prompt's rest and
  decodes. Both get the same head start, so their ratio is what speculation buys in
  the editor's flow. ``hf`` has no such variant: transformers' prompt lookup does not
  take a prefilled cache (docs/benchmarks.md at 53c478e, "Prepared edits").

On a llama.cpp runtime (daemon/runtime/llamacpp.py) there is no torch model, so no ``hf``;
its baselines are llama-cpp-python's own decoding of the same GGUF
(daemon/bench/llamacpp_peer.py), on the same prompt ids and plain's number of tokens:

- ``llamacpp_plain``: ``Llama.generate`` greedy, one token per pass;
- ``llamacpp_pld``: the same with ``LlamaPromptLookupDecoding(num_pred_tokens=10)`` drafts;
- ``prep_llamacpp_plain`` / ``prep_llamacpp_pld`` (``prepared=True``): the same with the prompt
  but its last token evaluated in their own KV cache first, untimed, as a llama.cpp server's
  prompt cache gives an editor.

Their forward passes are recorded by wrapping the runtime's ``forward_pass``
(``RuntimePassRecorder``), as the torch model's hook does.

Fairness rules, each chosen so that the three do the same work:

- Same prompt: ``hf`` gets the token ids the engine fed the model (recovered from
  the plain run's forward passes, see ``PassRecorder``), not a re-tokenization.
- Same length: a completion runs with ``multiline=True`` and no stop strings (an
  edit with its own closing-fence stop), so it stops only where its own rules do
  (max_tokens, eos, block end), the same for ``spec`` and ``plain``; ``hf`` is given
  ``max_new_tokens`` = the number of tokens plain produced, so all three produce the
  same number of tokens (none made by plain: ``hf`` is not timed, it makes at least one).
  ``identical`` compares ``spec`` with ``plain`` over the full ids (length too);
  ``hf_identical`` compares ``hf`` with ``plain`` over the shorter length (eos may
  stop ``hf`` early; float noise may differ between the two code paths).
- Cold prefix each run: the document's KV caches are dropped before each run, so it
  never reuses the KV of the previous run (``hf`` cannot either), and without
  ``prepared`` the engine runs with ``reuse_kv=False`` besides; every ``ms`` includes
  tokenization, prefill and decoding, wall clock. A prepared run drops them too, then
  fills them with its prepare alone.
- No leak of answers: ``add_history=False``, and ``add_history`` is a no-op on the
  engine's view of the index anyway; the file being completed is taken out of the
  workspace index while its case runs (the case's text is the open buffer).
- One engine for the whole bench, as in the daemon: the draft policy's learnt
  acceptance rates carry over from case to case (they hold rates, never text).
- Interleaved and warmed up: one warm-up of each variant before the first case;
  each of ``repeat`` rounds runs the three in a rotating order, then the two prepared
  ones in a rotating order; figures are medians. ``prepared_repeat`` rounds past ``repeat``
  run the prepared ones alone: a prepared run times a short answer's few passes, whose median
  the machine's spells move more from round to round than a cold run's prefill (each prepared
  run still prefills untimed first, so a round of them costs about what a cold round does).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ngramd.daemon.bench.cases import BenchCase
from ngramd.daemon.bench.followed import followed
from ngramd.daemon.bench.llamacpp_peer import PEERS, LlamaCppPeers
from ngramd.daemon.bench.report import changed_lines, still_compiles
from ngramd.daemon.edit.indent import line_before
from ngramd.daemon.protocol.requests import CompletionRequest, CompletionResult, EditRequest

HF_PROMPT_LOOKUP_TOKENS = 10
VARIANTS = ("spec", "plain", "hf")
# The orders the cold variants run in, by turns (plain before hf: hf generates as many tokens as
# plain did), and the prepared variants' after them; a case's first round takes the turn after the
# previous case's, so that at --repeat 1 too no variant always runs first or after another.
VARIANTS_ORDERS = (("plain", "spec", "hf"), ("spec", "plain", "hf"), ("plain", "hf", "spec"))
PREPARED_ORDERS = (("prep_plain", "prep_spec"), ("prep_spec", "prep_plain"))
# On a llama.cpp runtime, with llama.cpp's own baselines: plain before the peers (they make as many
# tokens as it did), and the order turns as above
LLAMACPP_ORDERS = (("plain", "spec", "llamacpp_plain", "llamacpp_pld"),
                   ("spec", "plain", "llamacpp_pld", "llamacpp_plain"),
                   ("plain", "llamacpp_plain", "spec", "llamacpp_pld"),
                   ("plain", "llamacpp_pld", "llamacpp_plain", "spec"))
LLAMACPP_PREPARED_ORDERS = (("prep_plain", "prep_spec", "prep_llamacpp_plain", "prep_llamacpp_pld"),
                            ("prep_spec", "prep_llamacpp_plain", "prep_llamacpp_pld", "prep_plain"),
                            ("prep_llamacpp_plain", "prep_llamacpp_pld", "prep_plain", "prep_spec"),
                            ("prep_llamacpp_pld", "prep_plain", "prep_spec", "prep_llamacpp_plain"))
HF_NEEDS_TORCH = "transformers' prompt lookup runs a torch model; this runtime has none"


# --------------------------------------------------------------------------- forward-pass trace


@dataclass
class Pass:
    start: int  # position of the first new token (tokens already in the KV cache)
    ids: list[int]  # the new tokens fed in this pass

    @property
    def n_new(self) -> int:
        return len(self.ids)


class PassRecorder:
    """Records every forward call of a model: where it started and what it fed.

    A forward pre-hook on the model module; works for the engine (which calls
    ``runtime.forward`` -> ``model(...)``) and for ``generate`` alike.
    """

    def __init__(self, model: Any):
        self.model = model
        self.passes: list[Pass] = []
        self._handle = None

    def __enter__(self) -> "PassRecorder":
        self.passes = []
        self._handle = self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids")
        if ids is None and args:
            ids = args[0]
        if ids is None:
            return
        pos = kwargs.get("position_ids")
        if pos is not None:
            start = int(pos.reshape(-1)[0])
        else:
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            start = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        self.passes.append(Pass(start, [int(t) for t in ids.reshape(-1).tolist()]))


class RuntimePassRecorder:
    """Records every ``forward_pass`` of a runtime with no torch model to hook (llama.cpp): where
    it started (the cache's length) and what it fed. Wraps the method on the instance."""

    def __init__(self, runtime: Any):
        self.runtime = runtime
        self.passes: list[Pass] = []
        self._wrapped: Any = None

    def __enter__(self) -> "RuntimePassRecorder":
        self.passes = []
        self._wrapped = self.runtime.__dict__.get("forward_pass")  # another wrapper's, kept on exit
        inner = self.runtime.forward_pass

        def forward_pass(ids: Any, cache: Any, *args: Any, **kwargs: Any) -> Any:
            self.passes.append(Pass(len(cache), [int(t) for t in ids]))
            return inner(ids, cache, *args, **kwargs)

        self.runtime.forward_pass = forward_pass
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._wrapped is not None:
            self.runtime.forward_pass = self._wrapped
        else:
            self.runtime.__dict__.pop("forward_pass", None)


def recorder_for(runtime: Any) -> Any:
    """The pass recorder of ``runtime``: a hook on its torch model, or a wrapper of its passes."""
    model = getattr(runtime, "model", None)
    if hasattr(model, "register_forward_pre_hook"):
        return PassRecorder(model)
    return RuntimePassRecorder(runtime)


def prompt_ids_from_plain(passes: list[Pass], generated: list[int]) -> list[int] | None:
    """The prompt token ids, rebuilt from a plain (chain, cold-cache) run's passes.

    Writes every fed token at its position; the sequence is then the prompt
    followed by the generated tokens that were fed back (all but the last, or all).
    Returns None when the passes do not fit that shape.
    """
    seq: list[int] = []
    for p in passes:
        if p.start > len(seq):
            return None
        del seq[p.start:]
        seq.extend(p.ids)
    for fed in (len(generated) - 1, len(generated)):
        if fed < 0 or fed > len(seq):
            continue
        if seq[len(seq) - fed:] == generated[:fed]:
            return seq[:len(seq) - fed]
    return None


def decode_trace(passes: list[Pass], prompt_len: int) -> list[dict[str, int]]:
    """Per decode pass: context length, tokens verified, tokens committed.

    Decode passes are those that feed a token past the prompt (prefill passes feed only
    prompt tokens; the first decode pass may feed the prompt's last piece too, the fused
    prefill). ``committed`` is the tokens the pass generated (the last pass: unknown, -1),
    how far the next pass starts beyond the pass's first generated position; for a
    speculative pass ``committed - 1`` is the number of accepted draft tokens.
    """
    out = []
    decode = [p for p in passes if p.start + p.n_new > prompt_len]
    for i, p in enumerate(decode):
        # a fused pass's first generated token comes from the prompt's last row (prompt_len - 1)
        first = max(p.start, prompt_len - 1)
        committed = decode[i + 1].start - first if i + 1 < len(decode) else -1
        out.append({"ctx": p.start, "n": p.n_new, "committed": committed})
    return out


# --------------------------------------------------------------------------- transformers baseline


class _FirstTokenTimer:
    """A ``generate`` streamer that notes when the first new token arrives."""

    def __init__(self) -> None:
        self.calls = 0
        self.first: float | None = None

    def put(self, value: Any) -> None:
        self.calls += 1
        if self.calls == 2 and self.first is None:  # call 1 is the prompt
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


def hf_prompt_lookup(model: Any, prompt_ids: list[int], max_new_tokens: int, eos_token_id: int | None,
                     device: Any = "cpu") -> tuple[list[int], float, float]:
    """Greedy ``generate`` with prompt lookup; returns (new ids, ms, first-token ms)."""
    import torch

    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    timer = _FirstTokenTimer()
    kwargs = dict(max_new_tokens=max(1, max_new_tokens), do_sample=False,
                  prompt_lookup_num_tokens=HF_PROMPT_LOOKUP_TOKENS,
                  attention_mask=torch.ones_like(input_ids), streamer=timer,
                  pad_token_id=eos_token_id if eos_token_id is not None else 0)
    if eos_token_id is not None:
        kwargs["eos_token_id"] = eos_token_id
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids, **kwargs)
    ms = (time.perf_counter() - t0) * 1000
    first = ((timer.first or time.perf_counter()) - t0) * 1000
    return [int(t) for t in out[0, len(prompt_ids):].tolist()], ms, first


# --------------------------------------------------------------------------- the engine side


class _NoHistory:
    """The index as the engine sees it during the bench: ``add_history`` does nothing,
    so a repeated run cannot draft from the previous run's answer."""

    def __init__(self, index: Any):
        self._index = index

    def add_history(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


@dataclass
class EngineRun:
    result: CompletionResult | None
    ms: float
    passes: list[Pass] = field(default_factory=list)
    unsupported: str | None = None
    prepare_ms: float | None = None  # a prepared run's prepare, untimed in ``ms``


class BenchRunner:
    """Holds the model, one index per workspace, and runs cases."""

    def __init__(self, runtime: Any, engine_config: Any = None, index_config: Any = None, hf: bool = True,
                 log: Callable[[str], None] | None = None, prepared: bool = False, typed_instruction: bool = False):
        if typed_instruction and not prepared:
            raise ValueError("typed_instruction needs prepared: it says how an edit is prepared")
        self.rt = runtime
        self.engine_config = engine_config
        self.index_config = index_config
        torch_model = hasattr(getattr(runtime, "model", None), "generate")
        self.hf = hf and torch_model
        self.hf_skipped = HF_NEEDS_TORCH if hf and not torch_model else None
        # llama.cpp's own decoding of the same GGUF, where the runtime is llama.cpp's
        self.peers = LlamaCppPeers(runtime) if getattr(runtime, "kind", "torch") == "llamacpp" else None
        self._peer_passes: dict[str, int] = {}
        self.prepared = prepared
        self.typed_instruction = typed_instruction  # edits prepared through their instruction
        self.log = log or (lambda msg: None)
        self._indexes: dict[Path, Any] = {}
        self.index_stats: dict[str, Any] = {}
        self._warm = False
        self._completer = None
        self._index_view = _NoHistory(None)  # the engine's view of the current case's index
        self._turn = 0  # rounds run so far, of every case: which of the orders comes next

    def close(self) -> None:
        """Hand back what the run holds on the runtime, which may serve on after it: the engine's
        KV caches (a llama.cpp runtime has a few sequences for everyone) and the peers."""
        if self._completer is not None:
            self._completer.release_memory()
        if self.peers is not None:
            self.peers.close()

    # --- index -------------------------------------------------------------------------
    def index_for(self, workspace: Path) -> Any:
        """The workspace's index, built once per run of the bench."""
        if workspace not in self._indexes:
            from ngramd.index.store import IndexConfig, NgramIndex

            cfg = self.index_config if self.index_config is not None else IndexConfig()
            idx = NgramIndex(self.rt.tokenize_batch, cfg)
            t0 = time.perf_counter()
            counts = idx.index_workspace(str(workspace))
            seconds = time.perf_counter() - t0
            self.index_stats[str(workspace)] = {"counts": counts, "seconds": round(seconds, 2)}
            self.log(f"indexed {workspace} in {seconds:.1f} s: {counts}")
            self._indexes[workspace] = idx
        return self._indexes[workspace]

    # --- one engine run ----------------------------------------------------------------
    def completer(self) -> Any:
        """The one engine of the bench (as in the daemon: its learnt acceptance rates
        carry over from case to case, never any text), with the fairness overrides."""
        if self._completer is None:
            import dataclasses

            from ngramd.daemon.edit.session import EditingCompleter
            from ngramd.daemon.engine.loop import EngineConfig

            cfg = self.engine_config if self.engine_config is not None else EngineConfig()
            # a prepared run needs the cache its prepare filled; every run drops the document's first.
            # The buffer is the index's already (case_document, as the daemon's editor sync does): a
            # completer's own sync would re-tokenize it inside the first timed run that syncs (plain
            # for a completion; speculative for an edit, which syncs only when speculating)
            cfg = dataclasses.replace(cfg, add_history=False, reuse_kv=self.prepared, sync_buffers=False)
            self.engine_config = cfg
            self._completer = EditingCompleter(self.rt, self._index_view, cfg)
        return self._completer

    def _engine_run(self, case: BenchCase, index: Any, speculate: bool, max_tokens: int | None = None,
                    prepared: bool = False) -> EngineRun:
        self._index_view._index = index
        completer = self.completer()
        uri = case.path.as_uri()
        if hasattr(completer, "drop_cache"):
            completer.drop_cache(uri)  # cold prefix every run, like hf
        prepare_ms = None
        if prepared:
            t0 = time.perf_counter()
            if case.mode == "edit":
                completer.prepare_edit(uri, case.text, case.offset, case.end or case.offset, None,
                                       case.instruction if self.typed_instruction else None)
            else:
                completer.prepare_complete(uri, case.text, case.offset)
            prepare_ms = (time.perf_counter() - t0) * 1000
        n = max_tokens or case.max_tokens
        cancel = threading.Event()
        recorder = recorder_for(self.rt)
        t0 = time.perf_counter()
        try:
            with recorder:
                if case.mode == "edit":
                    req = EditRequest(uri=uri, text=case.text, start=case.offset, end=case.end or case.offset,
                                      instruction=case.instruction or "", max_tokens=n, speculate=speculate)
                    result = completer.edit(req, cancel)
                else:
                    req = CompletionRequest(uri=uri, text=case.text, offset=case.offset, max_tokens=n,
                                            multiline=True, speculate=speculate, stop=())
                    result = completer.complete(req, cancel)
        except NotImplementedError as exc:
            return EngineRun(None, 0.0, unsupported=str(exc) or f"{case.mode} mode is not implemented")
        ms = (time.perf_counter() - t0) * 1000
        return EngineRun(result, ms, recorder.passes, prepare_ms=prepare_ms)

    def warm_up(self, case: BenchCase) -> None:
        """One short run of each variant, so that the first measured case pays no one-time costs."""
        if self._warm:
            return
        index = self.index_for(case.workspace)
        with case_document(index, case):
            plain = self._engine_run(case, index, speculate=False, max_tokens=8)
            self._engine_run(case, index, speculate=True, max_tokens=8)
            if self.prepared:  # its prepare runs in passes of another length: other kernels
                self._engine_run(case, index, speculate=True, max_tokens=8, prepared=True)
            if self.hf and plain.result is not None:
                hf_prompt_lookup(self.rt.model, self._prompt_ids(plain), 8, self.rt.eos_token_id, self.rt.device)
            if self.peers is not None and plain.result is not None:  # loads them: untimed
                for peer in PEERS:
                    self.peers.run(peer, self._prompt_ids(plain), 8)
                    if self.prepared:
                        self.peers.run(peer, self._prompt_ids(plain), 8, prepared=True)
        self._warm = True  # only now: a case whose warm-up failed leaves it to the next case

    # --- one case ----------------------------------------------------------------------
    def run_case(self, case: BenchCase, repeat: int = 1, prepared_repeat: int | None = None) -> dict[str, Any]:
        """Measure one case; returns its report row (see bench_report for the keys). ``prepared_repeat``
        (at least ``repeat``; default ``repeat``): rounds of the prepared variants, the ones past
        ``repeat`` prepared variants alone."""
        rounds = max(1, repeat)
        prepared_rounds = max(rounds, prepared_repeat or 0)  # bench() refuses fewer than ``repeat``
        base = {"id": case.id, "kind": case.kind, "mode": case.mode, "workspace": case.workspace_ref,
                "file": case.file, "offset": case.offset, "max_tokens": case.max_tokens}
        index = self.index_for(case.workspace)
        self.warm_up(case)
        cold_orders, prepared_orders = ((LLAMACPP_ORDERS, LLAMACPP_PREPARED_ORDERS) if self.peers is not None
                                        else (VARIANTS_ORDERS, PREPARED_ORDERS))
        variants = VARIANTS + cold_orders[0] + (prepared_orders[0] if self.prepared else ())
        times: dict[str, list[float]] = {v: [] for v in variants}  # each run's ms
        first: dict[str, list[float]] = {v: [] for v in variants}  # each run's time to its first token
        peer_ids: dict[str, list[list[int]]] = {v: [] for v in variants if v.removeprefix("prep_") in PEERS}
        spec_runs: list[EngineRun] = []
        plain_runs: list[EngineRun] = []
        prepared_runs: list[EngineRun] = []
        hf_ids: list[int] | None = None
        hf_passes: int | None = None
        prompt_ids: list[int] | None = None
        with case_document(index, case):
            for r in range(prepared_rounds if self.prepared else rounds):
                turn = self._turn
                self._turn += 1
                for variant in cold_orders[turn % len(cold_orders)] if r < rounds else ():
                    if variant in PEERS:
                        self._peer_run(variant, prompt_ids, plain_runs, times, first, peer_ids)
                        continue
                    if variant == "hf":
                        n_plain = len(plain_runs[0].result.token_ids)
                        if not self.hf or n_plain == 0:  # hf generates at least one token: unequal work
                            continue
                        with PassRecorder(self.rt.model) as recorder:  # as the engine's runs are
                            hf_ids, ms, ftm = hf_prompt_lookup(self.rt.model, prompt_ids, n_plain,
                                                               self.rt.eos_token_id, self.rt.device)
                        hf_passes = len(recorder.passes)
                        times["hf"].append(ms)
                        first["hf"].append(ftm)
                        continue
                    run = self._engine_run(case, index, variant == "spec")
                    if run.unsupported:
                        return {**base, "status": "unsupported", "error": run.unsupported}
                    (spec_runs if variant == "spec" else plain_runs).append(run)
                    times[variant].append(run.ms)
                    first[variant].append(run.result.stats.first_token_ms)
                    if variant == "plain" and prompt_ids is None:  # read off plain's passes (no drafts)
                        prompt_ids = self._prompt_ids(run)
                for variant in prepared_orders[turn % len(prepared_orders)] if self.prepared else ():
                    if variant.removeprefix("prep_") in PEERS:
                        self._peer_run(variant, prompt_ids, plain_runs, times, first, peer_ids)
                        continue
                    run = self._engine_run(case, index, variant == "prep_spec", prepared=True)
                    prepared_runs.append(run)
                    times[variant].append(run.ms)
                    first[variant].append(run.result.stats.first_token_ms)
        row = self._row(base, case, spec_runs, plain_runs, hf_ids, prompt_ids, times, first)
        # HF's forward calls: its first (the whole prompt) yields the first token, as ngramd's first
        # decoding pass does, so the count compares with ``forward_passes``
        row["hf_forward_passes"] = hf_passes
        if self.prepared:
            self._add_prepared(row, prepared_runs, times, first, plain_runs[-1].result)
        if self.peers is not None:
            self._add_peers(row, times, first, peer_ids, list(plain_runs[-1].result.token_ids))
        return row

    def _peer_run(self, variant: str, prompt_ids: list[int] | None, plain_runs: list[EngineRun],
                  times: dict[str, list[float]], first: dict[str, list[float]],
                  peer_ids: dict[str, list[list[int]]]) -> None:
        """One timed run of a llama.cpp baseline (``prep_``: prepared), as many tokens as plain made."""
        n_plain = len(plain_runs[0].result.token_ids)
        if n_plain == 0 or prompt_ids is None:  # generate() makes at least one token: unequal work
            return
        peer = variant.removeprefix("prep_")
        run = self.peers.run(peer, prompt_ids, n_plain, prepared=variant != peer)
        peer_ids[variant].append(run.ids)
        times[variant].append(run.ms)
        first[variant].append(run.first_token_ms)
        if variant == peer:
            self._peer_passes[peer] = run.forward_passes

    def _add_peers(self, row: dict[str, Any], times: dict[str, list[float]], first: dict[str, list[float]],
                   peer_ids: dict[str, list[list[int]]], plain_ids: list[int]) -> None:
        """The llama.cpp baselines' figures: ms, first-token ms, whether every run made plain's
        token ids, and ngramd's speedup over each (cold over cold, prepared over prepared)."""
        for variant, runs in peer_ids.items():
            peer = variant.removeprefix("prep_")
            key = peer if variant == peer else f"prepared_{peer}"
            row[f"{key}_ms"] = _r(statistics.median(times[variant])) if runs else None
            row[f"{key}_first_token_ms"] = _r(statistics.median(first[variant])) if runs else None
            row[f"{key}_identical"] = all(ids == plain_ids for ids in runs) if runs else None
            row[f"speedup_{key}"] = _ratio(row[f"{key}_ms"], row.get("prepared_ms" if variant != peer else "ms"))
            if variant == peer:  # its last cold run's ``Llama.eval`` calls, the first one the prompt's
                row[f"{peer}_forward_passes"] = self._peer_passes.pop(peer, None) if runs else None

    @staticmethod
    def _add_prepared(row: dict[str, Any], runs: list[EngineRun], times: dict[str, list[float]],
                      first: dict[str, list[float]], plain: Any) -> None:
        """The prepared variants' figures; any prepared answer unlike plain's makes the case not
        identical, and the row shows the first such answer and where it departs."""
        plain_ids = list(plain.token_ids)
        row["prepared_ms"] = _r(statistics.median(times["prep_spec"]))
        row["prepared_plain_ms"] = _r(statistics.median(times["prep_plain"]))
        # the prepared ceiling's (bench_report): the remaining prefill and the first pass
        row["prepared_first_token_ms"] = _r(statistics.median(first["prep_spec"]))
        row["prepared_plain_first_token_ms"] = _r(statistics.median(first["prep_plain"]))
        row["prepare_ms"] = _r(statistics.median(r.prepare_ms for r in runs))
        row["speedup_prepared"] = _ratio(row["prepared_plain_ms"], row["prepared_ms"])
        # what the prepared requests still prefilled themselves: the head start shown, not assumed
        row["prepared_prefill_tokens"] = max(r.result.stats.prefill_tokens for r in runs)
        differing = next((r.result for r in runs if list(r.result.token_ids) != plain_ids), None)
        row["prepared_identical"] = differing is None
        row["identical"] = row["identical"] and row["prepared_identical"]
        if differing is not None:
            row["prepared_token_ids"] = list(differing.token_ids)
            row["prepared_text"] = differing.text
            row["prepared_first_difference"] = _first_difference(row["prepared_token_ids"], plain_ids)
            row["plain_token_ids"], row["plain_text"] = plain_ids, plain.text

    def _prompt_ids(self, plain: EngineRun) -> list[int]:
        ids = prompt_ids_from_plain(plain.passes, list(plain.result.token_ids))
        if ids is not None:
            return ids
        from ngramd.daemon.runtime.tokenizer import encode_template  # the prompt's text holds its template's special tokens

        return encode_template(self.rt.tokenizer, plain.result.prompt)

    def _row(self, base: dict, case: BenchCase, spec_runs: list[EngineRun], plain_runs: list[EngineRun],
             hf_ids: list[int] | None, prompt_ids: list[int] | None, times: dict[str, list[float]],
             first: dict[str, list[float]]) -> dict[str, Any]:
        spec = spec_runs[-1].result
        plain = plain_runs[-1].result
        stats = spec.stats
        spec_ids = [list(r.result.token_ids) for r in spec_runs]
        plain_ids = list(plain.token_ids)
        # identical only if every speculative run matched plain decoding exactly
        identical = all(ids == plain_ids for ids in spec_ids) and \
            all(list(r.result.token_ids) == plain_ids for r in plain_runs)
        by_source = {}
        for src, drafted in sorted(stats.drafted_by_source.items()):
            acc = stats.accepted_by_source.get(src, 0)
            by_source[str(src)] = {"drafted": drafted, "accepted": acc,
                                   "rate": round(acc / drafted, 3) if drafted else 0.0}
        prompt_len = len(prompt_ids) if prompt_ids is not None else 0
        trace = decode_trace(spec_runs[-1].passes, prompt_len)
        plain_trace = decode_trace(plain_runs[-1].passes, prompt_len)
        med = {v: (statistics.median(t) if t else None) for v, t in times.items()}
        medf = {v: (statistics.median(t) if t else None) for v, t in first.items()}
        row = {
            **base,
            "status": "ok",
            "prompt": spec.prompt,
            "prompt_tokens": prompt_len,
            "text": spec.text,
            "token_ids": list(spec.token_ids),
            "generated": len(spec.token_ids),
            "stop_reason": spec.stop_reason,
            "ms": _r(med["spec"]),
            "plain_ms": _r(med["plain"]),
            "hf_prompt_lookup_ms": _r(med["hf"]),
            "first_token_ms": _r(medf["spec"]),
            "plain_first_token_ms": _r(medf["plain"]),
            "hf_first_token_ms": _r(medf["hf"]),
            "runs_ms": {v: [_r(t) for t in ts] for v, ts in times.items()},
            "forward_passes": stats.forward_passes,
            "plain_forward_passes": plain.stats.forward_passes,
            "drafted": stats.drafted,
            "accepted": stats.accepted,
            "acceptance": round(stats.acceptance, 3),
            "tokens_per_pass": round(stats.tokens_per_pass, 3),
            "acceptance_by_source": by_source,
            "accepted_per_pass": [t["committed"] - 1 for t in trace if t["committed"] >= 1],
            "trace": trace,
            "plain_trace_passes": len(plain_trace),
            "identical": identical,
            "hf_identical": _prefix_equal(hf_ids, plain_ids) if hf_ids is not None else None,
            "hf_generated": len(hf_ids) if hf_ids is not None else None,
        }
        if case.mode == "edit":
            end = case.end or case.offset
            row["changed_lines"] = changed_lines(case.text[case.offset:end], spec.text)
            row["still_compiles"] = still_compiles(case.path.name, case.text, case.offset, end, spec.text)
            lead = line_before(case.text, case.offset)
            row["followed"] = followed(case.instruction or "", case.path.name, case.text[case.offset:end], lead,
                                       spec.text)
        if not identical:  # where the first run unlike plain's last departs from it
            unlike = next((ids for ids in spec_ids if ids != plain_ids), None)
            if unlike is None:  # plain's own runs disagree
                unlike = next(list(r.result.token_ids) for r in plain_runs if list(r.result.token_ids) != plain_ids)
            row["plain_token_ids"] = plain_ids
            row["plain_text"] = plain.text
            row["differing_token_ids"] = unlike  # ``token_ids`` is the last run's, which may agree
            row["first_difference"] = _first_difference(unlike, plain_ids)
        row["speedup_plain"] = _ratio(row["plain_ms"], row["ms"])
        row["speedup_hf"] = _ratio(row["hf_prompt_lookup_ms"], row["ms"])
        return row


def _first_difference(a: list[int], b: list[int]) -> int:
    """The first position where two token lists differ (the shorter's length if one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _prefix_equal(a: list[int], b: list[int]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return round(num / den, 3)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


class case_document:
    """While a case runs: the file's on-disk copy is out of the index and the case's
    text is the open current buffer; afterwards the workspace is as it was."""

    def __init__(self, index: Any, case: BenchCase):
        self.index, self.case = index, case
        self.was_indexed = False

    def __enter__(self) -> None:
        path = str(self.case.path)
        # what the index held, not what is on disk: a file the workspace ignores
        # (.gitignore) must not be indexed by putting it back afterwards
        self.was_indexed = self.index.has_file(path)
        if self.was_indexed:
            self.index.remove_file(path)
        self.index.open_buffer(self.case.path.as_uri(), self.case.text)

    def __exit__(self, *exc: Any) -> None:
        self.index.close_buffer(self.case.path.as_uri())
        if self.was_indexed:
            self.index.index_file(str(self.case.path))
