"""Stop rules editors expect, applied token by token to the generated stream.

The generated tokens are turned into text incrementally from their raw bytes,
so a multi-byte character split across tokens is only emitted once complete
(bytes that are not UTF-8 become U+FFFD).
Rules, checked after each token (the stop reason names the one that fires):

- ``eos``: an end-of-sequence or other special token (not emitted);
- ``max_tokens``: that many tokens were generated;
- ``stop_string``: the text contains a stop string (cut before it);
- ``end_of_line`` (single-line mode): the text reaches a newline (cut before it,
  and before the ``\\r`` of a ``\\r\\n``);
- ``block_end`` (multi-line mode; off with ``block_end=False``): a line starts
  with less indentation than the block's first line (the cursor's line, or the
  first non-blank line generated when the cursor's line is blank: the block
  closed), or a blank line is followed by a line indented less than the line
  before the blank (cut before the blank/dedented line);
- ``repetition`` (with ``loop_allowed``, edits): the output is caught in a loop that
  the given text does not hold (daemon/engine/repetition.py); the text is kept whole;
- ``stop_string`` also (with ``closing_fence``, an edit's answer): the line that closes the
  fenced answer (``FenceNesting``: a bare fence line at column 0 that closes no block the
  answer opened) ends it (cut before the line break before it).

When one token completes several text rules (``stop_string``, ``end_of_line``, ``block_end``),
the one whose match completes first in the text wins, as if the text had come a character at a
time: where generation stops never depends on how the text is split into tokens (a stop string
may span tokens, a token may hold several matches). Among matches completed by the same character,
the one that cuts shorter wins, then a stop string (the caller's own) before the line and block
rules. Example: stops ``("abc", "b")`` cut ``abc`` to ``a`` whether it came as one token or
three. The text rules are read before ``repetition`` and ``max_tokens``.

``skip`` bytes at the start of the stream (the characters before the cursor
that the prompt backed off, see prompt.py) are consumed but not part of the text.
"""

from __future__ import annotations

import codecs
import copy
from dataclasses import dataclass
from typing import Callable, Sequence

from ngramd.daemon.engine.repetition import RepetitionGuard


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


@dataclass
class StopConfig:
    max_tokens: int
    stop_strings: tuple[str, ...] = ()
    single_line: bool = False
    line_prefix: str = ""  # text between the cursor's line start and the cursor
    eos_ids: frozenset[int] = frozenset()
    block_end: bool = True  # multi-line: stop where the block closes (False for edits: a rewritten range may dedent)
    # stop an output caught in a loop, unless these bytes hold the same run (an edit's prompt); None: off
    loop_allowed: bytes | None = None
    closing_fence: str | None = None  # an answer fenced so, blocks of its own allowed (edits; FenceNesting)
    short_text: int = 0  # FenceNesting's: bare runs of three that are text before one closes the answer
    reopening: bool = False  # FenceNesting's: a first line opening the fence again is skipped


