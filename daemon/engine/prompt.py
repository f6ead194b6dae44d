"""The prompt for a completion at a cursor: what the model sees, in tokens.

- FIM when the tokenizer has fill-in-the-middle tokens (``<fim_prefix>`` or
  ``<|fim_prefix|>`` families): ``<fim_prefix> prefix <fim_suffix> suffix <fim_middle>``;
  otherwise the prefix alone.
- A token budget (``max_prompt_tokens``), most of it (``suffix_tokens`` at most
  to the suffix) on the prefix. The prefix window starts at a line start on a
  coarse character grid, so that successive keystrokes share the same window
  start and the KV cache of the common prefix is reused.
- The cursor boundary ("token healing"). The prompt stops at the start of the
  last pre-tokenizer chunk before the cursor, and those characters (``forced``)
  must be generated first. ``"    retu|"`` would otherwise end the prompt on the
  unnatural token ``"retu"``: the model then continues badly and the n-gram
  drafts (natural tokenization) never line up. With the back-off the prompt ends
  at ``"\\n   "`` and the model must produce ``" retu..."``, e.g. ``" return"``.
  The same prompt and constraint serve plain and speculative decoding, so the two
  stay comparable and token-identical. A last chunk longer than ``MAX_HEAL_CHARS``
  is not backed off.
"""

from __future__ import annotations

import bisect
import collections
import re
import threading
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    from ngramd.daemon.runtime.base import Logits

GRID_CHARS = 1024  # the prefix window moves in steps of this many characters
CHARS_PER_TOKEN = 3  # a generous estimate for code, to size the text before tokenizing
# Longest back-off (a few tokens' worth). A longer last chunk (a long identifier, base64, a
# "#-----" rule) is not backed off: regenerating it would eat the max_tokens budget.
MAX_HEAL_CHARS = 32
# A window's token count against the count of the tokens of a larger window's encoding that start
# inside it: they differ only where the window's first characters tokenize anew. Measured with
# SmolLM2's tokenizer on 20K-character dense lines (letters, "aaaa...", base64, CJK, digits,
# emoji, minified JS, spaces) at every 97th start: at most 2 apart. A step is skipped unencoded
# only when the count exceeds the budget by more than this (a wrong skip would only shorten the
# window by a grid step, never overflow the budget: the kept window is always encoded). Measured
# for SmolLM2's tokenizer only: with another --model's tokenizer a window could come out a step
# shorter than the every-step search would give; plain and speculative runs still build the
# same prompt (the search is deterministic), so exactness does not depend on the bound.
RETOKENIZE_SLACK = 64
# Excess (tokens over the budget) from which the first encoding's token offsets are asked for:
# below about one grid step of ordinary code, one step usually fits and offsets (a third
# encode) would cost more than they save.
OFFSETS_FROM_EXCESS = GRID_CHARS // CHARS_PER_TOKEN

