"""NgramIndex: the live n-gram index over buffers, history and workspace files.

The index is composed of parts, each owning its state, all guarded by the index's one lock and
stamped by its one ``Clock``:

- ``buffers.OpenBuffers`` and ``buffers.History``: open buffers and accepted completions;
- ``files.WorkspaceFiles``: the workspace files (static segment, dynamic set, merges), with
  ``evicted.EvictedFiles``, those evicted for lack of room;
- ``bound.TokenBound``: keeps all of them within ``max_indexed_tokens``;
- ``scans.WorkspaceScans``: reading files in, newest wins, and bringing evicted files back;
- ``lookup.Lookup``: ``propose``.

This class holds them, says which calls which, and keeps the public API. Invariant: the index
proposes exactly what one built from scratch from the same documents proposes, once every
writer call has returned (``rebuild`` and the property tests check it). The design, with the
invariant, recency and thread safety: docs/design/index.md.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import numpy as np

from .background import BackgroundJob
from .bound import TokenBound
from .buffers import History, OpenBuffers
from .clock import Clock
from .config import IndexConfig
from .document import Document, TokenizeBatch
from .draft import Draft
from .evicted import EvictedFiles
from .files import FileRecord, WorkspaceFiles
from .keyed import KeyIndex, key_len
from .lookup import Lookup
from .ngram import as_tokens
from .scans import WorkspaceScans

__all__ = ["IndexConfig", "NgramIndex"]


class NgramIndex:
    """See the module docstring. All public methods are thread-safe."""

    def __init__(self, tokenize_batch: TokenizeBatch, config: IndexConfig | None = None,
                 background_setup: Callable[[], object] | None = None):
        """``background_setup``: called first on a thread the index starts for itself (the
        restore thread: the daemon lowers its priority, as it does its scans')."""
        self.cfg = cfg = config or IndexConfig()
        self._tok = tokenize_batch
        self._lock = threading.RLock()
        clock = Clock()
        self._buffers = OpenBuffers(cfg, tokenize_batch, clock)
        self._history = History(cfg, clock)
        self._evicted = EvictedFiles(cfg.batch_files)
        self._workspace = WorkspaceFiles(cfg, self._lock, clock, self._evicted)
        self._bound = TokenBound(cfg, self._buffers, self._history, self._workspace)
        self._scans = WorkspaceScans(cfg, self._lock, clock, tokenize_batch, self._workspace, self._evicted,
                                     self._bound, background_setup)
        self._lookup = Lookup(cfg, self._lock, self._buffers, self._history, self._workspace)

    # ---- what callers and tests read --------------------------------------
    @property
    def last_skip(self) -> str | None:
        """The message of the last file not indexed."""
        return self._scans.last_skip

    @property
    def _files(self) -> dict[str, FileRecord]:
        """The indexed workspace files by absolute path (for tests: read only)."""
        return self._workspace.files

    @property
    def _restorer(self) -> BackgroundJob | None:
        return self._scans.restorer

    # ---- buffers ----------------------------------------------------------
    def open_buffer(self, uri: str, text: str) -> None:
        """Index ``text`` as the open buffer ``uri`` (replacing any earlier text)."""
        if not isinstance(uri, str):
            raise ValueError(f"buffer uri must be str, got {type(uri).__name__}")
        doc = Document.from_text(text, self._tok)  # tokenize outside the lock
        keys = KeyIndex(doc.tokens, key_len(self.cfg.min_n)) if len(doc.tokens) >= self.cfg.keyed_min_tokens else None
        with self._lock:
            shrank = self._buffers.open(uri, doc, keys)
            evicted = self._bound.enforce()
        self._after_buffer_write(evicted, shrank)

    def edit_buffer(self, uri: str, start: int, end: int, new_text: str, result: str | None = None) -> None:
        """Replace characters ``[start, end)`` of buffer ``uri`` (str indices) by ``new_text``.

        ``result``, when the caller already has it, is the buffer's whole text
        after the edit: kept as is (one string shared with the caller) instead
        of spliced anew."""
        with self._lock:
            b = self._buffers.get(uri)
        # Tokenize outside the lock: in a long single-line buffer (minified code) the edited
        # chunk is the whole line, and every lookup would wait for it.
        doc = b.doc
        plan = doc.plan_edit(start, end, new_text, self._tok, result)
        with self._lock:
            shrank = self._buffers.apply_edit(uri, b, doc, plan, start, end, new_text, result)
            evicted = self._bound.enforce()
        self._after_buffer_write(evicted, shrank)

    def _after_buffer_write(self, evicted: bool, shrank: bool) -> None:
        if evicted:  # the dynamic set only tombstones evicted files (TokenBound.enforce)
            self._workspace.after_write()
        if shrank:
            self._scans.restore_evicted(reserve=True)

    def close_buffer(self, uri: str) -> None:
        """Forget the buffer ``uri``; files evicted to make room for it come back (read outside
        the lock, on the caller's thread or, with ``cfg.restore_in_background``, the restore thread)."""
        with self._lock:
            closed = self._buffers.close(uri)
        if closed:
            self._scans.restore_evicted()

    def buffer_text(self, uri: str) -> str:
        with self._lock:
            return self._buffers.get(uri).doc.text

    def buffer_tokens(self, uri: str) -> np.ndarray:
        """The buffer's token ids (a copy). [n] int32"""
        with self._lock:
            return self._buffers.get(uri).doc.tokens.copy()

    # ---- history ----------------------------------------------------------
    def add_history(self, token_ids) -> None:
        """Remember an accepted completion; the oldest go past max_history_tokens."""
        t = as_tokens(token_ids, "history")
        if not len(t):
            return
        t = t[-self.cfg.max_history_tokens :]
        with self._lock:
            self._history.add(t)
            evicted = self._bound.enforce()
        if evicted:  # on the model's thread: the lookup structure only, a merge waits for a file write
            self._workspace.warm_dynamic()

    # ---- workspace files --------------------------------------------------
    def has_file(self, path: str | os.PathLike) -> bool:
        """Whether the file ``path`` is indexed now."""
        key = os.path.abspath(os.fspath(path))
        with self._lock:
            return key in self._workspace.files

    def links_to(self, path: str | os.PathLike, below: bool = False) -> list[str]:
        return self._workspace.links_to(path, below)

    links_to.__doc__ = WorkspaceFiles.links_to.__doc__

    def index_file(self, path: str | os.PathLike) -> bool:
        return self._scans.index_file(path)

    index_file.__doc__ = WorkspaceScans.index_file.__doc__

    def remove_file(self, path: str | os.PathLike) -> None:
        self._scans.remove_file(path)

    def remove_tree(self, path: str | os.PathLike) -> int:
        return self._scans.remove_tree(path)

    remove_tree.__doc__ = WorkspaceScans.remove_tree.__doc__

    def index_workspace(self, root: str | os.PathLike, progress: Callable[[int, int], None] | None = None,
                        stop_event: threading.Event | None = None) -> dict:
        return self._scans.index_workspace(root, progress, stop_event)

    index_workspace.__doc__ = WorkspaceScans.index_workspace.__doc__

    def folder_totals(self, root: str | os.PathLike) -> dict:
        return self._scans.folder_totals(root)

    folder_totals.__doc__ = WorkspaceScans.folder_totals.__doc__

    def forget_root(self, root: str | os.PathLike, keep: Callable[[str], bool] | None = None) -> int:
        return self._scans.forget_root(root, keep)

    forget_root.__doc__ = WorkspaceScans.forget_root.__doc__

    def wait_restored(self, timeout: float | None = None) -> bool:
        return self._scans.wait_restored(timeout)

    wait_restored.__doc__ = WorkspaceScans.wait_restored.__doc__

    # ---- lookups ----------------------------------------------------------
    def propose(self, context, k: int, w: int = 1, current_uri: str | None = None) -> Draft:
        return self._lookup.propose(context, k, w, current_uri)

    propose.__doc__ = Lookup.propose.__doc__

    # ---- merging and rebuild ----------------------------------------------
    def merge(self) -> None:
        """Rebuild the static segment from all live workspace files (drops tombstones,
        absorbs the dynamic set). The sort runs outside the lock."""
        self._workspace.merge()

    def rebuild(self) -> None:
        """Rebuild every structure from its source text: buffers re-chunked and
        re-tokenized, workspace merged into a fresh static segment."""
        with self._lock:
            self._buffers.rebuild()
            self._history.cache.clear()
            self._workspace.dynamic.clear()
        self._workspace.merge()
        self._workspace.warm_dynamic()

    def _check_invariants(self) -> None:
        """Assert every incremental structure equals its rebuilt form (for tests)."""
        with self._lock:
            self._buffers.check()
            self._history.check()
            self._workspace.check()
            self._evicted.check(self._workspace.files)

    # ---- stats ------------------------------------------------------------
    def stats(self) -> dict:
        """Counts and sizes. ``index_bytes`` estimates the memory the index holds: every token
        array (static segment with its sort and per-file arrays, dynamic set, history, buffers
        with their chunk cuts and key indexes, cached scan sets) and the per-file bookkeeping
        (path strings, file records, the dict and key list holding them). Not counted: buffer
        texts (the daemon's documents hold the same strings), the bookkeeping of readers in
        flight and of evicted files waiting for room, and the interpreter's own overhead."""
        with self._lock:
            ws = self._workspace
            index_bytes = ws.nbytes + self._history.nbytes + self._buffers.nbytes
            indexed = self._bound.indexed_tokens()
            return {
                "indexed_tokens": indexed,
                "max_indexed_tokens": self.cfg.max_indexed_tokens,
                "buffers": len(self._buffers.by_uri),
                "buffer_tokens": self._buffers.tokens,
                "history_tokens": self._history.tokens,
                "workspace_files": len(ws.files),
                "workspace_tokens": ws.tokens,
                "static_tokens": ws.static_num_tokens,
                "static_dead_tokens": ws.static_dead,
                "dynamic_tokens": ws.dyn_tokens,
                "index_bytes": index_bytes,
                "bytes_per_token": index_bytes / indexed if indexed else 0.0,
                "skipped": dict(self._scans.skipped),
                "evicted_files": self._evicted.count,
                "evicted_waiting": len(self._evicted.paths),  # evicted files that come back once there is room
                "merges": ws.merges,
            }
