"""LSP positions <-> character offsets: the one place that knows about UTF-16 columns.

Vocabulary:

- *offset*: an index into the Python ``str`` of the document, i.e. a count of code
  points. This is what the daemon speaks (docs/rpc.md).
- *position*: ``(line, character)`` as LSP sends it. ``line`` is 0-based;
  ``character`` counts *code units* of the negotiated position encoding:
  ``utf-16`` (LSP's default: one unit for a character of the Basic Multilingual
  Plane, two for anything above it, e.g. an emoji), ``utf-8`` (1 to 4 bytes) or
  ``utf-32`` (one unit per code point, i.e. the same as offsets).
- *line break*: ``\\n``, ``\\r\\n`` or ``\\r`` -- the LSP spec's list. Not
  ``str.splitlines``', whose extra separators (``\\x0b``, ``\\x0c``, ``\\u2028``, ...)
  are ordinary characters inside a line for an editor.

Worked example, text ``"a😀b\\nc"`` (the emoji is U+1F600)::

    encoding   position of "b"   offset
    utf-16     (0, 3)            2        a=1 unit, 😀=2 units
    utf-8      (0, 5)            2        a=1 byte, 😀=4 bytes
    utf-32     (0, 2)            2

Clamping follows the spec's rule that a position past the end of its line means the
end of that line (the line break is never split); a line past the last line means
the end of the text. A column that falls inside one character (the low half of a
surrogate pair, the middle of a UTF-8 sequence) rounds down to that character's start.
Combining marks are characters of their own: ``"e\\u0301"`` is two offsets and two
UTF-16 units.
"""

from __future__ import annotations

from ngramd.daemon.protocol.lines import LINE_BREAK

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)



def _check(encoding: str) -> str:
    enc = str(getattr(encoding, "value", encoding) or UTF16).lower()
    if enc not in ENCODINGS:
        raise ValueError(f"unknown position encoding {encoding!r}; expected one of {ENCODINGS}")
    return enc


def char_units(ch: str, encoding: str = UTF16) -> int:
    """Code units one character takes in ``encoding``."""
    cp = ord(ch)
    if encoding == UTF16:
        return 2 if cp > 0xFFFF else 1
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def units(s: str, encoding: str = UTF16) -> int:
    """Length of ``s`` in code units of ``encoding``."""
    encoding = _check(encoding)
    if encoding == UTF32:
        return len(s)
    if encoding == UTF16:
        return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)
    return len(s.encode("utf-8", "surrogatepass"))


def line_span(text: str, line: int) -> tuple[int, int]:
    """``(start, end)`` offsets of ``line``'s content, its line break excluded.

    A line past the last one is the empty span at ``len(text)``.
    """
    if line < 0:
        raise ValueError(f"negative line {line}")
    if "\r" not in text:  # the common case: C-level str methods instead of the regex
        rest = text.split("\n", line)
        if len(rest) <= line:
            return len(text), len(text)
        start = len(text) - len(rest[-1])
        end = text.find("\n", start)
        return start, (end if end >= 0 else len(text))
    breaks = LINE_BREAK.finditer(text)
    start = 0
    for _ in range(line):
        match = next(breaks, None)
        if match is None:
            return len(text), len(text)
        start = match.end()
    match = next(breaks, None)
    return start, (match.start() if match else len(text))


def line_start(text: str, offset: int) -> int:
    """The offset where ``offset``'s line starts (just after the last line break before it).

    Agrees with ``offset_at(text, position_at(text, offset)[0], 0)`` except between the
    ``\\r`` and ``\\n`` of a CRLF, which here starts a new (empty) line.
    """
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def line_rest(text: str, offset: int) -> str:
    """The text after ``offset`` on its line, up to its line break (excluded)."""
    end = LINE_BREAK.search(text, offset)  # stops at the first break: no scan of the whole text
    return text[offset:end.start() if end else len(text)]


def column_to_index(line_text: str, column: int, encoding: str = UTF16) -> int:
    """Code points of ``line_text`` before ``column`` code units (clamped, rounded down)."""
    encoding = _check(encoding)
    if column < 0:
        raise ValueError(f"negative column {column}")
    if encoding == UTF32:
        return min(column, len(line_text))
    acc = 0
    for index, ch in enumerate(line_text):
        acc += char_units(ch, encoding)
        if acc > column:
            return index
    return len(line_text)


def offset_at(text: str, line: int, character: int, encoding: str = UTF16) -> int:
    """The offset of LSP position ``(line, character)`` in ``text`` (see module doc)."""
    start, end = line_span(text, line)
    return start + column_to_index(text[start:end], character, encoding)


def position_at(text: str, offset: int, encoding: str = UTF16) -> tuple[int, int]:
    """The LSP position ``(line, character)`` of ``offset`` (clamped to ``[0, len(text)]``).

    An offset between the ``\\r`` and ``\\n`` of a CRLF counts as the end of that line.
    """
    encoding = _check(encoding)
    offset = max(0, min(offset, len(text)))
    if "\r" not in text:
        start = text.rfind("\n", 0, offset) + 1
        return text.count("\n", 0, offset), units(text[start:offset], encoding)
    line, start, end = 0, 0, offset
    for match in LINE_BREAK.finditer(text):
        if match.end() > offset:  # this break ends the offset's line
            end = min(offset, match.start())
            break
        line, start = line + 1, match.end()
    return line, units(text[start:end], encoding)


def range_offsets(text: str, start: tuple[int, int], end: tuple[int, int],
                  encoding: str = UTF16) -> tuple[int, int]:
    """Offsets ``(s, e)`` of an LSP range, ordered so that ``s <= e``."""
    if start[0] == end[0]:  # a keystroke's range: its line is found once
        begin, stop = line_span(text, start[0])
        line = text[begin:stop]
        s = begin + column_to_index(line, start[1], encoding)
        e = begin + column_to_index(line, end[1], encoding)
    else:
        s = offset_at(text, start[0], start[1], encoding)
        e = offset_at(text, end[0], end[1], encoding)
    return (s, e) if s <= e else (e, s)
