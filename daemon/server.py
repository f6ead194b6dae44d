"""The asyncio unix-socket server: framing, per-connection tasks, error replies.

Each connection reads bytes into a ``FrameReader`` (bounded message size) and
starts one task per request, in arrival order, so that a ``cancel`` or
``status`` is answered while a ``complete`` waits for the model. At most
``MAX_IN_FLIGHT`` tasks per connection: past that the connection is not read
until one finishes (its answer sent), so a client that pipelines requests and
never reads the answers holds bounded memory.

Errors, and where they go:
- a request that fails (unknown method, bad params, stale version, cancelled)
  gets ``[1, msgid, {code, message}, null]``;
- a well-formed msgpack object that is not a valid message gets an error
  response if it carries an integer msgid, else an ``[2, "error", {code, message}]``
  notification; the connection stays open;
- a failing *notification* is answered by an ``error`` notification as well;
- bytes that are not msgpack, or a message over the size limit, leave the stream
  unsynchronisable: an ``error`` notification is sent and the connection is
  closed. The daemon itself keeps serving every other client.

End of input: a client that closed its socket has its requests cancelled. One that only
shut its write side (``shutdown(SHUT_WR)``, as ``socat`` and ``nc -N`` do) still reads:
it gets the answer to every request received (a truncated last message is dropped),
and the ``exiting`` notice if the daemon stops meanwhile, then the connection closes.

Security: only ``AF_UNIX``; the socket is created under umask 0o177 (so it is
never briefly world-accessible) and then chmod 0600.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import signal
from pathlib import Path
from typing import Any, Callable

from daemon.paths import is_socket
from daemon.rpc import (
    DEFAULT_MAX_MESSAGE_BYTES, ERROR_NOTICE, EXITING, INTERNAL_ERROR, Notification, Request, Response,
    RpcError, decode, msgid_of, pack_notification, pack_response, FrameReader,
)

log = logging.getLogger("ngramd.server")
READ_CHUNK = 64 * 1024
# at shutdown, requests in flight get this long to send their "cancelled" answers
SHUTDOWN_GRACE_S = 2.0
# requests of one connection being handled or waiting to send their answer; past this the
# connection is not read until some finish (a client that never reads cannot pile up tasks)
MAX_IN_FLIGHT = 64
# how often a half-closed connection waiting for its answers is checked for a full close
# (asyncio no longer watches a socket once it has read its end of input)
HANGUP_POLL_S = 0.1
_conn_ids = itertools.count(1)


class Connection:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.id = next(_conn_ids)
        self.writer = writer
        self.tasks: set[asyncio.Task] = set()
        self._lock = asyncio.Lock()
        self.closed = False

    async def send(self, data: bytes) -> None:
        if self.closed or self.writer.is_closing():
            self.closed = True  # the peer left; its replies have nowhere to go
            return
        async with self._lock:
            # again: the peer may have left while this reply waited for the lock (with many
            # replies waiting, each write to the dead socket was logged by asyncio)
            if self.closed or self.writer.is_closing():
                self.closed = True
                return
            try:
                self.writer.write(data)
                await self.writer.drain()
            except (ConnectionError, OSError, RuntimeError):
                self.closed = True  # the peer left; its replies have nowhere to go

    async def send_error_notification(self, err: RpcError, **extra: Any) -> None:
        await self.send(pack_notification(ERROR_NOTICE, {**err.to_wire(), **extra}))


class Server:
    """Serve ``service`` (a daemon.service.Service) on ``socket_path``."""

    def __init__(self, service: Any, socket_path: Path,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.service = service
        self.socket_path = socket_path
        self.max_message_bytes = max_message_bytes
        self.max_in_flight = MAX_IN_FLIGHT
        self.connections: dict[int, Connection] = {}
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path),
                                                           limit=READ_CHUNK)
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)

    async def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Start, call ``on_ready``, serve until ``shutdown`` or SIGTERM/SIGINT."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self.service.shutdown_requested = stop
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        await self.start()
        if on_ready is not None:
            on_ready()
        await stop.wait()
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Requests in flight are answered (cancelled, "shutdown") rather than cut off: queued
        # ones at once, a running one at its next forward pass.
        cancel_all = getattr(self.service, "cancel_all", None)
        if callable(cancel_all):
            cancel_all("shutdown")
        pending = [t for conn in self.connections.values() for t in conn.tasks
                   if t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
        # Tell every client that this exit was asked for (shutdown, SIGTERM/SIGINT): an editor
        # then waits for its next request to start a daemon, where a crash (no notice) gets one
        # started again at once.
        notice = pack_notification(EXITING, {"reason": "shutdown"})
        sends = [asyncio.ensure_future(conn.send(notice)) for conn in list(self.connections.values())]
        if sends:  # bounded: a client that reads nothing cannot hold the exit up
            await asyncio.wait(sends, timeout=SHUTDOWN_GRACE_S)
        for conn in list(self.connections.values()):
            conn.closed = True
            conn.writer.close()
        if is_socket(self.socket_path):  # never a file someone put there meanwhile
            try:
                self.socket_path.unlink()
            except OSError:
                pass
        # the worker and watcher threads stop in service.close(), off the loop
        await asyncio.get_running_loop().run_in_executor(None, self.service.close)

    # -- one connection -------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(writer)
        self.connections[conn.id] = conn
        self.service.client_connected(conn.id)
        frames = FrameReader(self.max_message_bytes)
        try:
            while not conn.closed:
                data = await reader.read(READ_CHUNK)
                if not data:
                    if not _peer_hung_up(writer):  # only its write side is shut: it still reads
                        await self._answer_half_closed(conn)
                    break
                try:
                    objs = frames.feed(data)
                except RpcError as exc:  # not msgpack, or too big: cannot resync
                    self._count_error(exc.code)
                    await conn.send_error_notification(exc, fatal=True)
                    break
                for obj in objs:
                    if not await self._wait_for_room(conn):
                        conn.closed = True  # it left while its requests filled its share: release them
                        break
                    await self._on_message(conn, obj)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must cost one connection, never the daemon
            log.exception("connection %s failed", conn.id)
        finally:
            conn.closed = True
            self.connections.pop(conn.id, None)
            self.service.client_gone(conn.id)
            try:
                writer.close()
            except Exception:
                pass

    async def _answer_half_closed(self, conn: Connection) -> None:
        """Wait until every request ``conn`` sent is answered; if the daemon is exiting, until
        ``close`` has sent it the ``exiting`` notice and closed it. Returns early when the
        client closes its socket meanwhile (its requests are then cancelled, as at a close)."""
        while conn.tasks and not conn.closed:
            await asyncio.wait(set(conn.tasks), timeout=HANGUP_POLL_S)
            if _peer_hung_up(conn.writer):
                return
        # a `shutdown` request sets the event before its answer is written, so it is seen here
        stop = self.service.shutdown_requested  # the event ``run`` waits on
        if stop is not None and stop.is_set() and not conn.closed:
            await conn.writer.wait_closed()

    async def _wait_for_room(self, conn: Connection) -> bool:
        """Back-pressure: hold off reading while ``max_in_flight`` requests are pending. False
        when the client closed its socket meanwhile: nothing reads it now, so nothing else
        would notice, and its requests would run on for nobody."""
        while len(conn.tasks) >= self.max_in_flight:
            await asyncio.wait(set(conn.tasks), timeout=HANGUP_POLL_S, return_when=asyncio.FIRST_COMPLETED)
            if _peer_hung_up(conn.writer):
                return False
        return True

    async def _on_message(self, conn: Connection, obj: Any) -> None:
        try:
            msg = decode(obj)
        except RpcError as exc:
            self._count_error(exc.code)
            msgid = msgid_of(obj)
            if msgid is not None:
                await conn.send(pack_response(msgid, exc.to_wire(), None))
            else:
                await conn.send_error_notification(exc)
            return
        if isinstance(msg, Response):
            return  # the daemon sends no requests, so there is nothing to match
        task = asyncio.create_task(self._run(conn, msg))
        conn.tasks.add(task)
        task.add_done_callback(conn.tasks.discard)
        await asyncio.sleep(0)  # let the handler do its synchronous part in arrival order

    async def _run(self, conn: Connection, msg: Request | Notification) -> None:
        try:
            result = await self.service.dispatch(conn.id, msg.method, msg.params)
            error = None
        except RpcError as exc:
            result, error = None, exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug: report it, keep serving
            log.exception("%s failed", msg.method)
            result, error = None, RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        if error is not None:
            self._count_error(error.code)
        if isinstance(msg, Request):
            try:
                data = pack_response(msg.msgid, error.to_wire() if error else None, result)
            except (TypeError, ValueError, OverflowError) as exc:
                data = pack_response(msg.msgid, RpcError(INTERNAL_ERROR, f"unpackable result: {exc}")
                                     .to_wire(), None)
            await conn.send(data)
        elif error is not None:
            await conn.send_error_notification(error, method=msg.method[:100])

    def _count_error(self, code: int) -> None:
        self.service.errors[code] += 1


def _peer_hung_up(writer: asyncio.StreamWriter) -> bool:
    """True when the client closed its socket, not just shut its write side (both read as end
    of input). Linux reports POLLHUP only for the former; where it is not reported this says
    False, and the answers of a client that left are dropped when written."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(select, "poll"):
        return False
    fd = sock.fileno()
    if fd < 0:  # the transport closed it
        return True
    poller = select.poll()
    poller.register(fd, 0)  # no events asked for: hang-up and error are reported anyway
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))
