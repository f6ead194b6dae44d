"""Files evicted for lack of room, remembered so that they come back once there is room.

A part of ``store.NgramIndex``; "lock held" means the caller holds the index's lock. Without it,
one big open buffer emptied the workspace for good (docs/design/index.md, "Eviction").
"""

from __future__ import annotations

import sys

# Past this many remembered files, the longest evicted are forgotten (a rescan of their folder
# finds them again).
MAX_EVICTED_REMEMBERED = 50_000


class EvictedFiles:
    """key -> (tokens, LRU clock) at eviction, in eviction order."""

    def __init__(self, batch_files: int) -> None:
        self._batch_files = batch_files
        self.paths: dict[str, tuple[int, int]] = {}
        self.min_tokens = sys.maxsize  # at most the fewest tokens of any of them (none fits in less room)
        self.count = 0  # files evicted so far (stats()["evicted_files"])

    def remember(self, key: str, n_tokens: int, used: int) -> None:
        """``key`` was evicted (lock held): it comes back with its place in the LRU order."""
        self.count += 1
        self.paths[key] = (n_tokens, used)
        self.min_tokens = min(self.min_tokens, n_tokens)
        if len(self.paths) > MAX_EVICTED_REMEMBERED:
            del self.paths[next(iter(self.paths))]  # the longest evicted

    def forget(self, key: str) -> None:
        """Indexed again or removed: nothing to bring back (lock held)."""
        self.paths.pop(key, None)

    def regrew(self, key: str, n_tokens: int) -> None:
        """``key`` was read back with ``n_tokens``, more than the room: it waits for more (lock held)."""
        self.paths[key] = (n_tokens, self.paths[key][1])
        self.min_tokens = min(self.min_tokens, n_tokens)  # (it may have shrunk)

    def under(self, prefix: str) -> list[str]:
        """The evicted files under the folder ``prefix`` (lock held)."""
        return [k for k in self.paths if k.startswith(prefix)]

    def take_under(self, prefix: str) -> dict[str, tuple[int, int]]:
        """Forget the evicted files under ``prefix`` and return them (lock held)."""
        return {k: self.paths.pop(k) for k in self.under(prefix)}

    def put_back(self, back: dict[str, tuple[int, int]]) -> None:
        """Remember ``back`` again, before those evicted since (lock held)."""
        self.paths = {**back, **self.paths}

    def that_fit(self, tried: set[str], room: int) -> list[str]:
        """Evicted files not yet ``tried`` whose tokens fit in ``room``, the most recently evicted
        (the most recently used) first, one batch at most (lock held). Adds them to ``tried``."""
        if room <= 0 or room < self.min_tokens:  # no walk over them all at each keystroke in a big buffer
            return []
        batch: list[str] = []
        smallest = None
        for key, (n_tokens, _) in reversed(self.paths.items()):
            if len(batch) >= self._batch_files:
                break
            if key in tried:
                continue
            if n_tokens <= room:
                batch.append(key)
                room -= n_tokens
            elif smallest is None or n_tokens < smallest:
                smallest = n_tokens
        if not batch and not tried and smallest is not None:  # each one is larger than the room
            self.min_tokens = smallest
        tried.update(batch)
        return batch

    def check(self, indexed: dict) -> None:
        assert not indexed.keys() & self.paths.keys()  # an evicted file is not indexed
        assert all(n >= self.min_tokens for n, _ in self.paths.values())
