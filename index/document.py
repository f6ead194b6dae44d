"""One open buffer: its text, its chunks and their token ids.

Invariant (``check`` asserts it; ``rebuild`` restores it from the text):

- ``cuts == [0, *chunking.boundaries(text), len(text)]`` (``[0]`` for ``""``);
- chunk ``i`` is ``text[cuts[i]:cuts[i+1]]``; its tokens are
  ``tokens[tok_cuts[i]:tok_cuts[i+1]]`` and equal ``tokenize([chunk])[0]``.

So ``tokens`` is the buffer's tokenization, chunk by chunk. An edit re-tokenizes
only the chunks from the last boundary before the edit to the first boundary
after it that is still a boundary in the new text (boundaries are a local
property, see ``chunking``), and splices the arrays.

Offsets are in Python ``str`` indices (code points); the LSP layer converts
UTF-16 columns before they get here.

Worked example (one token per character): ``"a\\n  b"`` has cuts ``[0, 3, 5]``,
chunks ``"a\\n "`` and ``" b"``. ``edit(4, 5, "c")`` re-tokenizes from cut 0
(the last cut c with c + 1 < 4) to the end and gives ``"a\\n  c"``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import chunking

TokenizeBatch = Callable[[list[str]], list[list[int]]]


def _tokenize_chunks(texts: list[str], tokenize_batch: TokenizeBatch) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``texts`` concatenated, and per-text token counts."""
    if not texts:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    ids = tokenize_batch(texts)
    if len(ids) != len(texts):
        raise ValueError(f"tokenizer returned {len(ids)} results for {len(texts)} texts")
    counts = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    flat = np.fromiter((t for x in ids for t in x), np.int64, int(counts.sum()))
    if flat.size and (flat.min() < 0 or flat.max() >= 2**31 - 1):
        raise ValueError("token ids must lie in [0, 2**31 - 1)")
    return flat.astype(np.int32), counts


