"""How token ids read as text and bytes, the same whichever runtime evaluates them.

Both runtimes hold a transformers tokenizer (the torch runtime's own, or the one read from a
GGUF for llama.cpp) and read it through ``TokenizerMethods``: the index, the prompts and the
stop rules see the same ids and bytes. ``encode_plain`` keeps special-token strings in user
text as text; ``encode_template`` turns them into special tokens in text the daemon wrote.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import Any


class TokenizerMethods:
    """What both runtimes ask of their transformers tokenizer (``self.tokenizer``, with
    ``self.vocab_size`` and ``self._special_ids``): the index, the prompts and the stop rules
    read token ids and bytes the same way whichever runtime evaluates them."""

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        """Token ids of user text (no BOS); a special token's string in it is plain text (see ``encode_plain``)."""
        return encode_plain(self.tokenizer, [text])[0]

    def tokenize_batch(self, texts: list[str]) -> list[list[int]]:
        """Batch ``encode`` (the index's tokenizer callback): the index's tokens line up with the prompt's."""
        if not texts:
            return []
        return encode_plain(self.tokenizer, list(texts))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (byte-level BPE), for incremental UTF-8 decoding."""
        return self._byte_table()[token_id]

    def _byte_table(self) -> list[bytes]:
        table = getattr(self, "_bytes_cache", None)
        if table is None:
            table = _build_byte_table(self.tokenizer, len(self.tokenizer))
            # pad to the model's vocab (embedding rows beyond the tokenizer decode to nothing)
            table += [b""] * max(0, self.vocab_size - len(table))
            self._bytes_cache = table
        return table

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def start_tokenizer_pool(self) -> None:
        """Called at load. The tokenizer's thread pool (Rust, rayon) starts at its first batch, at
        the priority of the thread that asks: a background indexing thread, which runs at the lowest
        priority (daemon/workspace/priority.py), would start it so for every later caller."""
        self.tokenize_batch(["", " "])


def encode_plain(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, every character as text: ``"<|im_end|>"`` in code is 7 ordinary
    tokens, never the end-of-sequence token (which would cut a draft or hide the literal from
    the model). Real special tokens come only from ``encode_template``.

    ``split_special_tokens`` is a flag on the shared Rust tokenizer that each call sets; every
    encoding in the daemon passes True, so calls on different threads never race on it.
    """
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]]


def encode_template(tokenizer: Any, text: str) -> list[int]:
    """Token ids of text the daemon wrote itself (a rendered chat template): special-token strings
    in it are the special tokens, the text between them is encoded as ``encode_plain`` does
    (as the tokenizer does: added tokens split the text before pre-tokenization)."""
    specials, pattern = _special_tokens(tokenizer)
    if pattern is None:
        return encode_plain(tokenizer, [text])[0]
    pieces: list[str] = []  # plain text between the specials
    found: list[int] = []
    pos = 0
    for m in pattern.finditer(text):
        pieces.append(text[pos:m.start()])
        found.append(specials[m.group()])
        pos = m.end()
    pieces.append(text[pos:])
    encoded = encode_plain(tokenizer, pieces)
    ids = list(encoded[0])
    for special, piece in zip(found, encoded[1:]):
        ids.append(special)
        ids.extend(piece)
    return ids


# tokenizer -> (its len() when read, special-token string -> id, the pattern matching them):
# built once per tokenizer, not per call (the added-token table is rebuilt on each access)
_SPECIALS_CACHE: weakref.WeakKeyDictionary[Any, tuple[int, dict[str, int], re.Pattern[str] | None]] = (
    weakref.WeakKeyDictionary())
_SPECIALS_LOCK = threading.Lock()


def _special_tokens(tokenizer: Any) -> tuple[dict[str, int], re.Pattern[str] | None]:
    """The tokenizer's special tokens by string and a pattern matching any of them (longest
    first; None without any). Cached per tokenizer; read again if its size changed (tokens added)."""
    size = len(tokenizer)
    with _SPECIALS_LOCK:
        try:
            cached = _SPECIALS_CACHE.get(tokenizer)
        except TypeError:  # not weak-referenceable: no cache
            cached = None
    if cached is not None and cached[0] == size:
        return cached[1], cached[2]
    specials = {tok.content: int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    pattern = (re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))
               if specials else None)
    with _SPECIALS_LOCK:
        try:
            _SPECIALS_CACHE[tokenizer] = (size, specials, pattern)
        except TypeError:
            pass
    return specials, pattern


def _build_byte_table(tokenizer: Any, n: int) -> list[bytes]:
    """Bytes of every token id. Byte-level BPE tokens map back through GPT-2's byte alphabet."""
    byte_decoder = _gpt2_byte_decoder()
    table: list[bytes] = []
    tokens = tokenizer.convert_ids_to_tokens(list(range(n)))
    special = set(tokenizer.all_special_tokens)
    for tok in tokens:
        if tok is None:
            table.append(b"")
        elif tok in special:
            table.append(tok.encode("utf-8"))
        elif all(ch in byte_decoder for ch in tok):
            table.append(bytes(byte_decoder[ch] for ch in tok))
        else:  # not byte-level (e.g. sentencepiece): fall back to the decoder's text
            table.append(tokenizer.decode([len(table)]).encode("utf-8"))
    return table


def _gpt2_byte_decoder() -> dict[str, int]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