_FIM_FAMILIES = (("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
                 ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
_FALLBACK_CHUNK = re.compile(r"\w+|\s+|[^\w\s]+")


@dataclass(frozen=True)
class PromptConfig:
    max_prompt_tokens: int = 1536
    suffix_tokens: int = 256  # FIM only: at most this much of the budget goes to the suffix
    heal: bool = True  # back off to the last pre-tokenizer boundary and force the typed characters


# Positions a completion prompt leaves for the answer where the model has few (a context
# window under the prompt budget and the answer; not the default model's 8192).
MIN_ANSWER_POSITIONS = 64


def model_positions(runtime: Any) -> int | None:
    """The positions the model has (its ``max_position_embeddings``; a llama.cpp runtime's
    ``positions``, its tokens per document cache); None when unknown."""
    limit = getattr(runtime, "positions", None)
    if not isinstance(limit, int):
        limit = getattr(getattr(getattr(runtime, "model", None), "config", None), "max_position_embeddings", None)
    return limit if isinstance(limit, int) else None


def within_positions(config: PromptConfig, positions: int | None) -> PromptConfig:
    """``config`` with its budget cut so that a prompt leaves the answer ``MIN_ANSWER_POSITIONS``
    of the model's ``positions`` (None: unknown, unchanged); the suffix keeps a quarter at most."""
    if positions is None or config.max_prompt_tokens + MIN_ANSWER_POSITIONS <= positions:
        return config
    budget = max(1, positions - MIN_ANSWER_POSITIONS)
    return replace(config, max_prompt_tokens=budget, suffix_tokens=min(config.suffix_tokens, budget // 4))


@dataclass(frozen=True)
class Prompt:
    ids: Sequence[int]  # what the model is run on (>= 1 token); a tuple where RecentPrompts shares it
    text: str  # the exact text of ``ids``
    forced: str  # characters before the cursor the generation must reproduce first
    line_prefix: str  # text from the cursor's line start to the cursor
    fim: bool


_FIM_IDS: weakref.WeakKeyDictionary[Any, tuple[int, int, int] | None] = weakref.WeakKeyDictionary()


def fim_tokens(tokenizer: Any) -> tuple[int, int, int] | None:
    """(prefix, suffix, middle) ids of the tokenizer's FIM tokens, or None; looked up once per tokenizer.

    ``get_vocab()`` builds the whole vocabulary as a dict (32-34 ms for SmolLM2's 49k
    tokens on the 2-core dev machine, 5 calls on a quiet machine; 68 ms under load),
    too slow to repeat on every keystroke.
    """
    if tokenizer in _FIM_IDS:
        return _FIM_IDS[tokenizer]
    vocab = tokenizer.get_vocab()
    found = next((tuple(vocab[n] for n in names) for names in _FIM_FAMILIES
                  if all(n in vocab for n in names)), None)
    _FIM_IDS[tokenizer] = found  # type: ignore[assignment]
    return found  # type: ignore[return-value]


def _window_start(text: str, offset: int, budget_tokens: int) -> int:
    """A line start at or after ``offset - budget`` chars, on a coarse grid (stable while typing)."""
    want = offset - budget_tokens * CHARS_PER_TOKEN
    if want <= 0:
        return 0
    start = -(-want // GRID_CHARS) * GRID_CHARS  # round up: the window shrinks, never overflows
    if start >= offset:  # a budget under one grid step: the grid would leave no window at all
        start = want
    nl = text.find("\n", start, offset)
    return nl + 1 if nl >= 0 else start


def _last_chunk_start(tokenizer: Any, prefix: str) -> int:
    """Char index in ``prefix`` where its last pre-tokenizer chunk begins."""
    tail_from = max(0, len(prefix) - 256)
    tail = prefix[tail_from:]
    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is not None:
        chunks = pre.pre_tokenize_str(tail)
        if chunks:
            return tail_from + chunks[-1][1][0]
    chunks = list(_FALLBACK_CHUNK.finditer(tail))
    return tail_from + chunks[-1].start() if chunks else len(prefix)


def _document_start_id(tok: Any) -> int:
    """``<|endoftext|>`` where the vocabulary has it, else BOS (or EOS)."""
    separator = "<|endoftext|>"
    start_id = tok.convert_tokens_to_ids(separator)
    # compare the token's string, not the unk id: the unk token may be the separator itself
    # (SmolLM2: both are id 0), while a vocabulary without it maps the name to unk
    if isinstance(start_id, int) and tok.convert_ids_to_tokens(start_id) == separator:
        return start_id
    return int(tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)


def _fit_window(runtime: Any, text: str, start: int, end: int, ids: list[int], budget: int) -> list[int]:
    """Tokens of the window ``text[start:end]`` (``ids``, over ``budget``) once it fits ``budget``.

    Denser text than estimated: the start moves by whole grid steps (to the next line start
    after each step, so it stays stable while typing) until the window's tokens fit; past the
    last step the window's last ``budget`` tokens are kept. The result is always the real
    encoding of the chosen window; only the search is cheap. Re-encoding the window at every
    step cost one encode per 1,024 characters of excess (each of the whole window) on dense
    lines, so the first window's token start offsets are used to skip, without encoding, the
    steps whose window surely holds too many tokens: those whose tokens of the first encoding
    that start inside them exceed the budget by more than ``RETOKENIZE_SLACK``.
    """
    first = start
    starts = None  # None: no skipping
    if len(ids) - budget > OFFSETS_FROM_EXCESS:
        starts = _token_starts(runtime.tokenizer, text[start:end], len(ids))

    def surely_too_long(s: int) -> bool:
        return starts is not None and len(starts) - bisect.bisect_left(starts, s - first) > budget + RETOKENIZE_SLACK

    while len(ids) > budget:  # ids: the tokens of text[start:end]
        nxt = (start // GRID_CHARS + 1) * GRID_CHARS
        if nxt >= end:
            return ids[-budget:]
        while True:
            nl = text.find("\n", nxt, end)
            start = nl + 1 if nl >= 0 else nxt
            nxt = (start // GRID_CHARS + 1) * GRID_CHARS
            if nxt >= end or not surely_too_long(start):
                break  # the last step is encoded anyway: its tokens are kept (their last ``budget``)
        ids = runtime.encode(text[start:end])
    return ids


def _token_starts(tokenizer: Any, text: str, expected: int) -> list[int] | None:
    """Character offset in ``text`` where each of its tokens starts (as ``encode`` splits it), or
    None where the tokenizer gives no offsets (a slow or stand-in tokenizer) or splits otherwise."""
    try:
        enc = tokenizer([text], add_special_tokens=False, split_special_tokens=True,
                        return_offsets_mapping=True)
        starts = [int(a) for a, _ in enc["offset_mapping"][0]]
    except Exception:  # no offsets here: every step is encoded, as before
        return None
    return starts if len(starts) == expected else None


def build_prompt(runtime: Any, text: str, offset: int, config: PromptConfig = PromptConfig()) -> Prompt:
    """The prompt for completing ``text`` at char ``offset`` (validated by the caller)."""
    assert 0 <= offset <= len(text)
    tok = runtime.tokenizer
    fim = fim_tokens(tok)
    # a FIM prompt adds its suffix and three FIM tokens to the prefix: all within the budget
    prefix_budget = max(1, config.max_prompt_tokens - (config.suffix_tokens + 3 if fim else 0))
    start = _window_start(text, offset, prefix_budget)
    prefix = text[start:offset]
    cut = _last_chunk_start(tok, prefix) if (config.heal and prefix) else len(prefix)
    if len(prefix) - cut > MAX_HEAL_CHARS:
        cut = len(prefix)
    forced = prefix[cut:]
    body_end = start + cut
    ids = runtime.encode(text[start:body_end])
    if len(ids) > prefix_budget:
        ids = _fit_window(runtime, text, start, body_end, ids, prefix_budget)
    line_prefix = text[text.rfind("\n", 0, offset) + 1: offset]
    if fim:
        p, s, m = fim
        suffix_ids = runtime.encode(text[offset: offset + config.suffix_tokens * 8])[: config.suffix_tokens]
        ids = [p] + ids + [s] + suffix_ids + [m]
    if not ids:  # empty document (or cursor at its start): start from the document separator
        ids = [_document_start_id(tok)]
    return Prompt(ids=ids, text=runtime.decode(ids), forced=forced, line_prefix=line_prefix, fim=bool(fim))


class RecentPrompts:
    """The last ``size`` prompts built, by (text, offset, config): a completion asked where a
    prepare or a prefetch just built its prompt (the editor's flow: the cursor rests, then the
    request comes) takes that one. ``build_prompt`` costs 2-3 ms on the embedded model (two encodes
    of the window and a decode), a quarter of a pass; a pure function of its arguments and the
    runtime's tokenizer, which is one per completer. Holds ``size`` texts alive."""

    def __init__(self, runtime: Any, size: int = 2) -> None:
        self._runtime = runtime
        self._size = size
        self._prompts: collections.OrderedDict[tuple[str, int, PromptConfig], Prompt] = collections.OrderedDict()
        self._lock = threading.Lock()  # a prepare's thread and a request's may ask at once

    def build(self, text: str, offset: int, config: PromptConfig) -> Prompt:
        key = (text, offset, config)  # a str keeps its hash: the same buffer object is not hashed again
        with self._lock:
            prompt = self._prompts.get(key)
            if prompt is not None:
                self._prompts.move_to_end(key)
                return prompt
        prompt = build_prompt(self._runtime, text, offset, config)
        prompt = replace(prompt, ids=tuple(prompt.ids))  # shared by the requests that take it: read-only
        with self._lock:
            self._prompts[key] = prompt
            while len(self._prompts) > self._size:
                self._prompts.popitem(last=False)
        return prompt


class ForcedPrefix:
    """Restricts the first tokens so that the generated bytes begin with ``forced``.

    Allowed at a step with ``rem`` forced bytes left: tokens whose bytes are a
    prefix of ``rem`` or start with ``rem`` (non-empty, not special). Found with a
    sorted byte table (bisect) instead of a scan over the vocabulary.
    """

    def __init__(self, runtime: Any, forced: str) -> None:
        self.forced = forced.encode("utf-8")
        self._runtime = runtime
        self._sorted: tuple[list[bytes], np.ndarray] | None = None

    def remaining(self, emitted: bytes | bytearray) -> bytes:
        """Forced bytes still to produce after ``emitted`` generated bytes ('' when done)."""
        n = min(len(emitted), len(self.forced))
        return self.forced[n:]

    def _table(self) -> tuple[list[bytes], np.ndarray]:
        """Token bytes, sorted, and the token id of each (kept on the runtime: one per vocabulary)."""
        if self._sorted is None:
            rt = self._runtime
            table = getattr(rt, "_sorted_bytes", None)
            if table is None:
                pairs = sorted((rt.token_bytes(i), i) for i in range(rt.vocab_size)
                               if rt.token_bytes(i) and not rt.is_special(i))
                table = ([b for b, _ in pairs], np.fromiter((i for _, i in pairs), dtype=np.int64, count=len(pairs)))
                rt._sorted_bytes = table
            self._sorted = table
        return self._sorted

    def allowed(self, rem: bytes) -> np.ndarray:
        """Token ids allowed with ``rem`` forced bytes left, unordered."""
        keys, ids = self._table()
        # the tokens that start with rem are one run of the sorted table: [lo, hi)
        lo = bisect.bisect_left(keys, rem)
        after = _successor(rem)
        hi = bisect.bisect_left(keys, after, lo) if after is not None else len(keys)
        pieces = [ids[lo:hi]]
        for n in range(1, len(rem)):  # tokens that are a proper prefix of rem
            i = bisect.bisect_left(keys, rem[:n])
            j = i
            while j < len(keys) and keys[j] == rem[:n]:
                j += 1
            pieces.append(ids[i:j])
        return np.concatenate(pieces)

    def best_allowed(self, logits: Logits, rem: bytes) -> int:
        """The argmax of ``mask_logits(logits, rem)`` (``logits``: [vocab]), the lowest id on a
        tie: on numpy rows without writing a masked copy of the vocabulary (~0.1 ms a token)."""
        if not isinstance(logits, np.ndarray):
            return int(self.mask_logits(logits, rem).argmax())
        allowed = self.allowed(rem)  # unordered; a short rest (b" ") allows thousands of tokens
        if not len(allowed):  # nothing allowed: the masked row is all -inf, whose argmax is 0
            return 0
        values = logits[allowed]
        top = values[int(np.argmax(values))]
        ties = allowed[np.isnan(values) if np.isnan(top) else values == top]  # argmax takes a NaN first
        return int(ties.min())  # the lowest id, as argmax over the whole row

    def mask_logits(self, logits: Logits, rem: bytes) -> Logits:
        """``logits``: [vocab], numpy or torch (returned as given); disallowed tokens set to -inf
        (rem must be non-empty)."""
        assert rem
        allowed = self.allowed(rem)
        if isinstance(logits, np.ndarray):  # llama.cpp's
            out = np.full_like(logits, -np.inf)
            out[allowed] = logits[allowed]
            return out
        import torch  # the torch runtime's logits: torch is loaded already

        idx = torch.from_numpy(allowed).to(logits.device)
        out = torch.full_like(logits, float("-inf"))
        out[idx] = logits[idx]
        return out


def _successor(prefix: bytes) -> bytes | None:
    """The least byte string above every string that starts with ``prefix``; None where there
    is none (``prefix`` is all 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
