"""How long a completion waits for the daemon's answer: the ``timeoutMs`` setting, stretched to
what the daemon's own answers say a completion costs on this machine now.

A fixed deadline turns a busy machine into no suggestions at all: when every completion takes
longer than ``timeoutMs``, each is cancelled before it answers, and nothing is ever shown. So:

- ``timeoutMs`` is the floor, never shortened;
- each answer's figures (``stats``: ``ms``, ``first_token_ms``, ``forward_passes``, and the
  time the answer took here, queueing included) give what a completion of ``maxTokens`` tokens
  costs in the worst case, when no drafted token is accepted: the wait before the model ran, the
  first token, then one decoding pass per token. The deadline is ``MARGIN`` times the largest
  such cost among the last ``HISTORY`` answers;
- a completion that got no answer in time doubles the next deadline (a machine slower than any
  answer seen yet, or slower than the first answer's figures), up to ``CEILING_S``; an answer
  in time takes the doubling back;
- waiting for a daemon that is still starting (loading, timing its passes) is not counted:
  the LSP waits for the start apart, bounded by its own start timeout.

The deadline never goes above ``CEILING_S`` (or ``timeoutMs`` where that is higher): a daemon that
hangs is still given up on. Pure: no clock of its own, no I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Any

MARGIN = 1.5
HISTORY = 8
CEILING_S = 120.0
MAX_DOUBLINGS = 4


def _number(stats: dict[str, Any], key: str) -> float | None:
    v = stats.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


class CompletionDeadline:
    def __init__(self) -> None:
        # per answer: (seconds before the model's first token, counting the wait here, seconds per decoding pass)
        self._costs: deque[tuple[float, float]] = deque(maxlen=HISTORY)
        self.misses = 0  # completions in a row that got no answer in time

    def seconds(self, timeout_ms: int, max_tokens: int) -> float:
        """The deadline of the next completion of up to ``max_tokens`` tokens."""
        floor = timeout_ms / 1000
        need = max((first + max_tokens * per_pass for first, per_pass in self._costs), default=0.0)
        wait = max(floor, MARGIN * need) * 2 ** min(self.misses, MAX_DOUBLINGS)
        return max(floor, min(wait, CEILING_S))

    def answered(self, waited_s: float, stats: Any) -> None:
        """A completion answered after ``waited_s`` seconds here, with the daemon's ``stats``."""
        self.misses = 0
        if not isinstance(stats, dict):
            return
        ms, first_ms, passes = _number(stats, "ms"), _number(stats, "first_token_ms"), _number(stats, "forward_passes")
        if ms is None or first_ms is None or passes is None or passes < 1:
            return
        # the model's time on this answer is ``ms``; what the answer took beyond it here was
        # queueing and transport, paid again by the next request
        before_model = max(0.0, waited_s - ms / 1000)
        per_pass = (ms - first_ms) / 1000 / (passes - 1) if passes > 1 else first_ms / 1000
        self._costs.append((before_model + first_ms / 1000, max(0.0, per_pass)))

    def timed_out(self) -> None:
        """A completion got no answer within its deadline."""
        self.misses += 1

    def forget(self) -> None:
        """Another daemon (a new connection): its machine and model may differ."""
        self._costs.clear()
        self.misses = 0
