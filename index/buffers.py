"""Open buffers and accepted completions: two sources of ``store.NgramIndex``.

Each is a part the index holds; "lock held" means the caller holds the index's lock. Both
give a lookup one cached ``ScanSet`` (``lookup_set``), built from a snapshot so that it may be
built outside the lock (docs/design/index.md, "Scan sets built outside the lock").
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import ngram
from .clock import Clock
from .config import IndexConfig
from .document import Document, TokenizeBatch
from .files import ARRAY_HEADER_BYTES
from .keyed import KeyIndex, key_len
from .scan_set import ScanSet, SetCache, assert_same_scan_set

# (key, builder): a cached set is current while its key equals the key of the sources now.
LookupSet = tuple[Any, Callable[[], ScanSet]]

# stats()["index_bytes"]: per history entry, its tuple and the ndarray header of its tokens.
_HISTORY_ENTRY_BYTES = sys.getsizeof((None, None)) + ARRAY_HEADER_BYTES


@dataclass
class OpenBuffer:
    doc: Document
    stamp: int
    keys: KeyIndex | None = None  # built once the buffer has keyed_min_tokens (at open or lookup), then spliced

    def match(self, ctx: np.ndarray, min_n: int, keyed_min: int) -> tuple[int, np.ndarray]:
        a = self.doc.tokens
        if self.keys is None:
            if len(a) < keyed_min:
                return ngram.scan_longest(a, ctx, min_n)
            self.keys = KeyIndex(a, key_len(min_n))
        return self.keys.match(a, ctx, min_n)


class OpenBuffers:
    """The open buffers by uri. A lookup reads the current one directly (Source.BUFFER) and
    the others as one cached ScanSet (Source.OPEN_BUFFER)."""

    def __init__(self, cfg: IndexConfig, tokenize_batch: TokenizeBatch, clock: Clock) -> None:
        self._cfg, self._tok, self._clock = cfg, tokenize_batch, clock
        self.by_uri: dict[str, OpenBuffer] = {}
        self.cache = SetCache()
        # Part of the cache key: bumped when the buffers change without new stamps (``rebuild``
        # re-tokenizes them), so a set built from an older snapshot no longer matches.
        self._epoch = 0

    def get(self, uri: str) -> OpenBuffer:
        b = self.by_uri.get(uri)
        if b is None:
            raise ValueError(f"buffer {uri!r} is not open")
        return b

    @property
    def tokens(self) -> int:
        return sum(len(b.doc.tokens) for b in self.by_uri.values())

    def open(self, uri: str, doc: Document, keys: KeyIndex | None) -> bool:
        """Put ``doc`` as buffer ``uri`` (lock held); whether it replaced a longer one."""
        old = self.by_uri.get(uri)
        shrank = old is not None and len(old.doc.tokens) > len(doc.tokens)
        self.by_uri[uri] = OpenBuffer(doc, self._clock.tick(), keys)
        return shrank

    def apply_edit(self, uri: str, b: OpenBuffer, doc: Document, plan: tuple, start: int, end: int,
                   new_text: str, result: str | None) -> bool:
        """Apply ``plan``, made outside the lock from ``b.doc`` (lock held); whether the buffer shrank."""
        if self.by_uri.get(uri) is b and b.doc is doc and doc.version == plan[0]:
            splice = doc.apply(plan)
        else:  # edited, reopened or closed meanwhile: redo it on what is there now
            b = self.get(uri)
            splice = b.doc.edit(start, end, new_text, self._tok, result)
        if b.keys is not None:
            b.keys.splice(b.doc.tokens, *splice)
        b.stamp = self._clock.tick()
        lo, hi, n_new = splice
        return n_new < hi - lo

    def close(self, uri: str) -> bool:
        return self.by_uri.pop(uri, None) is not None

    def rebuild(self) -> None:
        """Re-chunk and re-tokenize every buffer (lock held)."""
        for b in self.by_uri.values():
            b.doc = b.doc.rebuild(self._tok)
            b.keys = None  # rebuilt from the new tokens at the next lookup
        self.cache.clear()
        self._epoch += 1  # a lookup building from the old tokens now installs nothing

    def lookup_set(self, current_uri: str | None) -> LookupSet | None:
        """The buffers but ``current_uri`` as (key, builder) (lock held). The key: their stamps and
        the epoch. The builder reads a snapshot (token arrays are replaced, never changed in
        place), so it may run outside the lock."""
        others = [(u, b.doc.tokens, b.stamp) for u, b in self.by_uri.items() if u != current_uri]
        if not others:
            return None
        return ((self._epoch, tuple((u, st) for u, _, st in others)),
                lambda: ScanSet([t for _, t, _ in others], [st for _, _, st in others], [u for u, _, _ in others],
                                self._cfg.min_n, self._cfg.keyed_min_tokens))

    @property
    def nbytes(self) -> int:
        return sum(b.doc.nbytes + (b.keys.nbytes if b.keys else 0) for b in self.by_uri.values()) + self.cache.nbytes

    def check(self) -> None:
        """Assert each buffer, its key index and the cached set equal their rebuilt forms (lock held);
        a cached set current for no lookup (from any buffer, or none) is rebuilt before use."""
        for b in self.by_uri.values():
            b.doc.check(self._tok)
            if b.keys is not None:
                b.keys.check(b.doc.tokens)
        if self.cache.set is not None:
            for uri in (None, *self.by_uri):
                want = self.lookup_set(uri)
                if want is not None and self.cache.current(want[0]):
                    assert_same_scan_set(self.cache.set, want[1]())
                    break


class History:
    """Accepted completions (Source.HISTORY), oldest first, at most ``max_history_tokens``."""

    def __init__(self, cfg: IndexConfig, clock: Clock) -> None:
        self._cfg, self._clock = cfg, clock
        self.entries: deque[tuple[np.ndarray, int]] = deque()  # (tokens, stamp)
        self.tokens = 0
        self.cache = SetCache()

    def add(self, t: np.ndarray) -> None:
        """Remember ``t`` (lock held); the oldest go past ``max_history_tokens``."""
        self.entries.append((t, self._clock.tick()))
        self.tokens += len(t)
        self.drop_oldest(self.tokens - self._cfg.max_history_tokens)
        self.cache.clear()

    def drop_oldest(self, over: int) -> None:
        """Drop the oldest entries until ``over`` more tokens are gone, or none is left (lock held)."""
        while over > 0 and self.entries:
            old, _ = self.entries.popleft()
            self.tokens -= len(old)
            over -= len(old)
            self.cache.clear()

    def lookup_set(self, current_uri: str | None = None) -> LookupSet | None:
        """The entries as (key, builder) (lock held), like ``OpenBuffers.lookup_set``."""
        if not self.entries:
            return None
        hist = list(self.entries)
        # Stamps rise with each addition and the oldest go first: the ends name the contents.
        return ((hist[0][1], hist[-1][1]),
                lambda: ScanSet([t for t, _ in hist], [st for _, st in hist], [None] * len(hist),
                                self._cfg.min_n, self._cfg.keyed_min_tokens))

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes + _HISTORY_ENTRY_BYTES for t, _ in self.entries) + self.cache.nbytes

    def check(self) -> None:
        want = self.lookup_set()
        if self.cache.set is not None and want is not None and self.cache.current(want[0]):
            assert_same_scan_set(self.cache.set, want[1]())
