"""Connecting to the daemon's socket: retried through a burst, refused to another user. Torch-free.

A burst of connects (editors starting together, scripts, ``ngramd status`` in a loop) can
fill the daemon's listen queue; a unix socket then refuses a connect with ``EAGAIN`` at
once, which is no sign that the daemon is missing. Both clients (``Client``, the CLI's;
``RpcConnection``, the LSP's) therefore connect through here: ``EAGAIN`` is tried again
with a growing, jittered pause (``CONNECT_BACKOFF_S`` doubling up to ``CONNECT_BACKOFF_MAX_S``)
for at most ``CONNECT_RETRY_S`` (or the caller's shorter timeout); any other error
(no socket, nobody listening) is raised at once, as the ``OSError`` it is. asyncio's own ``open_unix_connection``
cannot be used for the connect itself: it takes ``EAGAIN`` for a connect in progress and
returns a socket that is not connected.

Once connected, the server's uid is checked (daemon/protocol/peer.py) before a byte is
sent: ``ForeignPeer`` when another user is listening at the path.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import socket
import time
from typing import Iterator

from ngramd.daemon.protocol.peer import check_server

CONNECT_RETRY_S = 10.0
CONNECT_BACKOFF_S = 0.005
CONNECT_BACKOFF_MAX_S = 0.25
_QUEUE_FULL = (errno.EAGAIN, errno.EWOULDBLOCK)
_sleep = time.sleep  # (tests drain the queue here)
_sleep_async = asyncio.sleep


def _pauses(limit_s: float):
    """The pauses between tries, while ``limit_s`` from now has not passed."""
    deadline = time.monotonic() + limit_s
    delay = CONNECT_BACKOFF_S
    while True:
        pause = delay * random.uniform(0.5, 1.0)
        if time.monotonic() + pause > deadline:
            return
        yield pause
        delay = min(CONNECT_BACKOFF_MAX_S, delay * 2)


def _try(path: str) -> socket.socket | None:
    """A non-blocking socket connected to ``path``; None when its listen queue is full."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect(path)  # a unix socket connects at once, or refuses (never in progress)
    except OSError as exc:
        sock.close()
        if exc.errno in _QUEUE_FULL:
            return None
        raise
    return sock


def _busy(tries: int, limit_s: float) -> OSError:
    return BlockingIOError(errno.EAGAIN, f"the daemon's listen queue stayed full ({tries} tries "
                                         f"in {limit_s:.1f} s)")


def _attempts(path: str, limit_s: float) -> Iterator[float | socket.socket]:
    """Connect tries for the two callers below: yields the pause to sleep before each retry
    (the caller sleeps its own way), then the connected socket; raises when the pauses run out."""
    tries = 1
    sock = _try(path)
    pauses = _pauses(limit_s)
    while sock is None:
        pause = next(pauses, None)
        if pause is None:
            raise _busy(tries, limit_s)
        yield float(pause)
        tries += 1
        sock = _try(path)
    yield sock


def connect_unix(path: str | os.PathLike[str], timeout: float | None = None,
                 retry_s: float = CONNECT_RETRY_S) -> socket.socket:
    """A blocking socket (``timeout`` set) connected to the daemon at ``path``, its uid checked;
    raises ``ForeignPeer``, or the ``OSError`` of the last try."""
    path = os.fspath(path)
    limit = min(retry_s, timeout) if timeout is not None else retry_s
    attempts = _attempts(path, limit)
    while isinstance(step := next(attempts), float):
        _sleep(step)
    sock = step
    check_server(sock, path)
    sock.settimeout(timeout)
    return sock


async def connect_unix_async(path: str | os.PathLike[str], retry_s: float = CONNECT_RETRY_S
                             ) -> socket.socket:
    """A non-blocking socket connected to the daemon at ``path``, its uid checked."""
    path = os.fspath(path)
    attempts = _attempts(path, retry_s)
    while isinstance(step := next(attempts), float):
        await _sleep_async(step)
    sock = step
    check_server(sock, path)
    return sock
