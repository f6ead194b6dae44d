"""Jobs on a few threads: those of one key in the order submitted, one at a time, other keys'
meanwhile.

The daemon mirrors every document's open, change and close into the index, each document's in
order. On one thread for all of them, a keystroke in any document waited for a big one being
opened (5.9 s for 8M characters here); keyed by document, only that document's own updates wait
(docs/benchmarks.md at 53c478e, "Keystrokes while a big document opens").
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Hashable


class KeyedExecutor:
    def __init__(self, threads: int, thread_name_prefix: str) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=thread_name_prefix)
        self._lock = threading.Lock()
        # key -> its jobs not yet started; present while one of its jobs runs (its drain owns it)
        self._queues: dict[Hashable, deque[tuple[Callable[..., Any], tuple, Future]]] = {}
        self._shut = False

    def submit(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` after the jobs already submitted with ``key``; RuntimeError after shutdown."""
        fut: Future = Future()
        with self._lock:
            if self._shut:  # (a drain still running would take a job into a queue no one runs)
                raise RuntimeError("cannot schedule new jobs after shutdown")
            queue = self._queues.get(key)
            if queue is not None:  # its drain runs: it takes this one in turn
                queue.append((fn, args, fut))
                return fut
            self._queues[key] = deque([(fn, args, fut)])
        try:
            self._pool.submit(self._drain, key)
        except RuntimeError:  # the pool is shut (interpreter exit): this key's jobs never run
            with self._lock:
                queue = self._queues.pop(key)
            for _, _, queued in queue:
                queued.cancel()
            raise
        return fut

    def shutdown(self) -> None:
        """Cancel the jobs not started; those running finish on their own (not waited for)."""
        with self._lock:
            self._shut = True
            dropped = [fut for queue in self._queues.values() for _, _, fut in queue]
            for queue in self._queues.values():
                queue.clear()
        for fut in dropped:  # outside the lock: a cancelled future runs its callbacks now
            fut.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _drain(self, key: Hashable) -> None:
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                fn, args, fut = queue.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # the caller's to see, through its future
                fut.set_exception(exc)
