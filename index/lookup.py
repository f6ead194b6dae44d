"""Lookups: proposing a draft from every source of the index.

Part of ``store.NgramIndex`` (a mixin: its state is declared in ``NgramIndex.__init__``;
"lock held" means the caller holds ``NgramIndex._lock``).

``propose`` finds the longest suffix of the context (at least ``min_n`` tokens)
that occurs in any source: the current buffer (its own ``keyed.KeyIndex`` or a
scan), the other open buffers and the history (each one cached ``ScanSet``, see
``NgramIndex._lookup_sets``), the dynamic set of workspace files and the static
segment (``files.WorkspaceFiles``). Only occurrences of that longest length are
ranked (``ngram.rank_best`` / ``rank_occurrences``) and drafted from
(``ngram.build_draft``); a workspace file drafted from counts as used for eviction.

Stale "others" and "history" sets are built before the lookup takes the lock, so
building them does not stall other index calls; the lookup itself runs under it.
"""

from __future__ import annotations

import numpy as np

from . import ngram
from .draft import NO_DRAFT, Draft, Source
from .ngram import as_tokens
from .scan_set import ScanSet


class Lookup:
    """The lookups' part of ``NgramIndex`` (see module docstring)."""

    def propose(self, context, k: int, w: int = 1, current_uri: str | None = None) -> Draft:
        """Draft up to ``k`` tokens continuing ``context`` (token ids), as up to ``w``
        branches diverging at their first token. NO_DRAFT when no suffix of at
        least ``min_n`` tokens occurs. See ``ngram`` for the ranking."""
        if not isinstance(k, (int, np.integer)) or k < 1 or not isinstance(w, (int, np.integer)) or w < 1:
            raise ValueError(f"need integers k >= 1 and w >= 1, got k={k!r}, w={w!r}")
        cfg = self.cfg
        ctx = np.asarray(context)
        ctx = as_tokens(ctx[-cfg.max_match :] if ctx.ndim == 1 else ctx, "context")  # only what is compared
        if len(ctx) < cfg.min_n:
            return NO_DRAFT
        for attempt in range(3):
            with self._lock:
                stale = [(name, key, make) for name, (key, make) in self._lookup_sets(current_uri).items()
                         if self._cache.get(name, (None,))[0] != key]
                if not stale or attempt == 2:  # a writer kept changing them: the lookup builds (rare)
                    return self._propose(ctx, int(k), int(w), current_uri)
            # Build outside the lock: a buffer switch or a new accepted completion made a set stale,
            # and building it (6-58 ms for big ones) under the lock stalled every other index call.
            for name, key, make in stale:
                built = make()
                with self._lock:
                    # Install only a set still current for this lookup: else a writer (or rebuild())
                    # changed its sources meanwhile, and a later lookup may have installed a newer set.
                    if self._lookup_sets(current_uri).get(name, (None,))[0] == key:
                        self._cache[name] = (key, built)
        raise AssertionError("unreachable")

    def _propose(self, ctx: np.ndarray, k: int, w: int, current_uri: str | None) -> Draft:
        min_n = self.cfg.min_n
        # Each group: (match_len, source, first[c], stamp[c], pos[c], tokens_of(j, k), files)
        # files: (key per document, document[c]) for workspace files, whose use counts for eviction; else None
        groups = []

        def add_scan(s: ScanSet, m, p, d, source: Source, files: bool) -> None:
            if m >= min_n and len(p):
                groups.append((m, source, s.cat[p], s.stamps[d], p - s.starts[d],
                               lambda j, kk, s=s, p=p: ngram.continuation(s.cat, int(p[j]), kk),
                               (s.keys, d) if files else None))

        cur = self._buffers.get(current_uri) if current_uri is not None else None
        if cur is not None:
            a = cur.doc.tokens
            m, p = cur.match(ctx, min_n, self.cfg.keyed_min_tokens)
            if m:
                groups.append((m, Source.BUFFER, a[p], np.full(len(p), cur.stamp, np.int64), p,
                               lambda j, kk, a=a, p=p: ngram.continuation(a, int(p[j]), kk), None))
        sets = self._lookup_sets(current_uri)
        for name, source in (("others", Source.OPEN_BUFFER), ("history", Source.HISTORY)):
            if name in sets:
                s = self._scan_set(name, *sets[name])
                add_scan(s, *s.match(ctx, min_n), source, False)
        if self._dyn_tokens:
            s = self._dynamic_set()
            add_scan(s, *s.match(ctx, min_n), Source.WORKSPACE, True)
        best = max((g[0] for g in groups), default=0)
        seg = self._static
        if seg is not None and self._static_live.any():
            m, ip = seg.longest(ctx)
            while m >= max(min_n, best):
                lo, hi = seg.range_of(ctx, m, ip)
                p = seg.positions(lo, hi, self.cfg.max_candidates)
                d = seg.doc_of(p)
                keep = self._static_live[d]
                if keep.any():
                    p, d = p[keep], d[keep]
                    groups.append((m, Source.WORKSPACE, seg.first_tokens(p), self._static_stamps[d],
                                   p - seg.starts[d], lambda j, kk, p=p: seg.continuation(int(p[j]), kk),
                                   (self._static_keys, d)))
                    break
                m -= 1  # every occurrence of this length is in a removed file
        best = max((g[0] for g in groups), default=0)
        if best < min_n:
            return NO_DRAFT
        chosen = [g for g in groups if g[0] == best]
        if w == 1:  # the common case: no concatenation, no sort
            gi, j, count = ngram.rank_best([(int(g[1]), g[2], g[3], g[4]) for g in chosen])
            g = chosen[gi]
            self._mark_used(g, j)
            return ngram.build_draft(np.zeros(1, np.int64), np.array([count]), np.array([int(g[1])], np.int8),
                                     best, k, lambda _i, kk: g[5](j, kk))
        if len(chosen) == 1:  # the common case: no concatenation
            g = chosen[0]
            first, stamp, pos = g[2], g[3], g[4]
            source = np.full(len(first), int(g[1]), np.int8)
            owner = np.zeros(len(first), np.int64)
            offset = np.arange(len(first), dtype=np.int64)
        else:
            first = np.concatenate([g[2] for g in chosen]).astype(np.int32)
            source = np.concatenate([np.full(len(g[2]), int(g[1]), np.int8) for g in chosen])
            stamp = np.concatenate([g[3] for g in chosen]).astype(np.int64)
            pos = np.concatenate([g[4] for g in chosen]).astype(np.int64)
            owner = np.concatenate([np.full(len(g[2]), i, np.int64) for i, g in enumerate(chosen)])
            offset = np.concatenate([np.arange(len(g[2]), dtype=np.int64) for g in chosen])
        rows, counts = ngram.rank_occurrences(first, source, stamp, pos, w)

        def tokens_of(i: int, kk: int) -> np.ndarray:
            g = chosen[int(owner[i])]
            j = int(offset[i])
            self._mark_used(g, j)
            return g[5](j, kk)

        return ngram.build_draft(rows, counts, source, best, k, tokens_of)

    def _mark_used(self, g: tuple, j: int) -> None:
        if g[6] is not None:  # a workspace file drafted from: it was used
            keys, doc = g[6]
            f = self._files.get(keys[int(doc[j])])
            if f is not None:
                f.used = self._tick()

    def _scan_set(self, name: str, key, make) -> ScanSet:
        hit = self._cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        s = make()
        self._cache[name] = (key, s)
        return s
