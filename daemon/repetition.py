"""Stopping an answer caught in a loop.

A small model that loses its way often repeats a cycle of tokens until its length
limit: ``self.error_body[:],`` forty times, ``# Server.py`` on every other line. Of
the 47 generated edit cases, 18 answers ran to ``max_tokens`` (300) that way; such
an answer is never applied (it did not finish), so every token after the loop began
is time the user waits for an error. The guard stops it once the loop is certain.

A *loop*: the output's last tokens repeat with some period ``p`` (token ``t`` equals
token ``t - p``) over ``max(min_span, min_repeats * p)`` tokens or more, for a
period of at most ``max_period`` tokens. Code the model copies can repeat too (a
table of ``0x00, 0x00, ...``), so a loop counts only when its text, the whole
periodic run, does not occur in ``allowed`` (the prompt: the file around the range
and the selection). Measured on the recorded answers of those 47 edits
(docs/benchmarks.md): it stops 15 of the 18 looping answers, after 48-250 tokens,
and none of the 29 that finished.

The rule reads the generated tokens only, so speculative and plain decoding stop at
the same token: the output stays identical to plain decoding under the same rules.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_SPAN = 48  # tokens a periodic run must cover (a short cycle repeated a few times is code)
MIN_REPEATS = 3  # times a long cycle must come
MAX_PERIOD = 64  # longest cycle looked for, in tokens


class RepetitionGuard:
    """Feed each generated token to ``push``; it returns True once the output is caught in a loop.

    ``run[p]``: how many of the latest tokens each equal the token ``p`` before them
    (the periodic run of period ``p`` covers ``run[p] + p`` tokens). Updated in O(``max_period``)
    per token; the text of a run is searched in ``allowed`` only once it is long enough.
    """

    def __init__(self, allowed: bytes, token_bytes: Callable[[int], bytes], min_span: int = MIN_SPAN,
                 min_repeats: int = MIN_REPEATS, max_period: int = MAX_PERIOD) -> None:
        assert min_span >= 2 and min_repeats >= 2 and max_period >= 1
        self.allowed = allowed
        self.token_bytes = token_bytes
        self.min_span, self.min_repeats, self.max_period = min_span, min_repeats, max_period
        self.tokens: list[int] = []
        self.starts: list[int] = []  # byte offset of each token in ``text``
        self.text = bytearray()
        self.run = [0] * (max_period + 1)  # index 0 unused
        self.period = 0  # the loop's period once found

    def push(self, token: int) -> bool:
        if self.period:
            return True
        tokens = self.tokens
        n = len(tokens)  # the new token's index
        for p in range(1, min(self.max_period, n) + 1):
            self.run[p] = self.run[p] + 1 if tokens[n - p] == token else 0
        tokens.append(token)
        self.starts.append(len(self.text))
        self.text += self.token_bytes(token)
        # the longest qualifying run (a shorter one's text ends it, so is allowed when it is)
        span, period = max(((self.run[p] + p, -p) for p in range(1, min(self.max_period, n) + 1)
                            if self.run[p] + p >= max(self.min_span, self.min_repeats * p)), default=(0, 0))
        if span and not self._allowed(span):
            self.period = -period  # the shortest cycle of the longest run
            return True
        return False

    def _allowed(self, span: int) -> bool:
        """Whether the text of the last ``span`` tokens occurs in ``allowed`` (copied, not looping)."""
        return bytes(self.text[self.starts[len(self.tokens) - span]:]) in self.allowed
