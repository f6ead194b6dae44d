"""Renames an edit's output has made, applied to the rest of its draft.

A rename writes the new name wherever the original has the old one. The edit
proposer (daemon/edit/proposer.py) drafts from the original, so without help every
occurrence ends a draft: the old name is drafted, rejected, and the draft after the
re-synchronisation starts short. So the proposer notes each word the output
replaced (where it left the original and came back); once a word was replaced
``rename_sightings`` times (two by default), the rest of the original it drafts from
has the rename applied: later occurrences are drafted as the output will likely
write them.

Only word changes are learnt: both sides hold a letter or digit, at most
``MAX_TOKENS`` tokens each, with the same spaces around them (``url`` -> ``uri``,
`` s`` -> `` text``). Type hints (``):`` -> ``: str) -> bool:``) are one-off changes,
not renames. A learnt span is widened to whole words first (``guess`` -> ``detect``
before ``_scheme`` is learnt as ``guess_scheme`` -> ``detect_scheme``, so "a guess"
keeps its word), and applied only where the old span is a whole word that names a
variable: not inside a longer name, not an attribute after a dot, not after ``\\``
or ``%`` (``r'\\s'``, ``'%s'``), not a keyword argument's name (``f(s=s)`` renames
the value only). Strings and comments are not told apart from code: a word in them is
drafted renamed, and where the output keeps it, that place costs a rejected draft.

A word has more than one spelling in tokens (`` esc`` after a space, ``esc`` after
a parenthesis); any spelling counts as a sighting, and one seen after the rename was
applied is applied at once (``Words``). Where the output keeps the old word that the
draft had renamed (a string, a keyword it did not rename), that place is skipped;
kept ``rename_sightings`` times, the rename was not one: it is undone for the rest
of the draft, on the tokens it wrote only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ngramd.daemon.engine.token_runs import occurrences

MAX_TOKENS = 4  # tokens on either side of a learnt rename, at most
_NOT_A_VARIABLE_AFTER = (b".", b"\\", b"%")  # an attribute, an escape, a format: the word is not the name


def _is_word_byte(b: int) -> bool:
    return (chr(b).isalnum() or b == ord("_")) if b < 128 else True  # non-ASCII: part of a word


def joins(left: bytes, right: bytes) -> bool:
    """Whether ``right`` goes on the word ``left`` ends (``guess`` + ``_scheme``)."""
    return bool(left) and bool(right) and _is_word_byte(left[-1]) and _is_word_byte(right[0])


def _spaces(text: bytes) -> tuple[bytes, bytes]:
    """The whitespace ``text`` begins and ends with."""
    core = text.strip()
    if not core:
        return text, b""
    begin = text.index(core)
    return text[:begin], text[begin + len(core):]


def learnable(old: bytes, new: bytes, old_tokens: int, new_tokens: int) -> bool:
    """Whether replacing ``old`` by ``new`` (their bytes and token counts) is a word change worth
    applying to the rest of the original: short, a word on both sides, the same spaces around
    (`` url`` -> ``uri`` would glue ``return url`` into ``returnuri``)."""
    return (1 <= old_tokens <= MAX_TOKENS and 1 <= new_tokens <= MAX_TOKENS
            and old.strip() != new.strip() and _spaces(old) == _spaces(new)
            and any(_is_word_byte(b) for b in old) and any(_is_word_byte(b) for b in new))


def whole_word_span(original: np.ndarray, generated: np.ndarray, left: tuple[int, int], back: tuple[int, int],
                    token_bytes: Callable[[int], bytes]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The change between where the output left ``original`` (``left``: original token, generated
    token) and where it came back (``back``), widened over the tokens both share until it is whole
    words: (old tokens, new tokens, the original's token after them), or None where it stays
    inside a word or is empty.

    Example: ``guess`` -> ``detect`` followed by ``_scheme`` in both gives ``guess_scheme`` ->
    ``detect_scheme``.
    """
    (lo, lg), (bo, bg) = left, back
    if not (lo < bo and lg < bg):
        return None

    def joined(i: int) -> bool:  # original tokens i - 1 and i are one word
        return 0 < i < len(original) and joins(token_bytes(int(original[i - 1])), token_bytes(int(original[i])))

    while lg > 0 and joined(lo) and original[lo - 1] == generated[lg - 1]:
        lo, lg = lo - 1, lg - 1
    while bg < len(generated) and joined(bo) and original[bo] == generated[bg]:
        bo, bg = bo + 1, bg + 1
    if joined(lo) or joined(bo):
        return None
    return original[lo:bo].copy(), generated[lg:bg].copy(), bo


def _in_parentheses(tokens: np.ndarray, i: int, token_bytes: Callable[[int], bytes], window: int = 64) -> bool:
    """Whether the nearest bracket left open before token ``i`` is ``(`` (a call's or a signature's
    arguments, not ``a, b = ...`` at the start of a line), looking back ``window`` tokens at most."""
    depth = 0
    for t in tokens[max(i - window, 0):i][::-1].tolist():
        for b in reversed(token_bytes(int(t))):
            if b in b")]}":
                depth += 1
            elif b in b"([{":
                if depth == 0:
                    return b == ord("(")
                depth -= 1
            elif b == ord("\n") and depth == 0:
                return False
    return False


