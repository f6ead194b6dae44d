"""TokenBound: the bound on the tokens ``store.NgramIndex`` holds, across its sources."""

from __future__ import annotations

from .buffers import History, OpenBuffers
from .config import IndexConfig
from .files import WorkspaceFiles

# After a buffer shrank, evicted files come back only into room past a reserve of the bound's
# 1/this, kept for buffers to grow into (a close or a removal gives them the whole room).
RESTORE_RESERVE_SHARE = 16


class TokenBound:
    """Keeps buffers, history and workspace files within ``max_indexed_tokens`` (lock held)."""

    def __init__(self, cfg: IndexConfig, buffers: OpenBuffers, history: History, files: WorkspaceFiles) -> None:
        self._cfg, self._buffers, self._history, self._files = cfg, buffers, history, files

    def indexed_tokens(self) -> int:
        return self._files.tokens + self._history.tokens + self._buffers.tokens

    def enforce(self) -> bool:
        """Evict least recently used workspace files (remembered: they come back once there is
        room), then the oldest history, until the bound holds (open buffers are never evicted);
        whether any was. A writer that is no file writer then calls ``WorkspaceFiles.after_write``
        too: the cached dynamic set only tombstones an evicted file, and a match found only there
        hid a shorter live one from every lookup until the next file write."""
        over = self.indexed_tokens() - self._cfg.max_indexed_tokens
        if over <= 0 or not (self._files.files or self._history.entries):
            return False
        # then the oldest accepted completions: else open buffers and history past the bound kept
        # it exceeded for good, and every file a scan installed was evicted at once
        self._history.drop_oldest(self._files.evict_lru(over))
        return True

    def restorable_room(self, reserve: bool) -> int:
        """Tokens evicted files may take now: the room left, less, with ``reserve``, a share of
        the bound kept for buffers to grow into (docs/design/index.md, "Eviction")."""
        kept = self._cfg.max_indexed_tokens // RESTORE_RESERVE_SHARE if reserve else 0
        return self._cfg.max_indexed_tokens - self.indexed_tokens() - kept
