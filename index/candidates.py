"""Candidates: the occurrences of the context's longest match in one source, ready to rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import ngram
from .draft import Source
from .scan_set import ScanSet


@dataclass(frozen=True, eq=False)
class Candidates:
    """c occurrences of a ``match_len``-token suffix of the context in one source."""

    match_len: int
    source: Source
    first_tokens: np.ndarray  # [c] the token after each occurrence
    stamps: np.ndarray  # [c] int64 recency of each occurrence's document
    offsets: np.ndarray  # [c] each occurrence's position within its document
    tokens_after: Callable[[int, int], np.ndarray]  # (occurrence j, k) -> up to k tokens after it
    # Workspace files only (drafting from one counts as a use for eviction): the key of each
    # document, and the document of each occurrence. None for other sources.
    file_keys: Sequence[str] | None = None
    file_of: np.ndarray | None = None  # [c]

    def file_key(self, j: int) -> str | None:
        """The workspace file occurrence ``j`` lies in (None: not a workspace file)."""
        return None if self.file_keys is None else self.file_keys[int(self.file_of[j])]

    def ranking_row(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """What ``ngram.rank_best`` ranks this group by."""
        return int(self.source), self.first_tokens, self.stamps, self.offsets

    @classmethod
    def in_buffer(cls, a: np.ndarray, m: int, p: np.ndarray, stamp: int) -> Candidates:
        """The occurrences at positions ``p`` of a match of length ``m`` in the current buffer ``a``."""
        return cls(m, Source.BUFFER, a[p], np.full(len(p), stamp, np.int64), p,
                   lambda j, kk: ngram.continuation(a, int(p[j]), kk))

    @classmethod
    def in_scan_set(cls, s: ScanSet, m: int, p: np.ndarray, d: np.ndarray, source: Source,
                    workspace: bool) -> Candidates:
        """The occurrences at positions ``p`` (in documents ``d``) of a match of length ``m`` in ``s``."""
        return cls(m, source, s.cat[p], s.stamps[d], p - s.starts[d],
                   lambda j, kk: ngram.continuation(s.cat, int(p[j]), kk),
                   s.keys if workspace else None, d if workspace else None)
