"""llama.cpp plain decoding with its own prompt cache, as the typing replay's peer: what an editor
gets from llama-cpp-python's ``Llama`` (or a llama.cpp server) on the same GGUF.

The prompt, the stop rules and the forced prefix are ngramd's, so that both sides answer the same
request with the same text (the replay checks a sample against ngramd's cold plain answers);
decoding and the KV cache are the peer's alone: ``Llama.generate`` greedy, which keeps the longest
common prefix of its last tokens and evaluates only the rest. The forced prefix (the characters
before the cursor that the prompt backed off, daemon/engine/prompt.py) reaches it as a logits
processor that masks the tokens that would not produce them, as ngramd's loop does.
"""

from __future__ import annotations

import threading
from typing import Any, Hashable, Sequence

import numpy as np

from ngramd.daemon.bench.llamacpp_peer import counted_evals
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig, GenerationOutput
from ngramd.daemon.engine.prompt import ForcedPrefix
from ngramd.daemon.engine.stops import StopChecker
from ngramd.daemon.protocol.requests import GenerationStats, SamplingParams


class LlamaPeerCompleter(Completer):
    """A Completer whose decoding is ``llm.generate`` (a ``llama_cpp.Llama`` on the runtime's
    GGUF): no drafts, no answer cache; the peer's prompt cache is its only reuse."""

    def __init__(self, runtime: Any, llm: Any) -> None:
        super().__init__(runtime, None, EngineConfig(answer_cache=False, add_history=False, calibrate=False,
                                                     max_caches=1))
        self.llm = llm

    def decode(self, key: Hashable, prompt_ids: Sequence[int], proposer: Any, policy: Any,
               stopper: StopChecker, sampling: SamplingParams, forced: ForcedPrefix | None = None,
               cancel: threading.Event | None = None, propose_k: int | None = None, t0: float | None = None,
               sync: tuple[str, str] | None = None, emitted_before: bytes = b"") -> tuple[GenerationOutput, GenerationStats]:
        if not sampling.greedy or emitted_before:
            raise NotImplementedError("the llama.cpp peer decodes greedy requests from their start only")
        stats = GenerationStats()
        emitted = bytearray()
        out: list[int] = []

        def force(_input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:  # scores: [vocab]
            rem = forced.remaining(bytes(emitted)) if forced is not None else b""
            return forced.mask_logits(scores, rem) if rem else scores

        with counted_evals(self.llm) as passes:
            gen = self.llm.generate([int(t) for t in prompt_ids], temp=0.0, reset=True, logits_processor=[force])
            try:
                for token in gen:
                    token = int(token)
                    emitted.extend(self.runtime.token_bytes(token))
                    if stopper.push(token):
                        if stopper.reason != "eos":
                            out.append(token)
                        break
                    out.append(token)
                    if cancel is not None and cancel.is_set():
                        break
            finally:
                gen.close()
        stats.forward_passes, stats.generated = passes[0], len(out)
        if cancel is not None and cancel.is_set() and not stopper.reason:
            return GenerationOutput(out, stopper.text, "cancelled", cancelled=True), stats
        return GenerationOutput(out, stopper.text, stopper.reason), stats
