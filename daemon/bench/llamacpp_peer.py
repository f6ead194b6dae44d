"""The llama.cpp baselines of ``ngramd bench`` on a llama.cpp runtime: the same GGUF decoded by
llama-cpp-python's own high-level ``Llama`` object, as a user of the binding (or of a
llama.cpp server) would run it.

- ``llamacpp_plain``: ``Llama.generate`` greedy (temperature 0), one token per pass;
- ``llamacpp_pld``: the same with ``draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10)``,
  the binding's own speculative mode (prompt lookup drafts, verified in one pass).

Each gets the engine's prompt token ids and makes exactly the number of tokens plain decoding
made (``generate`` stops at no end-of-sequence token by itself), on its own context and KV
cache: ``n_gpu_layers=0`` and the runtime's threads. A cold run starts from an empty cache; a
prepared run first evaluates the prompt but its last token, untimed (what a llama.cpp server's
prompt cache gives an editor), so that the timed request evaluates one prompt token and decodes.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

PLD_DRAFT_TOKENS = 10
PEERS = ("llamacpp_plain", "llamacpp_pld")
# Tokens a llama_decode call for the baselines: the binding's default, and llama-server's n_ubatch,
# as a user runs them (ngramd's runtime has its own, daemon/runtime/llamacpp.py's BATCH).
PEER_BATCH = 512


@dataclass
class PeerRun:
    ids: list[int]  # the generated token ids
    ms: float  # the request: prompt (its rest, prepared) and decoding, wall clock
    first_token_ms: float
    prepare_ms: float | None  # a prepared run's untimed prompt evaluation
    forward_passes: int  # ``Llama.eval`` calls of the request (the first one evaluates the prompt)


class LlamaCppPeers:
    """The two ``Llama`` objects of a bench run, loaded on first use from the runtime's GGUF."""

    def __init__(self, runtime: Any, n_ctx: int | None = None):
        self.path = str(runtime.path)
        self.threads = int(runtime.threads)
        self.n_ctx = int(n_ctx or getattr(runtime, "positions", 4096))
        self._llms: dict[str, Any] = {}

    def llm(self, peer: str) -> Any:
        if peer not in self._llms:
            from llama_cpp import Llama
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=PLD_DRAFT_TOKENS) if peer == "llamacpp_pld" else None
            if peer not in PEERS:
                raise ValueError(f"unknown llama.cpp baseline {peer!r}: one of {', '.join(PEERS)}")
            # logits_all with a draft model: the binding then keeps every row's logits, and sizes
            # that array by this flag alone (without it a prompt past n_batch tokens fails)
            self._llms[peer] = Llama(self.path, n_gpu_layers=0, n_ctx=self.n_ctx, n_threads=self.threads,
                                     n_threads_batch=self.threads, n_batch=PEER_BATCH, n_ubatch=PEER_BATCH,
                                     draft_model=draft,
                                     logits_all=draft is not None, verbose=False)
        return self._llms[peer]

    def run(self, peer: str, prompt_ids: Sequence[int], n: int, prepared: bool = False) -> PeerRun:
        return generate_n(self.llm(peer), prompt_ids, n, prepared)

    def close(self) -> None:
        for llm in self._llms.values():
            try:
                llm.close()
            except Exception:
                pass
        self._llms.clear()


def generate_n(llm: Any, prompt_ids: Sequence[int], n: int, prepared: bool = False) -> PeerRun:
    """Greedy ``llm.generate`` of exactly ``n`` tokens after ``prompt_ids``; see the module doc."""
    prompt = [int(t) for t in prompt_ids]
    llm.reset()  # never the previous run's cache
    prepare_ms = None
    if prepared and len(prompt) > 1:
        t0 = time.perf_counter()
        llm.eval(prompt[:-1])  # generate() then keeps this prefix and evaluates the last token only
        prepare_ms = (time.perf_counter() - t0) * 1000
    out: list[int] = []
    first = None
    with counted_evals(llm) as passes:
        t0 = time.perf_counter()
        gen = llm.generate(prompt, temp=0.0, reset=True)
        try:
            for token in gen:
                if first is None:
                    first = time.perf_counter()
                out.append(int(token))
                if len(out) >= n:
                    break
        finally:
            gen.close()
        end = time.perf_counter()
    return PeerRun(out, (end - t0) * 1000, ((first or end) - t0) * 1000, prepare_ms, passes[0])


@contextlib.contextmanager
def counted_evals(llm: Any) -> Iterator[list[int]]:
    """Counts ``llm.eval`` calls (forward passes: the first evaluates the prompt's uncached rest)
    while the block runs, in the one-item list it gives; wraps the method on the instance."""
    count = [0]
    evaluate = llm.eval

    def counted_eval(tokens: Sequence[int]) -> None:
        count[0] += 1
        evaluate(tokens)

    llm.eval = counted_eval
    try:
        yield count
    finally:
        del llm.eval
