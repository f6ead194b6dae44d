"""Stopping an answer caught in a loop.

A small model that loses its way often repeats a cycle of tokens until its length
limit: ``self.error_body[:],`` forty times, ``# Server.py`` on every other line. Of
the 47 generated edit cases, 18 answers ran to ``max_tokens`` (300) that way; such
an answer is never applied (it did not finish), so every token after the loop began
is time the user waits for an error. The guard stops it once the loop is certain.

A *periodic run*: the output's last tokens repeat with some period ``p`` (token ``t``
equals token ``t - p``), ``p`` at most ``max_period`` tokens. A *loop*: a periodic run
of at least ``min_repeats`` cycles that goes ``min_span`` tokens or more beyond what the
prompt holds of it. Code repeats too, so the prompt (the file around the range and the
selection) is the measure: a table of ``0x00, 0x00, ...`` copied from the selection, or
given one more row, is no loop; text is compared with the spaces and tabs that begin and
end every line left out (the selection is shown dedented, the file around it is not; an
answer drops trailing whitespace the selection has). A legitimate
answer with ``min_span`` tokens of repetition the prompt does not hold (a list of a
hundred zeros) is cut: ``stop_loops=False`` (the ``edit`` method's ``stopLoops``,
``ngramd edit --no-loop-stop``) turns the guard off.

Measured on the recorded answers of three bench runs (docs/benchmarks.md at 53c478e, "The instruction
prepared as it is typed; answers caught in a loop stop"): of the 43 answers that ran to
``max_tokens`` (300), nearly all loops, it stops 33, after 98-271 tokens (median 143), and
none of the 66 that finished.

The rule reads the generated tokens only, so speculative and plain decoding stop at
the same token: the output stays identical to plain decoding under the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MIN_SPAN = 96  # tokens a loop must go beyond the prompt's copy of it (a short repetition is code)
MIN_REPEATS = 3  # cycles a loop must come at least
MAX_PERIOD = 64  # longest cycle looked for, in tokens

_LINE_EDGES = re.compile(rb"[ \t]*\n[ \t]*")


def without_line_edges(text: bytes) -> bytes:
    """``text`` with the spaces and tabs that begin and end its lines left out (its first line's
    start too, not its last line's end, which may go on): so any suffix of a text, rewritten so,
    is a suffix of the whole rewritten so."""
    return _LINE_EDGES.sub(b"\n", text).lstrip(b" \t")


class RepetitionGuard:
    """Feed each generated token to ``push``; it returns True once the output is caught in a loop.

    ``run[p]``: how many of the latest tokens each equal the token ``p`` before them
    (the periodic run of period ``p`` covers ``run[p] + p`` tokens). Updated in O(``max_period``)
    per token; the prompt is searched once per token, only while a run is long enough to be a loop.
    """

    def __init__(self, allowed: bytes, token_bytes: Callable[[int], bytes], min_span: int = MIN_SPAN,
                 min_repeats: int = MIN_REPEATS, max_period: int = MAX_PERIOD) -> None:
        assert min_span >= 2 and min_repeats >= 2 and max_period >= 1
        self.allowed = without_line_edges(allowed)
        self.token_bytes = token_bytes
        self.min_span, self.min_repeats, self.max_period = min_span, min_repeats, max_period
        self.tokens: list[int] = []
        self.starts: list[int] = []  # byte offset of each token in ``text``
        self.text = bytearray()
        self.run = [0] * (max_period + 1)  # index 0 unused
        self.period = 0  # the loop's shortest cycle once found

    def push(self, token: int) -> bool:
        if self.period:
            return True
        tokens = self.tokens
        n = len(tokens)  # the new token's index
        periods = range(1, min(self.max_period, n) + 1)
        for p in periods:
            self.run[p] = self.run[p] + 1 if tokens[n - p] == token else 0
        tokens.append(token)
        self.starts.append(len(self.text))
        self.text += self.token_bytes(token)
        # the longest qualifying run (ties: its shortest cycle); a shorter run is a suffix of it
        span, neg_period = max(((self.run[p] + p, -p) for p in periods
                                if self.run[p] + p >= max(self.min_span, self.min_repeats * p)), default=(0, 0))
        # the run goes min_span beyond the prompt's copy of it when the prompt lacks its last
        # span - min_span + 1 tokens (a suffix of a text the prompt holds is held too)
        if span and not self._held(span - self.min_span + 1):
            self.period = -neg_period
            return True
        return False

    def _held(self, n: int) -> bool:
        """Whether the prompt holds the text of the last ``n`` tokens."""
        return without_line_edges(bytes(self.text[self.starts[len(self.tokens) - n]:])) in self.allowed
