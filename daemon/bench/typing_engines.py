"""The configurations the typing replay (daemon/bench/typing_replay.py) runs side by side, each
an ``Engine`` over a Completer: ngramd as it ships, and the baselines an editor could have."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ngramd.daemon.bench.typing_replay import Answer
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.protocol.requests import CompletionRequest, CompletionResult


@dataclass
class CompleterEngine:
    """``speculate``: n-gram drafts verified in one pass; ``prefetch``: the next suggestion
    decoded in idle time. The Completer's own config says whether the answer cache and KV
    prefix reuse are on (a baseline turns the answer cache off, keeps the reuse on: what a
    llama.cpp server's prompt cache gives an editor)."""

    name: str
    completer: Completer
    speculate: bool = True
    prefetch: bool = True
    max_tokens: int = 64
    _last: dict[tuple[str, int], tuple[CompletionRequest, CompletionResult]] = field(default_factory=dict)

    def complete(self, uri: str, text: str, offset: int, cancel: threading.Event) -> Answer:
        req = CompletionRequest(uri=uri, text=text, offset=offset, max_tokens=self.max_tokens,
                                speculate=self.speculate)
        result = self.completer.complete(req, cancel)
        self._last = {(text, offset): (req, result)}
        return Answer(result.text, result.stats.forward_passes, result.answered_from, result.cancelled)

    def idle(self, uri: str, text: str, offset: int, answer: Answer, cancel: threading.Event) -> int:
        shown = self._last.get((text, offset))
        if not self.prefetch or shown is None:
            return 0
        result = self.completer.prefetch_after(*shown, cancel)
        return result.stats.forward_passes if result is not None else 0
