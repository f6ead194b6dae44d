"""Lookups: proposing a draft from every source of the index.

A part of ``store.NgramIndex``; "lock held" means the caller holds the index's lock.
``propose`` finds the longest suffix of the context (at least ``min_n`` tokens) that occurs in
any source, gathers each source's occurrences of it as ``Candidates``, ranks them
(``ngram.rank_best`` / ``rank_occurrences``) and drafts from the best (``ngram.build_draft``).
Stale scan sets are built before the lookup takes the lock (docs/design/index.md, "Scan sets
built outside the lock").
"""

from __future__ import annotations

import threading

import numpy as np

from . import ngram
from .buffers import History, OpenBuffers
from .candidates import Candidates
from .config import IndexConfig
from .draft import NO_DRAFT, Branch, Draft, Source
from .files import WorkspaceFiles
from .ngram import as_tokens


class Lookup:
    """Proposes drafts from the buffers, the history and the workspace files."""

    def __init__(self, cfg: IndexConfig, lock: threading.RLock, buffers: OpenBuffers, history: History,
                 files: WorkspaceFiles) -> None:
        self._cfg, self._lock, self._buffers, self._files = cfg, lock, buffers, files
        # The sources looked up as one cached ScanSet each, in ranking order.
        self._set_sources = ((buffers, Source.OPEN_BUFFER), (history, Source.HISTORY))

    def propose(self, context, k: int, w: int = 1, current_uri: str | None = None) -> Draft:
        """Draft up to ``k`` tokens continuing ``context`` (token ids), as up to ``w``
        branches diverging at their first token. NO_DRAFT when no suffix of at
        least ``min_n`` tokens occurs. See ``ngram`` for the ranking."""
        if not isinstance(k, (int, np.integer)) or k < 1 or not isinstance(w, (int, np.integer)) or w < 1:
            raise ValueError(f"need integers k >= 1 and w >= 1, got k={k!r}, w={w!r}")
        cfg = self._cfg
        ctx = np.asarray(context)
        # only what is compared; not copied: the lookup only reads it
        ctx = as_tokens(ctx[-cfg.max_match :] if ctx.ndim == 1 else ctx, "context", copy=False)
        if len(ctx) < cfg.min_n:
            return NO_DRAFT
        for attempt in range(3):
            with self._lock:
                wants = [part.lookup_set(current_uri) for part, _ in self._set_sources]
                stale = [(part, *want) for (part, _), want in zip(self._set_sources, wants)
                         if want is not None and not part.cache.current(want[0])]
                if not stale or attempt == 2:  # a writer kept changing them: the lookup builds (rare)
                    return self._propose(ctx, int(k), int(w), current_uri, wants)
            # Built outside the lock: a big set under it stalled every other index call.
            for part, key, make in stale:
                built = make()
                with self._lock:
                    # Install only a set still current: else its sources changed meanwhile, and a
                    # later lookup may have installed a newer set.
                    now = part.lookup_set(current_uri)
                    if now is not None and now[0] == key:
                        part.cache.put(key, built)
        raise AssertionError("unreachable")

    def _candidates(self, ctx: np.ndarray, current_uri: str | None, wants: list) -> list[Candidates]:
        """Each source's occurrences of its longest match (lock held); the static segment's only
        when at least as long as the others' (its search is the costliest). ``wants``: each of
        ``_set_sources``' ``lookup_set``, taken under the same hold of the lock."""
        min_n = self._cfg.min_n
        groups: list[Candidates] = []
        cur = self._buffers.by_uri.get(current_uri) if current_uri is not None else None
        if cur is not None:
            a = cur.doc.tokens
            m, p = cur.match(ctx, min_n, self._cfg.keyed_min_tokens)
            if m:
                groups.append(Candidates.in_buffer(a, m, p, cur.stamp))
        for (part, source), want in zip(self._set_sources, wants):
            if want is not None:
                s = part.cache.get_or_build(*want)
                m, p, d = s.match(ctx, min_n)
                if m >= min_n and len(p):
                    groups.append(Candidates.in_scan_set(s, m, p, d, source, False))
        dynamic = self._files.dynamic_candidates(ctx, min_n)
        if dynamic is not None:
            groups.append(dynamic)
        best = max((g.match_len for g in groups), default=0)
        static = self._files.static_candidates(ctx, max(min_n, best))
        if static is not None:
            groups.append(static)
        return groups

    def _propose(self, ctx: np.ndarray, k: int, w: int, current_uri: str | None, wants: list) -> Draft:
        groups = self._candidates(ctx, current_uri, wants)
        best = max((g.match_len for g in groups), default=0)
        if best < self._cfg.min_n:
            return NO_DRAFT
        chosen = [g for g in groups if g.match_len == best]
        if w == 1:  # the common case: no concatenation, no sort
            gi, j, count = ngram.rank_best([g.ranking_row() for g in chosen])
            g = chosen[gi]
            self._mark_used(g, j)
            tokens = g.tokens_after(j, k)
            return Draft((Branch(tokens, count, g.source, best),)) if len(tokens) else NO_DRAFT
        if len(chosen) == 1:  # the common case: no concatenation
            g = chosen[0]
            first, stamp, pos = g.first_tokens, g.stamps, g.offsets
            source = np.full(len(first), int(g.source), np.int8)
            owner = np.zeros(len(first), np.int64)
            offset = np.arange(len(first), dtype=np.int64)
        else:
            first = np.concatenate([g.first_tokens for g in chosen]).astype(np.int32)
            source = np.concatenate([np.full(len(g.first_tokens), int(g.source), np.int8) for g in chosen])
            stamp = np.concatenate([g.stamps for g in chosen]).astype(np.int64)
            pos = np.concatenate([g.offsets for g in chosen]).astype(np.int64)
            owner = np.concatenate([np.full(len(g.first_tokens), i, np.int64) for i, g in enumerate(chosen)])
            offset = np.concatenate([np.arange(len(g.first_tokens), dtype=np.int64) for g in chosen])
        rows, counts = ngram.rank_occurrences(first, source, stamp, pos, w)

        def tokens_of(i: int, kk: int) -> np.ndarray:
            g = chosen[int(owner[i])]
            j = int(offset[i])
            self._mark_used(g, j)
            return g.tokens_after(j, kk)

        return ngram.build_draft(rows, counts, source, best, k, tokens_of)

    def _mark_used(self, g: Candidates, j: int) -> None:
        key = g.file_key(j)
        if key is not None:  # a workspace file drafted from: it was used
            self._files.mark_used(key)
