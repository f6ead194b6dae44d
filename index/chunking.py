"""Chunk boundaries where a GPT-2 style byte-level pretokenizer also splits.

A buffer is tokenized chunk by chunk so that an edit re-tokenizes only the
chunks it touches. That is only sound where a chunk boundary is also a
pre-token boundary of the whole text, so that tokenizing chunks separately and
concatenating gives the whole-text tokenization.

The GPT-2 regex ends a whitespace run one character early when a non-space
follows (``\\s+(?!\\S)``), and that last character stands alone or joins the
word (`` ?\\p{L}+``): ``"\\n    return"`` pre-tokenizes as ``"\\n   "`` +
``" return"``, and ``"\\n\\nx"`` as ``"\\n"`` + ``"\\n"`` + ``"x"``. So the
*boundary* of a line (other than the first) whose first non-space character is
at ``j`` is ``j - 1``: just before the last character of the whitespace run that
precedes it, which is the last indentation space or tab, or the newline itself
when the line starts at column 0. Indentation must be spaces and tabs only
(anything else: no boundary, which is always safe). Whitespace-only lines get
no boundary. Position 0 and ``len(text)`` are boundaries too.

Every test is local: whether ``pos`` is a boundary depends only on the
characters from the newline that starts ``pos + 1``'s line to ``pos + 1``.
That is what makes incremental re-chunking exact (``document.Document.edit``).

Worked example: ``"a\\n  b\\n\\nc"`` has boundaries 0, 3 (before the second
space of ``"  b"``), 6 (the newline before ``"c"``), 8 (the end). Chunks:
``"a\\n "``, ``" b\\n"``, ``"\\nc"``.
"""

from __future__ import annotations

import re

# A line that has content: its start, its indentation of spaces/tabs, and its
# first non-space character.
_LINE_CONTENT = re.compile(r"(?<=\n)([ \t]*)(?=[^\s])")


def boundaries(text: str, lo: int = 0, hi: int | None = None) -> list[int]:
    """All chunk boundaries ``b`` with ``lo < b < hi`` (exclusive), sorted.

    ``lo`` and ``hi`` are not reported: callers already know them as edges.
    """
    if hi is None:
        hi = len(text)
    out = []
    # endpos hi + 1: the lookahead must see the character after the boundary.
    start = text.rfind("\n", 0, lo + 1) + 1  # a boundary after lo may sit on lo's line
    for m in _LINE_CONTENT.finditer(text, start, min(hi + 1, len(text))):
        b = m.end() - 1
        if lo < b < hi:
            out.append(b)
    return out


def is_boundary(text: str, pos: int) -> bool:
    """Whether ``pos`` is a chunk boundary of ``text`` (see module docstring)."""
    n = len(text)
    if pos <= 0 or pos >= n:
        return pos == 0 or pos == n
    if pos + 1 >= n or text[pos + 1].isspace():
        return False  # the character after a boundary starts a line's content
    s = text.rfind("\n", 0, pos + 1) + 1  # start of the line holding pos + 1
    if s == 0:
        return False  # first line: no boundary inside it
    return not text[s : pos + 1].strip(" \t")  # only indentation (or nothing) before


def chunk(text: str) -> list[str]:
    """Split ``text`` at every boundary. ``"".join(chunk(t)) == t``."""
    cuts = [0, *boundaries(text), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
