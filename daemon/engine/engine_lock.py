"""The engine's lock, with the documents closed since it was last taken.

A close must forget a document's KV caches and remembered answer before any later request on
it runs, yet the close arrives on the event loop while the model thread may hold the lock for
seconds (a prefetch, a prepare). So ``forget(key)`` only notes the key, at once and without
waiting; whoever takes the lock next forgets the noted keys first, before doing its own work.
Without this, a prepare queued after a close and reopen could find the closed document's cache
still there and reuse it, and then lose it to the close's drop running late.
"""

from __future__ import annotations

import threading
from typing import Callable


class EngineLock:
    """A context manager like ``threading.Lock``; on entry it calls ``forget_now(key)`` for
    each key noted by ``forget`` since the last entry, under the lock."""

    def __init__(self, forget_now: Callable[[str], None]) -> None:
        self._lock = threading.Lock()
        self._noted_lock = threading.Lock()  # held for a set operation only, never across work
        self._noted: set[str] = set()
        self._forget_now = forget_now

    def forget(self, key: str) -> None:
        """Note ``key`` to be forgotten by the next holder of the lock; never waits for it."""
        with self._noted_lock:
            self._noted.add(key)

    def __enter__(self) -> "EngineLock":
        self._lock.acquire()
        try:
            with self._noted_lock:
                noted, self._noted = self._noted, set()
            for key in sorted(noted):
                self._forget_now(key)
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
