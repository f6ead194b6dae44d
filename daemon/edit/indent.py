"""The selection's indentation: taken off for the model, put back on its answer.

An editor often selects a method from its ``def`` on, after the line's
indentation. Shown as it is, the selection's first line is at column 0 and the
others are indented, and the embedded model answers in a frame of its own: a
top-level function, its body four columns in. Neither the draft (the original)
nor the file (the answer applied as written) fits that answer: on the 47
generated edit cases, 42 answers indented the body less than the selection did,
which cost a pass at every line and, applied, broke the code.

So the selection is shown dedented, in the frame the model writes: every
non-blank line loses the indentation ``base`` they all share, the first line
counted with the ``lead`` before the selection on its line. The answer gets
``base`` back on its non-blank lines and, on its first line, loses ``lead``
(``lead`` stays in the file). Blank lines (spaces, tabs or nothing) pass
through untouched both ways, so ``reindent(dedent(original)) == original`` for
every selection: an answer that repeats what the model was shown gives back the
original exactly. A selection of nothing but blank lines (an empty one, where
code is to be written) has the lead's indentation as its base: the answer's
lines land at the cursor's indentation. At column 0 (an editor trims the
whitespace of empty lines, so a click on an empty line in a function body is
there) the base is the indentation of the code that follows: the answer lands
in the block it is written into, not at the top level.

A selection that starts after code on its line (``x = <a + b>``) has no
indentation of its own to reason about and is shown as it is.

The selection's *layout*, its trailing whitespace from the first line break on
(the blank lines after a function, the next line's indentation where a
selection ends there), is not shown either: the model answers with the code,
and the layout is put back after it (``split_layout``). A selection of spaces
alone on a line with code after it (a cursor in that line's indentation) is
given a line break and that indentation as its layout, so that the code written
there goes in as lines of its own before the line's code (``layout_of``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_SPACE = " \t"


def _is_blank(line: str) -> bool:
    return not line.strip(_SPACE + "\r")


@dataclass(frozen=True)
class IndentFrame:
    """How a selection is shown to the model and how the answer is put back."""

    lead: str = ""  # the whitespace before the selection on its first line (kept in the file)
    base: str = ""  # taken off every non-blank line (the first with ``lead``), given back to the answer's

    def dedent(self, original: str) -> str:
        """The selection as the model sees it.

        Example: IndentFrame("    ", "    ").dedent("def f():\\n        pass\\n") == "def f():\\n    pass\\n"
        """
        if not self.base:
            return original
        first, *rest = original.split("\n")
        shown_first = first if _is_blank(first) else (self.lead + first)[len(self.base):]
        return "\n".join([shown_first] + [line if _is_blank(line) else line[len(self.base):] for line in rest])

    def reindent(self, answer: str) -> str:
        """The replacement for the selection from the model's (cleaned) answer.

        Example: IndentFrame("    ", "    ").reindent("def f():\\n    pass\\n") == "def f():\\n        pass\\n"
        """
        if not self.base:
            return answer
        first, *rest = answer.split("\n")
        # the file keeps lead before the answer, so its first line goes in after it; a blank first
        # line stays as written (a selection whose first line is blank comes back exactly; an
        # answer that opens with one leaves the lead as trailing whitespace there)
        if not _is_blank(first):
            placed = self.base + first
            first = placed[len(os.path.commonprefix([placed[:len(self.lead)], self.lead])):]
        return "\n".join([first] + [line if _is_blank(line) else self.base + line for line in rest])


def line_before(text: str, start: int) -> str:
    """What stands before ``start`` on its line (the lead, when it is whitespace)."""
    return text[text.rfind("\n", 0, start) + 1:start]


def indentation_after(text: str, at: int) -> str:
    """The indentation of the first non-blank line from the line holding ``at`` on ("" if none).

    Example: indentation_after("def f():\n\n    return 1\n", 9) == "    "
    """
    for line in text[text.rfind("\n", 0, at) + 1:].split("\n"):
        if not _is_blank(line):
            return line[:len(line) - len(line.lstrip(_SPACE))]
    return ""


def _line_at(text: str, at: int) -> tuple[int, int]:
    """(start, end) of the line holding offset ``at``, its line break excluded."""
    end = text.find("\n", at)
    return text.rfind("\n", 0, at) + 1, len(text) if end < 0 else end


def frame_of(text: str, start: int, end: int) -> IndentFrame:
    """The frame of the selection ``text[start:end]`` (no change when it starts after code)."""
    lead = line_before(text, start)
    if lead.strip(_SPACE):
        return IndentFrame()
    filled = [line for line in (lead + text[start:end]).split("\n") if not _is_blank(line)]
    if not filled:  # nothing but blank lines (an empty selection): the answer goes in at the lead's indentation,
        # or, before code on the selection's last line, at that code's
        line_start, line_end = _line_at(text, end)
        before_code = not _is_blank(text[line_start:line_end])
        return IndentFrame(lead, indentation_after(text, end) if before_code or not lead else lead)
    shared = os.path.commonprefix(filled)
    return IndentFrame(lead, shared[:len(shared) - len(shared.lstrip(_SPACE))])


_BREAKS = "\r\n"


def split_layout(original: str) -> tuple[str, str]:
    """(code, layout): ``original``'s trailing whitespace from its first line break on is layout.

    Example: split_layout("x = 1  \n\n    ") == ("x = 1  ", "\n\n    ")
    """
    code = original.rstrip(_SPACE + _BREAKS)
    trailing = original[len(code):]
    cut = min((i for i in (trailing.find("\n"), trailing.find("\r")) if i >= 0), default=len(trailing))
    return original[:len(code) + cut], original[len(code) + cut:]


def layout_of(text: str, start: int, end: int) -> str:
    """The layout put back after the answer that replaces ``text[start:end]``: the selection's
    own (``split_layout``), or, for spaces alone before code on their line, a line break and the
    indentation the code had, or, at the end of a file that ends with a line break, that line break.

    Example: layout_of("if a:\n    return\n", 10, 10) == "\n    "  (the cursor before "return")
    """
    code, layout = split_layout(text[start:end])
    if layout or code.strip(_SPACE):
        return layout
    if start == end == len(text) and text.endswith(("\n", "\r")):
        # the cursor on the empty last line of a file that ends with a line break: it still will
        return "\r\n" if text.endswith("\r\n") else text[-1]
    line_start, line_end = _line_at(text, end)
    if text[line_start:end].strip(_SPACE) or _is_blank(text[end:line_end]):
        return ""
    return ("\r\n" if text.endswith("\r", 0, line_end) else "\n") + text[line_start:end]
