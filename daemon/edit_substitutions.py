"""Substitutions an edit's output has made once, applied to the rest of its draft.

A rename writes the new name wherever the original has the old one. The edit
proposer (daemon/edit_proposer.py) drafts from the original, so without help every
occurrence ends a draft: the old name is drafted, rejected, and the draft after the
re-synchronisation starts short. Once the output has replaced one span of the
original by another and then followed the original again, the proposer has
*learnt* that pair, and the rest of the original it drafts from has the pair
applied: later occurrences are drafted as the output will likely write them. A
wrong guess costs what a rename costs without it: a draft rejected at that token.

Only word changes are learnt (both sides hold a letter or digit, at most
``MAX_TOKENS`` tokens each): ``url`` -> ``uri``, ``s`` -> ``text``. Type hints
(``):`` -> ``: str) -> bool:``) are one-off changes, not substitutions. A learnt
span is widened to whole words first (``guess`` -> ``detect`` before ``_scheme``
is learnt as ``guess_scheme`` -> ``detect_scheme``, so "a guess" keeps its word),
and applied only where the old span is a whole word (not inside a longer name, nor
an attribute after a dot).

A word has more than one spelling in tokens (`` esc`` after a space, ``esc`` after
a parenthesis): where the output writes the new word for another spelling of a
learnt old word, that is learnt too, at once (``Words``). Where the output keeps the
old word that the draft had renamed, the rename is undone for the rest of the draft:
a change made once costs one rejected draft, not one per later occurrence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MAX_TOKENS = 4  # tokens on either side of a learnt substitution, at most


def _is_word_byte(b: int) -> bool:
    return (chr(b).isalnum() or b == ord("_")) if b < 128 else True  # non-ASCII: part of a word


def joins(left: bytes, right: bytes) -> bool:
    """Whether ``right`` goes on the word ``left`` ends (``guess`` + ``_scheme``)."""
    return bool(left) and bool(right) and _is_word_byte(left[-1]) and _is_word_byte(right[0])


def learnable(old: bytes, new: bytes, old_tokens: int, new_tokens: int) -> bool:
    """Whether replacing ``old`` by ``new`` (their bytes and token counts) is a word change worth
    applying to the rest of the original."""
    return (1 <= old_tokens <= MAX_TOKENS and 1 <= new_tokens <= MAX_TOKENS and old != new
            and any(_is_word_byte(b) for b in old.strip()) and any(_is_word_byte(b) for b in new.strip()))


def apply_substitution(tokens: np.ndarray, start: int, old: np.ndarray, new: np.ndarray,
                       token_bytes: Callable[[int], bytes]) -> np.ndarray:
    """``tokens`` ([n] int32) with every whole-word occurrence of ``old`` ([a]) at or after
    ``start`` replaced by ``new`` ([b]); the tokens before ``start`` are kept as they are.

    Whole word: the byte before the occurrence is not a word byte or a dot when the occurrence
    begins with a word byte, and the byte after it is not a word byte when it ends with one.
    Example (one token a word): [x, url, y] with url -> uri gives [x, uri, y];
    ``request.url`` and ``url_scheme`` keep their ``url``.
    """
    assert tokens.ndim == 1 and old.ndim == 1 and new.ndim == 1 and len(old) >= 1
    old_bytes = b"".join(token_bytes(int(t)) for t in old)
    # " url" begins with a space, so it starts a word wherever it is; "url" must not follow one
    first_is_word = bool(old_bytes) and _is_word_byte(old_bytes[0])
    last_is_word = bool(old_bytes) and _is_word_byte(old_bytes[-1])
    out: list[np.ndarray] = [tokens[:start]]
    i = start
    n, a = len(tokens), len(old)
    while i < n:
        if i + a <= n and np.array_equal(tokens[i:i + a], old):
            before = token_bytes(int(tokens[i - 1]))[-1:] if i > 0 else b""
            after = token_bytes(int(tokens[i + a]))[:1] if i + a < n else b""
            whole = (not (first_is_word and before and (_is_word_byte(before[0]) or before == b"."))
                     and not (last_is_word and after and _is_word_byte(after[0])))
            if whole:
                out.append(new)
                i += a
                continue
        out.append(tokens[i:i + 1])
        i += 1
    return np.concatenate(out).astype(np.int32)


class Words:
    """Learnt renames as words: old word -> new word (their bytes without surrounding spaces), and
    the token spans applied for each (a word can have several spellings in tokens)."""

    def __init__(self) -> None:
        self._new_for: dict[bytes, bytes] = {}
        self._spans: dict[bytes, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._applied: set[bytes] = set()  # words whose spans were applied to the draft's source

    def add(self, old: bytes, new: bytes, old_tokens: np.ndarray, new_tokens: np.ndarray) -> int:
        """``old_tokens`` -> ``new_tokens`` were applied; they spell ``old`` -> ``new``."""
        if self._new_for.get(old.strip()) != new.strip():
            self._spans.pop(old.strip(), None)
        self._new_for[old.strip()] = new.strip()
        self._spans.setdefault(old.strip(), []).append((old_tokens, new_tokens))
        return len(self._spans[old.strip()])

    def verdict(self, drafted: bytes, written: bytes) -> str | None:
        """Where the draft had ``drafted`` and the output wrote ``written``: ``"again"`` when that
        spells a learnt rename (another token of the same words), ``"undone"`` when the output
        kept an old word the draft had renamed (the rename was not one), else None."""
        drafted, written = drafted.strip(), written.strip()
        if not drafted or not written:
            return None
        if self._new_for.get(drafted) == written:
            return "again"
        if self._new_for.get(written) == drafted:
            return "undone"
        return None

    def apply(self, old: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
        """The spans of ``old``'s rename to apply now: all of them the first time (the spellings
        seen before it was applied), then the newest only."""
        spans = self._spans.get(old.strip(), [])
        if old.strip() in self._applied:
            return spans[-1:]
        self._applied.add(old.strip())
        return spans

    def forget(self, old: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
        """Drop the rename of ``old``; returns its (old, new) token spans when they were applied
        (to be undone), else none."""
        self._new_for.pop(old.strip(), None)
        spans = self._spans.pop(old.strip(), [])
        return spans if old.strip() in self._applied else []