def apply_substitution(tokens: np.ndarray, start: int, old: np.ndarray, new: np.ndarray,
                       token_bytes: Callable[[int], bytes], written: np.ndarray,
                       only_written: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``tokens`` ([n] int32) with the occurrences of ``old`` ([a]) at or after ``start`` that
    name a variable (see the module doc) replaced by ``new`` ([b]); the tokens before ``start``
    are kept. ``written`` ([n] bool) marks the tokens earlier renames wrote; returned with the
    tokens, updated. ``only_written``: replace only occurrences every token of which is marked
    (undoing a rename touches what it wrote, not the same word where the range had it).

    Example (one token a word): [x, url, y] with url -> uri gives [x, uri, y];
    ``request.url``, ``url_scheme`` and the keyword of ``f(url=url)`` keep their ``url``.
    """
    assert tokens.ndim == 1 and old.ndim == 1 and new.ndim == 1 and len(old) >= 1 and written.shape == tokens.shape
    old_bytes = b"".join(token_bytes(int(t)) for t in old)
    # " url" begins with a space, so it starts a word wherever it is; "url" must not follow one
    first_is_word, last_is_word = _is_word_byte(old_bytes[0]), _is_word_byte(old_bytes[-1])
    n, a = len(tokens), len(old)

    def text(lo: int, hi: int) -> bytes:
        return b"".join(token_bytes(int(t)) for t in tokens[max(lo, 0):min(hi, n)])

    pieces, marks, done = [tokens[:start]], [written[:start]], start
    for i in (occurrences(tokens[start:], old) - a + start).tolist():
        if i < done or (only_written and not written[i:i + a].all()):
            continue
        before, after = text(i - 2, i), text(i + a, i + a + 2)
        if first_is_word and before and (_is_word_byte(before[-1]) or before.endswith(_NOT_A_VARIABLE_AFTER)):
            continue
        if last_is_word and after and _is_word_byte(after[0]):
            continue
        if (before.rstrip().endswith((b"(", b",")) and after.lstrip().startswith(b"=")
                and not after.lstrip().startswith(b"==") and _in_parentheses(tokens, i, token_bytes)):
            continue  # a keyword argument's name: the callee's parameter, not this variable
        pieces += [tokens[done:i], new]
        # an undo gives back the range's own tokens: no longer written by a rename
        marks += [written[done:i], np.full(len(new), not only_written)]
        done = i + a
    pieces.append(tokens[done:])
    marks.append(written[done:])
    return np.concatenate(pieces).astype(np.int32), np.concatenate(marks)


class Words:
    """Learnt renames as words: old word -> new word (their bytes without surrounding spaces), the
    token spans seen for each (a word can have several spellings in tokens), and how often the
    output kept the old word where the draft had renamed it (places marked written by the
    proposer, see ``apply_substitution``)."""

    def __init__(self) -> None:
        self._new_for: dict[bytes, bytes] = {}
        self._spans: dict[bytes, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._applied: set[bytes] = set()  # words whose spans were applied to the draft's source
        self._kept: dict[bytes, int] = {}

    def renamed_to(self, old: bytes) -> bytes | None:
        return self._new_for.get(old.strip())

    def add(self, old: bytes, new: bytes, old_tokens: np.ndarray, new_tokens: np.ndarray) -> int:
        """The output replaced ``old_tokens`` by ``new_tokens``, spelling ``old`` -> ``new``; returns
        the sightings of that rename. (A different new word for ``old``: undo the other first.)"""
        key = old.strip()
        assert self._new_for.get(key) in (None, new.strip()), "forget the other rename of this word first"
        self._new_for[key] = new.strip()
        self._spans.setdefault(key, []).append((old_tokens, new_tokens))
        return len(self._spans[key])

    def is_renamed(self, drafted: bytes, written: bytes) -> bool:
        """Whether the output writing ``written`` where the draft had ``drafted`` spells a learnt
        rename (another token of the same words)."""
        drafted, written = drafted.strip(), written.strip()
        return bool(drafted) and bool(written) and self._new_for.get(drafted) == written

    def old_for(self, new: bytes) -> bytes | None:
        """The old word a learnt rename replaces by ``new``, or None."""
        return next((old for old, n in self._new_for.items() if n == new.strip()), None)

    def keep(self, old: bytes) -> int:
        """The output kept ``old`` once more where the draft had renamed it; returns how often."""
        self._kept[old.strip()] = self._kept.get(old.strip(), 0) + 1
        return self._kept[old.strip()]

    def apply(self, old: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
        """The spans of ``old``'s rename to apply now: all of them the first time (the spellings
        seen before it was applied), then the newest only."""
        key = old.strip()
        spans = self._spans.get(key, [])
        if key in self._applied:
            return spans[-1:]
        self._applied.add(key)
        return spans

    def forget(self, old: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
        """Drop the rename of ``old``; returns its (old, new) token spans when they were applied
        (to be undone), else none."""
        key = old.strip()
        self._new_for.pop(key, None)
        self._kept.pop(key, None)
        spans = self._spans.pop(key, [])
        if key in self._applied:
            self._applied.discard(key)
            return spans
        return []
