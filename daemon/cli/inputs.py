"""What the in-process commands (``ngramd complete``, ``ngramd edit``) read from the user.

One place for: reading a source file with clear errors (missing, binary, not
UTF-8, empty), turning a 0-based line and character column into a character
offset, and building the n-gram index those commands draft from.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from ngramd.daemon.protocol.rpc import DEFAULT_MAX_DOCUMENT_CHARS
from ngramd.daemon.protocol.lines import LINE_BREAK
from ngramd.daemon.protocol.requests import SamplingParams, check_sampling


class InputError(ValueError):
    """Bad command-line input; the message says what and where."""


def read_source(path: Path, allow_empty: bool = False) -> str:
    """The UTF-8 text of ``path``; InputError when it cannot serve as a source file.

    A leading byte order mark is dropped: editors hide it and leave it out of the text
    they send over LSP, so line 0's columns, the offsets and the prompt match theirs.
    A file longer than the daemon takes a document (``DEFAULT_MAX_DOCUMENT_CHARS``) is
    refused, as is anything but a regular file (``/dev/zero`` would be read for ever)."""
    limit = DEFAULT_MAX_DOCUMENT_CHARS
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InputError(f"{path} is not a regular file")
            data = f.read(4 * limit + 1)  # a character is 4 bytes at most
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > 4 * limit:  # more characters than the limit, whatever they are
        raise _too_long(path, limit)
    if b"\0" in data[:8192]:
        raise InputError(f"{path} looks binary")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text: {exc}") from exc
    if not text and not allow_empty:  # a BOM alone is empty too
        raise InputError(f"{path} is empty: there is no text to complete from")
    if len(text) > limit:
        raise _too_long(path, limit)
    return text


def _too_long(path: Path, limit: int) -> InputError:
    return InputError(f"{path} is too long: more than {limit} characters, the most the daemon takes for a document")


def offset_of(text: str, line: int, col: int) -> int:
    """Character offset of 0-based (line, col); col counts characters and may equal the line's length."""
    breaks = list(LINE_BREAK.finditer(text))
    if not 0 <= line <= len(breaks):
        raise InputError(f"line {line} is outside the file (lines 0..{len(breaks)})")
    start = breaks[line - 1].end() if line else 0
    end = breaks[line].start() if line < len(breaks) else len(text)
    if not 0 <= col <= end - start:
        raise InputError(f"column {col} is outside line {line} (columns 0..{end - start})")
    return start + col


def check_generation_args(max_tokens: int | None, temperature: float, top_p: float,
                          seed: int | None = None) -> None:
    """The checks the engine would make, before the model is loaded (seconds) rather than after."""
    if max_tokens is not None and max_tokens < 1:
        raise InputError("--max-tokens must be at least 1")
    try:
        check_sampling(SamplingParams(temperature=temperature, top_p=top_p, seed=seed),
                       names=("--temperature", "--top-p", "--seed"))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def make_index(runtime: Any, workspaces: list[str]) -> Any:
    """An n-gram index over ``workspaces`` (the Completer adds the document itself)."""
    from ngramd.index.store import NgramIndex

    index = NgramIndex(runtime.tokenize_batch)
    for root in workspaces:
        counts = index.index_workspace(root)
        print(f"ngramd: indexed {root}: {counts}", file=sys.stderr)
    return index
