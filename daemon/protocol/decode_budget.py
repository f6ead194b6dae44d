"""One budget for the messages being decoded on all connections together.

``FrameReader`` bounds one message (bytes and objects), but every connection may have one in
progress: a 66 MB message of short strings in open arrays took 1.5 GB to decode, two at once
took 3 GB more (issue 33). The server asks this budget before it feeds a connection's bytes to
its FrameReader (``reserve``) and tells it what the message in progress holds after
(``settle``); past the budget the connection is not read (back-pressure) until others' messages
complete, for at most ``wait_s``, then it is refused (``RpcError``: the server sends a fatal
error notice and closes it).

- Each connection's first ``free_bytes`` of a message in progress are not counted: small
  messages, nearly all of them, never wait.
- A connection alone holding the budget always goes on (its message is bounded by the
  FrameReader): the budget never refuses a message that fits the per-message limits alone.
- Two connections that each hold part of the budget and both wait would wait for each other:
  the one that starts waiting last is refused at once (its share freed, the other goes on).

Single-threaded: every call comes from the server's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Hashable

from ngramd.daemon.protocol.rpc import INTERNAL_ERROR, RpcError

DECODE_WAIT_S = 10.0  # how long a connection waits for the budget before it is refused
FREE_BYTES = 64 * 1024  # bytes of each connection's message in progress that are not counted


class DecodeBudget:
    def __init__(self, max_bytes: int, max_objects: int, wait_s: float = DECODE_WAIT_S,
                 free_bytes: int = FREE_BYTES) -> None:
        self.max_bytes, self.max_objects = max_bytes, max_objects
        self.wait_s, self.free_bytes = wait_s, free_bytes
        self.bytes = 0  # counted bytes held, all connections
        self.objects = 0
        self._held: dict[Hashable, tuple[int, int]] = {}  # key -> (counted bytes, objects)
        self._waiting: dict[Hashable, tuple[int, int]] = {}  # key -> what it waits to hold
        self._wakers: list[asyncio.Future] = []
        self.counts = {"waited": 0, "refused": 0, "peak_bytes": 0, "peak_objects": 0}

    def figures(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "objects": self.objects, "max_bytes": self.max_bytes,
                "max_objects": self.max_objects, "waiting": len(self._waiting), **self.counts}

    async def reserve(self, key: Hashable, nbytes: int, objects: int) -> None:
        """Hold ``nbytes`` (its message in progress with the bytes about to be fed) and
        ``objects`` for ``key``; waits while other connections hold the budget, raises RpcError
        when refused (see the module docstring)."""
        counted = max(0, nbytes - self.free_bytes)
        if not self._fits(key, counted, objects):
            self.counts["waited"] += 1
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.wait_s
            self._waiting[key] = (counted, objects)
            try:
                while not self._fits(key, counted, objects):
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self._deadlocked(key):
                        self.counts["refused"] += 1
                        self.release(key)
                        raise RpcError(INTERNAL_ERROR, f"busy: other connections' messages hold the decode "
                                                       f"budget ({self.max_bytes} bytes); send it again later")
                    waker = loop.create_future()
                    self._wakers.append(waker)
                    try:
                        await asyncio.wait_for(waker, remaining)
                    except asyncio.TimeoutError:
                        pass
                    finally:
                        if waker in self._wakers:
                            self._wakers.remove(waker)
            finally:
                self._waiting.pop(key, None)
                self._wake()  # a waiter that saw this one waiting may find no deadlock now
        self._set(key, counted, objects)

    def settle(self, key: Hashable, nbytes: int, objects: int) -> None:
        """What ``key``'s message in progress holds now (after a feed; 0, 0 between messages)."""
        self._set(key, max(0, nbytes - self.free_bytes), objects)

    def release(self, key: Hashable) -> None:
        """``key`` holds nothing any more (its connection closed)."""
        self._set(key, 0, 0)
        self._held.pop(key, None)

    def _deadlocked(self, key: Hashable) -> bool:
        """Whether every other connection that holds part of the budget waits too, none of them
        able to go on: nobody would free any of it."""
        others = [k for k, held in self._held.items() if k != key and held != (0, 0)]
        return bool(others) and all(k in self._waiting and not self._fits(k, *self._waiting[k]) for k in others)

    def _fits(self, key: Hashable, counted: int, objects: int) -> bool:
        b, o = self._held.get(key, (0, 0))
        others_bytes, others_objects = self.bytes - b, self.objects - o
        if (not others_bytes and not others_objects) or (counted <= b and objects <= o):
            return True  # alone (its FrameReader bounds it), or holding no more than it has
        return others_bytes + counted <= self.max_bytes and others_objects + objects <= self.max_objects

    def _set(self, key: Hashable, counted: int, objects: int) -> None:
        b, o = self._held.get(key, (0, 0))
        self._held[key] = (counted, objects)
        self.bytes += counted - b
        self.objects += objects - o
        self.counts["peak_bytes"] = max(self.counts["peak_bytes"], self.bytes)
        self.counts["peak_objects"] = max(self.counts["peak_objects"], self.objects)
        if counted < b or objects < o:
            self._wake()

    def _wake(self) -> None:
        wakers, self._wakers = self._wakers, []
        for waker in wakers:
            if not waker.done():
                waker.set_result(None)
