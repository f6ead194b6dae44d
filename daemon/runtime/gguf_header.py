"""A GGUF file's metadata, read from its header without parsing the rest: one value, or where
the metadata ends (what a tokenizer is built from).

``gguf.GGUFReader`` parses every field and tensor description up front: for SmolLM2's 49,152
tokens and their merges that took 3-4 s of a daemon's start, to read one string. The header is
a list of (key, typed value) pairs (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md);
this walks it, skipping values by their sizes, and stops at the key asked for.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# fixed sizes of the scalar value types, by type id
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class GGUFHeaderError(ValueError):
    """The file is not a GGUF file of a version this reader knows (2 or 3), or is cut short."""


def read_gguf_string(path: str | Path, key: str) -> str | None:
    """The string value of ``key`` in the GGUF file's metadata; None when the key is absent."""
    with open(path, "rb") as f:
        if len(f.read(24)) < 24:
            raise GGUFHeaderError(f"{path} is not a GGUF file (too short)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _read(m, path, key)


def metadata_end(path: str | Path) -> int:
    """The offset where the file's key-value metadata ends (the tensor descriptions follow)."""
    return len(read_metadata(path))


def read_metadata(path: str | Path) -> bytes:
    """The file's header and key-value metadata, up to the tensor descriptions (one read)."""
    with open(path, "rb") as f:
        if len(f.read(24)) < 24:
            raise GGUFHeaderError(f"{path} is not a GGUF file (too short)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            pos = 24
            try:
                for _ in range(_kv_count(m, path)):
                    pos = _string(m, pos)[1]
                    vtype, = struct.unpack_from("<I", m, pos)
                    pos = _skip(m, pos + 4, vtype)
            except struct.error:
                raise GGUFHeaderError(f"{path}: the metadata is cut short") from None
            if pos > len(m):
                raise GGUFHeaderError(f"{path}: the metadata is cut short")
            return m[:pos]


def _kv_count(m: mmap.mmap, path: str | Path) -> int:
    """The number of metadata entries, the header checked."""
    if m[:4] != _MAGIC:
        raise GGUFHeaderError(f"{path} is not a GGUF file")
    version, = struct.unpack_from("<I", m, 4)
    if version not in (2, 3):
        raise GGUFHeaderError(f"{path}: GGUF version {version} is not supported")
    return struct.unpack_from("<Q", m, 16)[0]


def _read(m: mmap.mmap, path: str | Path, key: str) -> str | None:
    kv_count = _kv_count(m, path)
    pos = 24
    wanted = key.encode("utf-8")
    try:
        for _ in range(kv_count):
            name, pos = _string(m, pos)
            vtype, = struct.unpack_from("<I", m, pos)
            pos += 4
            if name == wanted:
                if vtype != _STRING:
                    raise GGUFHeaderError(f"{path}: {key} is not a string (type {vtype})")
                return _string(m, pos)[0].decode("utf-8", "replace")
            pos = _skip(m, pos, vtype)
    except struct.error:
        raise GGUFHeaderError(f"{path}: the metadata is cut short") from None
    return None


def _string(m: mmap.mmap, pos: int) -> tuple[bytes, int]:
    n, = struct.unpack_from("<Q", m, pos)
    if pos + 8 + n > len(m):
        raise struct.error("string past the end")
    return m[pos + 8: pos + 8 + n], pos + 8 + n


def _skip(m: mmap.mmap, pos: int, vtype: int) -> int:
    """The position after a value of type ``vtype`` at ``pos``."""
    if vtype in _SCALAR_SIZE:
        return pos + _SCALAR_SIZE[vtype]
    if vtype == _STRING:
        n, = struct.unpack_from("<Q", m, pos)
        return pos + 8 + n
    if vtype == _ARRAY:
        item, count = struct.unpack_from("<IQ", m, pos)
        pos += 12
        if item in _SCALAR_SIZE:
            return pos + _SCALAR_SIZE[item] * count
        for _ in range(count):  # strings (a vocabulary) or nested arrays: each one's size is its own
            pos = _skip(m, pos, item)
        return pos
    raise struct.error(f"unknown value type {vtype}")