class Document:
    """A buffer's text with its chunked tokenization (see module docstring)."""

    __slots__ = ("text", "tokens", "cuts", "tok_cuts", "version")

    def __init__(self, text: str, tokens: np.ndarray, cuts: np.ndarray, tok_cuts: np.ndarray):
        self.text = text
        self.tokens = tokens  # [n] int32
        self.cuts = cuts  # [c+1] int64 char offsets of chunk starts, then len(text)
        self.tok_cuts = tok_cuts  # [c+1] int64 token offsets of chunk starts, then n
        self.version = 0  # bumped by every applied edit (a plan is for one version)

    @classmethod
    def from_text(cls, text: str, tokenize_batch: TokenizeBatch) -> "Document":
        if not isinstance(text, str):
            raise ValueError(f"buffer text must be str, got {type(text).__name__}")
        cuts = [0, *chunking.boundaries(text), len(text)] if text else [0]
        texts = [text[a:b] for a, b in zip(cuts, cuts[1:])]
        tokens, counts = _tokenize_chunks(texts, tokenize_batch)
        tok_cuts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(text, tokens, np.asarray(cuts, np.int64), tok_cuts)

    def rebuild(self, tokenize_batch: TokenizeBatch) -> "Document":
        """The same text chunked and tokenized from scratch."""
        return Document.from_text(self.text, tokenize_batch)

    def edit(self, start: int, end: int, new_text: str, tokenize_batch: TokenizeBatch,
             result: str | None = None) -> tuple[int, int, int]:
        """Replace ``text[start:end]`` by ``new_text``; re-tokenize only what changed.

        ``result``: the text after the edit, if the caller has it. It must equal the
        edit applied to this copy (ValueError otherwise: the two have drifted apart);
        this document then keeps the caller's string, so only one stays alive.
        Returns the token splice ``(lo, hi, n_new)``: old ``tokens[lo:hi]`` became
        ``n_new`` tokens (``KeyIndex.splice`` takes it)."""
        return self.apply(self.plan_edit(start, end, new_text, tokenize_batch, result))

    def plan_edit(self, start: int, end: int, new_text: str, tokenize_batch: TokenizeBatch,
                  result: str | None = None) -> tuple:
        """``edit``'s work but the splice: checks and tokenizes, changes nothing. The plan
        holds for this ``version`` only (``apply`` refuses it otherwise).

        It may run outside the index's lock while another thread applies an edit: it reads
        ``version`` first and each field once, ``apply`` replaces fields (never changes them
        in place) and bumps ``version`` last, so a plan that read a mix is refused."""
        version, text0, cuts = self.version, self.text, self.cuts
        n = len(text0)
        if not isinstance(new_text, str):
            raise ValueError(f"edit text must be str, got {type(new_text).__name__}")
        if not (isinstance(start, int) and isinstance(end, int)) or not 0 <= start <= end <= n:
            raise ValueError(f"edit range [{start}, {end}) is out of range for a buffer of {n} characters")
        text = text0[:start] + new_text + text0[end:]
        if result is not None:
            if result != text:
                raise ValueError("the text given as the edit's result is not this edit applied to the buffer")
            text = result
        if not text:  # everything deleted: no chunk is left to splice around
            return version, text, None
        delta = len(text) - n
        # Left edge: the last cut c with c + 1 < start stays a boundary (its test reads
        # characters up to c + 1, all unchanged).
        il = max(int(np.searchsorted(cuts, start - 1, "left")) - 1, 0)
        lo = int(cuts[il])
        # Right edge: the first old cut after end that is still a boundary in the new text.
        ir = min(int(np.searchsorted(cuts, end, "right")), len(cuts) - 1)
        while ir < len(cuts) - 1 and not chunking.is_boundary(text, int(cuts[ir]) + delta):
            ir += 1
        hi = max(int(cuts[ir]) + delta, lo)
        inner = chunking.boundaries(text, lo, hi)
        edges = [lo, *inner, hi]
        texts = [text[a:b] for a, b in zip(edges, edges[1:]) if b > a]
        new_tokens, counts = _tokenize_chunks(texts, tokenize_batch)
        return version, text, (il, ir, delta, inner, new_tokens, counts)

    def apply(self, plan: tuple) -> tuple[int, int, int]:
        """Splice a ``plan_edit`` plan made at this version; returns ``edit``'s token splice."""
        version, text, splice = plan
        if version != self.version:
            raise ValueError("the edit plan was made for another version of the buffer")
        if splice is None:  # everything deleted
            n_old = len(self.tokens)
            self.text, self.tokens = "", np.zeros(0, np.int32)
            self.cuts, self.tok_cuts = np.zeros(1, np.int64), np.zeros(1, np.int64)
            self.version += 1
            return 0, n_old, 0
        il, ir, delta, inner, new_tokens, counts = splice
        cuts = self.cuts
        t_lo, t_hi = int(self.tok_cuts[il]), int(self.tok_cuts[ir])
        tail_cuts = cuts[ir:] + delta
        tail_tok = self.tok_cuts[ir:] + (len(new_tokens) - (t_hi - t_lo))
        mid_tok = t_lo + np.cumsum(counts)[:-1]
        self.cuts = np.concatenate([cuts[: il + 1], np.asarray(inner, np.int64), tail_cuts])
        self.tok_cuts = np.concatenate([self.tok_cuts[: il + 1], mid_tok, tail_tok])
        self.tokens = np.concatenate([self.tokens[:t_lo], new_tokens, self.tokens[t_hi:]])
        self.text = text
        self.version += 1  # last: see plan_edit
        return t_lo, t_hi, len(new_tokens)

    def check(self, tokenize_batch: TokenizeBatch | None = None) -> None:
        """Assert the invariant (for tests); with a tokenizer, also the token ids."""
        t = self.text
        want = [0, *chunking.boundaries(t), len(t)] if t else [0]
        assert self.cuts.tolist() == want, (self.cuts.tolist(), want)
        assert len(self.tok_cuts) == len(self.cuts) and self.tok_cuts[-1] == len(self.tokens)
        assert np.all(np.diff(self.tok_cuts) > 0) or not t
        if tokenize_batch is not None:
            fresh = Document.from_text(t, tokenize_batch)
            assert np.array_equal(self.tokens, fresh.tokens)
            assert np.array_equal(self.tok_cuts, fresh.tok_cuts)

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + self.cuts.nbytes + self.tok_cuts.nbytes
