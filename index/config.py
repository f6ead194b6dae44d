"""IndexConfig: the n-gram index's settings (``store.NgramIndex`` takes one)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexConfig:
    min_n: int = 2  # shortest context suffix that may produce a draft
    max_match: int = 32  # longest suffix compared (also the static segment's sort depth)
    max_indexed_tokens: int = 8_000_000  # bound on live tokens; LRU workspace files go first, then old history
    max_file_bytes: int = 1 << 20  # larger workspace files are skipped
    max_history_tokens: int = 65_536  # oldest accepted completions are dropped past this
    merge_tokens: int = 65_536  # dynamic-set (or tombstoned) tokens that trigger a merge
    max_candidates: int = 256  # static occurrences ranked per lookup (evenly sampled beyond)
    batch_files: int = 64  # files tokenized per batch while indexing a workspace
    # Buffers and scanned sets of at least this many tokens are looked up through a
    # sorted key index (keyed.KeyIndex) instead of a full scan; 10**9: always scan.
    keyed_min_tokens: int = 2048
    # Files evicted for lack of room are read back on a thread of their own (index/background.py),
    # not the caller's: the daemon sets it, so that its threads mirroring documents never wait on the disk.
    restore_in_background: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_match:
            raise ValueError(f"need 1 <= min_n <= max_match, got {self.min_n}, {self.max_match}")
        for name in ("max_indexed_tokens", "max_file_bytes", "max_history_tokens", "merge_tokens",
                     "max_candidates", "batch_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"IndexConfig.{name} must be >= 1")
        if self.keyed_min_tokens < 0:
            raise ValueError("IndexConfig.keyed_min_tokens must be >= 0")

