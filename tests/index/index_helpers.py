"""Fast fake tokenizers for the index tests."""

from __future__ import annotations

import re
import zlib

# A GPT-2-shaped pretokenizer (whitespace runs end one early before a word, a
# leading space joins the word); each piece becomes one id. Tokens therefore
# depend on where pieces start and end, as with the real byte-level BPE.
_PIECES = re.compile(r"\s+(?!\S)|\s+| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|_+")


def word_tokenize(texts: list[str]) -> list[list[int]]:
    return [[zlib.crc32(p.encode()) % 50_000 for p in _PIECES.findall(t)] for t in texts]


def char_tokenize(texts: list[str]) -> list[list[int]]:
    """One token per character: its code point. Makes worked examples readable."""
    return [[ord(c) for c in t] for t in texts]


def ids(s: str) -> list[int]:
    return [ord(c) for c in s]


def text(tokens) -> str:
    return "".join(chr(int(t)) for t in tokens)