class StopChecker:
    """Feed tokens with ``push``; ``reason`` becomes non-empty when generation must stop."""

    def __init__(self, config: StopConfig, token_bytes: Callable[[int], bytes], skip: bytes = b"") -> None:
        self.cfg = config
        self._token_bytes = token_bytes
        self._skip = skip
        self._raw = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._fed = 0  # bytes of _raw already given to the decoder
        self.text = ""
        self.num_tokens = 0
        self.reason = ""
        self._loops = None if config.loop_allowed is None else RepetitionGuard(config.loop_allowed, token_bytes)
        self._fences = (FenceNesting(config.closing_fence, config.short_text, config.reopening)
                        if config.closing_fence else None)

    def push(self, token: int) -> bool:
        """Add one generated token; returns True when generation must stop now."""
        if self.reason:
            return True
        self.num_tokens += 1
        if token in self.cfg.eos_ids:
            self.reason = "eos"
            return True
        self._raw += self._token_bytes(token)
        judged = len(self.text)  # no rule fired in the text so far
        self._decode()
        self._check_text(judged)
        if not self.reason and self._loops is not None and self._loops.push(token):
            self.reason = "repetition"
        if not self.reason and self.num_tokens >= self.cfg.max_tokens:
            self.reason = "max_tokens"
        return bool(self.reason)

    def push_many(self, tokens: Sequence[int]) -> int:
        """Push tokens until one stops; returns how many were consumed."""
        for i, t in enumerate(tokens):
            if self.push(int(t)):
                return i + 1
        return len(tokens)

    def tokens_before_stop(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, generated next, would come before the one that stops generation
        (``len(tokens)`` when none does); this checker is left as it was. A draft is cut there:
        its rows after that token are never emitted. The loop guard is not consulted (a loop
        caught in a draft leaves the draft whole: only slower)."""
        if self.reason:
            return 0
        probe = copy.copy(self)
        probe._raw = bytearray(self._raw)
        probe._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        probe._utf8.setstate(self._utf8.getstate())
        probe._loops = None
        probe._fences = copy.copy(self._fences)
        for i, t in enumerate(tokens):
            if probe.push(int(t)):
                return i
        return len(tokens)

    def _decode(self) -> None:
        start = max(self._fed, len(self._skip))
        if len(self._raw) <= start:
            return  # still inside the forced characters before the cursor
        # a character split across tokens waits for its last byte; a byte that cannot be
        # UTF-8 becomes U+FFFD at once (it must not hold back the text after it)
        self.text += self._utf8.decode(bytes(self._raw[start:]))
        self._fed = len(self._raw)

    def _check_text(self, judged: int) -> None:
        """Apply the text rule that fires first in ``self.text``, whose first ``judged``
        characters were read before (no match lies wholly in them)."""
        text = self.text
        # (where its match completes, the cut, tie rank, reason) for each rule that fires
        fired: list[tuple[int, int, int, str]] = []
        if self._fences is not None:
            closing = self._fences.closing_line(text)
            if closing is not None:  # judged once its line break came; cut before the line break before it
                fired.append((text.index("\n", closing) + 1, max(closing - 1, 0), 0, "stop_string"))
        for s in self.cfg.stop_strings:
            at = text.find(s, max(judged - len(s) + 1, 0)) if s else -1  # it may begin in an earlier token
            if at >= 0:
                fired.append((at + len(s), at, 0, "stop_string"))
        if self.cfg.single_line:
            end = text.find("\n", judged)
            if end >= 0:
                cut = end - 1 if end > 0 and text[end - 1] == "\r" else end  # a CRLF file's line ends at its \r
                fired.append((end + 1, cut, 1, "end_of_line"))
        elif self.cfg.block_end:
            block = self._block_end()
            if block is not None:
                fired.append((*block, 2, "block_end"))
        if fired:
            _, cut, _, self.reason = min(fired)
            self.text = text[:cut]

    def _block_end(self) -> tuple[int, int] | None:
        """(where the block end became certain, the cut) in ``self.text``; None while the block goes on."""
        lines = (self.cfg.line_prefix + self.text).split("\n")
        # lines[0] is the cursor's line. The block's indentation is that of the first
        # non-blank line from there on; indentation is known once a non-blank character arrived.
        base = next((_indent(x) for x in lines if x.strip()), None)
        if base is None:
            return None
        prev_indent = base
        blank_before = False
        offset = len(lines[0]) + 1  # char offset of lines[i] in line_prefix + text
        for i in range(1, len(lines)):
            line = lines[i]
            if not line.strip():
                if i < len(lines) - 1:
                    blank_before = True
                offset += len(line) + 1
                continue
            ind = _indent(line)
            if ind < base or (blank_before and ind < prev_indent):
                cut = offset - len(self.cfg.line_prefix)
                kept = self.text[: max(cut, 0)]
                kept = kept.rstrip("\r\n \t") if kept.strip() else kept.rstrip(" \t")
                # certain once the line's first non-blank character came (its indentation then known)
                return cut + len(line) - len(line.lstrip()) + 1, len(kept)
            prev_indent = ind
            blank_before = False
            offset += len(line) + 1
        return None


class FenceNesting:
    """Finds the line that closes a fenced answer (an edit's), which may hold fenced blocks of its own.

    Lines are judged once complete (a line break after them), by their backticks alone:

    - a fence line with an info string (`` ```sh ``) opens a block of the answer's own, except,
      with ``reopening``, as the answer's first line that is not blank (the model repeating the
      opening fence: skipped, ``content_start`` is then where the answer's text begins);
    - a bare fence line closes the innermost block open; with none open, one at column 0
      closes the answer, and an indented one is text (a block opened bare inside code, as in
      a docstring: its closing line is bare and indented too, text as well);
    - with a ``fence`` longer than three backticks (the selection holds a run of three), shorter
      runs are blocks of their own, and a bare one at column 0 with no block open is text for
      the first ``short_text`` times (the selection's own such lines, ``bare_short_lines``,
      copied) and then closes the answer (the model closes with three whatever fence it was
      given).

    Example: FenceNesting("```").closing_line("a\n```sh\nx\n```\nb\n```\n") == 16.
    """

    def __init__(self, fence: str, short_text: int = 0, reopening: bool = False) -> None:
        self.fence = fence
        self.short_text = short_text
        self.reopening = reopening
        self.content_start = 0  # after a skipped first line that opened the fence again
        self.short_lines = 0  # bare short runs at column 0 met with no block open, so far
        self._begun = False  # a line with text was judged
        self._judged = 0  # text before this offset is judged (complete lines)
        self._open = 0  # blocks of the fence's length the answer opened and did not close
        self._short_open = 0  # blocks of shorter runs (a fence longer than three)

    def closing_line(self, text: str) -> int | None:
        """Offset in ``text`` where the closing line starts; None while it has not come."""
        while True:
            end = text.find("\n", self._judged)
            if end < 0:
                return None
            start, self._judged = self._judged, end + 1
            line = text[start:end]
            if not self._begun:  # the answer's first line: after the blank lines it may open with
                if not line.strip(" \t\r"):
                    continue
                self._begun = True
                if self.reopening and line.startswith("```") and line.strip("` \t\r"):
                    self.content_start = end + 1  # the opening fence again, with its language
                    continue
            if self._closes(line):
                return start

    def _closes(self, line: str) -> bool:
        bare = line.strip(" \t\r")
        if not bare.startswith("```"):
            return False
        info = bool(bare.strip("`"))
        at_column_0 = line.startswith("`")
        if bare.startswith(self.fence):
            if info:
                self._open += 1
            elif self._open:
                self._open -= 1
            else:
                return at_column_0
            return False
        if info:
            self._short_open += 1
        elif self._short_open:
            self._short_open -= 1
        elif at_column_0 and not self._open:
            self.short_lines += 1
            return self.short_lines > self.short_text
        return False


def bare_short_lines(shown: str, fence: str) -> int:
    """How many lines of the selection ``shown`` an answer fenced with ``fence`` would copy as
    text that read as a closing run of three backticks (bare, at column 0, no block open):
    the ones after them close the answer (see FenceNesting).

    Example: bare_short_lines("```sh\nls\n```", "````") == 0; bare_short_lines("```\nls\n```", "````") == 2.
    """
    # the selection holds no run as long as the fence (fence_for): every such line is a short one
    nesting = FenceNesting(fence, short_text=shown.count("\n") + 1)
    nesting.closing_line(shown + "\n")
    return nesting.short_lines
