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
  closed. The daemon itself keeps serving every other client;
- a large message while other connections' messages take the decode budget (all connections
  together, daemon/protocol/decode_budget.py) waits, unread; after ``DECODE_WAIT_S``, or
  when it would wait for a connection that waits for it, it is refused as well (``busy``).

End of input: a client that closed its socket has its requests cancelled. One that only
shut its write side (``shutdown(SHUT_WR)``, as ``socat`` and ``nc -N`` do) still reads:
it gets the answer to every request received (a truncated last message is dropped),
and the ``exiting`` notice if the daemon stops meanwhile, then the connection closes.

Security: only ``AF_UNIX``; the socket is created under umask 0o177 (so it is
never briefly world-accessible) and then chmod 0600; a connection from another uid
(``SO_PEERCRED``, daemon/protocol/peer.py) is closed unanswered. The listen backlog is
``LISTEN_BACKLOG``, so that a burst of connects queues rather than being refused.

The socket file: every ``socket_check_s`` the server checks that its path still names the
socket it bound. Removed (a tmp cleaner, a wiped runtime dir), it is bound again at the same
path, the lock taken again first where it went too (daemon/protocol/paths.py), so the daemon keeps
its model and documents; connections already open go on. When that fails, or something else
is at the path (never removed or bound over), the daemon exits as on ``shutdown``, with the
``exiting`` reason ``socket lost``: left running it could be reached by no one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import signal
import socket
import stat
from pathlib import Path
from typing import Any, Callable

from ngramd.daemon.protocol.decode_budget import DecodeBudget
from ngramd.daemon.protocol.paths import AlreadyRunning, prepare_socket_dir
from ngramd.daemon.protocol.peer import foreign_peer
from ngramd.daemon.protocol.rpc import (
    DEFAULT_MAX_MESSAGE_BYTES, ERROR_NOTICE, EXITING, INTERNAL_ERROR, Notification, Request, Response,
    RpcError, decode, msgid_of, pack_notification, pack_response, FrameReader,
)
from ngramd.daemon.protocol.rpc import MAX_MESSAGE_OBJECTS

log = logging.getLogger("ngramd.server")
READ_CHUNK = 64 * 1024
# connects queued before the loop accepts them (asyncio's default is 100: a burst of editors,
# scripts and `ngramd status` refused the rest; the kernel caps it at net.core.somaxconn)
LISTEN_BACKLOG = 4096
# at shutdown, requests in flight get this long to send their "cancelled" answers
SHUTDOWN_GRACE_S = 2.0
# at shutdown, a connection gets this long to send what it still holds (the ``exiting`` notice
# last) before it is cut off
CLOSE_GRACE_S = 0.5
# at shutdown, once every connection is closed, its reader gets this long to end (it notices
# within HANGUP_POLL_S)
READERS_GRACE_S = 1.0
# requests of one connection being handled or waiting to send their answer; past this the
# connection is not read until some finish (a client that never reads cannot pile up tasks)
MAX_IN_FLIGHT = 64
# how often a half-closed connection waiting for its answers is checked for a full close
# (asyncio no longer watches a socket once it has read its end of input)
HANGUP_POLL_S = 0.1
# how often ``run`` checks that its socket file is still there (see the module docstring)
SOCKET_CHECK_S = 2.0
SOCKET_LOST = "socket lost"  # the ``exiting`` reason when the daemon exits for it
_conn_ids = itertools.count(1)


class Connection:
    def __init__(self, writer: asyncio.StreamWriter, reader_task: asyncio.Task) -> None:
        self.id = next(_conn_ids)
        self.writer = writer
        self.reader_task = reader_task  # the task that reads it (Server._handle)
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
    """Serve ``service`` (a ngramd.daemon.service.methods.Service) on ``socket_path``; ``lock`` (a
    ngramd.daemon.protocol.paths.SocketLock, None in tests) is taken again if its file is removed."""

    def __init__(self, service: Any, socket_path: Path,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, lock: Any = None,
                 decode_budget_bytes: int | None = None,
                 socket_check_s: float = SOCKET_CHECK_S) -> None:
        self.service = service
        self.socket_path = socket_path
        self.max_message_bytes = max_message_bytes
        # the messages in progress on all connections together (daemon/protocol/decode_budget.py):
        # by default one message's worth
        self.decode_budget = DecodeBudget(decode_budget_bytes or max_message_bytes, MAX_MESSAGE_OBJECTS)
        self.max_in_flight = MAX_IN_FLIGHT
        self.lock = lock
        self.socket_check_s = socket_check_s
        self.exit_reason = "shutdown"
        self.connections: dict[int, Connection] = {}
        self._server: asyncio.AbstractServer | None = None
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file we made
        self._stop: asyncio.Event | None = None  # set by ``run``

    async def start(self) -> None:
        self._server = await self._listen()

    async def _listen(self) -> asyncio.AbstractServer:
        """Bind a socket at the path and serve it. Our own bind, not asyncio's: that one removes
        a socket file already there, where this fails (EADDRINUSE) and leaves it alone."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(str(self.socket_path))
            finally:
                os.umask(old)
            st = os.lstat(self.socket_path)
            self._bound = (st.st_dev, st.st_ino)
            os.chmod(self.socket_path, 0o600)
            return await asyncio.start_unix_server(self._handle, sock=sock, limit=READ_CHUNK,
                                                   backlog=LISTEN_BACKLOG)
        except BaseException:
            sock.close()
            self._unlink_socket()
            raise

    def _socket_state(self) -> str:
        """"ours" (the path names the socket we bound), "absent" or "other"."""
        try:
            st = os.lstat(self.socket_path)
        except (FileNotFoundError, NotADirectoryError):
            return "absent"
        except OSError:  # cannot tell (a folder made unreadable): leave things as they are
            return "ours"
        ours = stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self._bound
        return "ours" if ours else "other"

    def _unlink_socket(self) -> None:
        """Remove our socket file, never a file someone put at the path since."""
        if self._bound is not None and self._socket_state() == "ours":
            try:
                self.socket_path.unlink()
            except OSError:
                pass

    async def check_socket(self) -> bool:
        """One check of the socket file (``run`` makes one every ``socket_check_s``): bind it
        again when it is gone; when that fails, or something else is there, the daemon exits
        (False). See the module docstring."""
        state = self._socket_state()
        if state == "ours":
            return True
        why = "something else is at its path" if state == "other" else await self._bind_again()
        if why is None:
            log.warning("socket %s was removed: bound it again", self.socket_path)
            return True
        log.warning("socket %s was removed and %s: exiting", self.socket_path, why)
        self.exit_reason = SOCKET_LOST
        if self._stop is not None:
            self._stop.set()
        return False

    async def _bind_again(self) -> str | None:
        """Take the path again (its folder, the lock, the socket); None once done, else why not."""
        if self._server is not None:
            # nobody can reach it now (its connections stay open); closed before the new bind,
            # as Python 3.13+ then removes the file at its path when it has the old inode number
            self._server.close()
            self._server = None
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._reclaim)
            self._server = await self._listen()
        except AlreadyRunning as exc:
            return f"another daemon took it ({exc})"
        except OSError as exc:
            return f"cannot be bound again ({exc})"
        return None

    def _reclaim(self) -> None:
        """The socket's folder and lock as ``serve`` made them (off the loop: the lock may wait
        out a probe)."""
        prepare_socket_dir(self.socket_path)
        if self.lock is not None:
            self.lock.reacquire()

    async def _keep_socket(self) -> None:
        while True:
            await asyncio.sleep(self.socket_check_s)
            try:
                if not await self.check_socket():
                    return
            except Exception:  # a bug here must not end the checks (nor the daemon)
                log.exception("checking socket %s failed", self.socket_path)

    async def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Start, call ``on_ready``, serve until ``shutdown`` or SIGTERM/SIGINT."""
        loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        self.service.shutdown_requested = stop
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass
        await self.start()
        if on_ready is not None:
            on_ready()
        keeper = asyncio.create_task(self._keep_socket())
        try:
            await stop.wait()
        finally:
            keeper.cancel()
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
        notice = pack_notification(EXITING, {"reason": self.exit_reason})
        sends = [asyncio.ensure_future(conn.send(notice)) for conn in list(self.connections.values())]
        if sends:  # bounded: a client that reads nothing cannot hold the exit up
            await asyncio.wait(sends, timeout=SHUTDOWN_GRACE_S)
        await self._close_connections()
        self._unlink_socket()
        # the worker and watcher threads stop in service.close(), off the loop
        await asyncio.get_running_loop().run_in_executor(None, self.service.close)

    async def _close_connections(self) -> None:
        """Close every connection and wait (bounded) for its reader to end: one left running
        would be cancelled by the loop's shutdown, which asyncio logs with a traceback.

        Each gets CLOSE_GRACE_S to send what it holds: ``drain`` returns below the high-water
        mark, not once all is sent, and a client that reads would lose the ``exiting`` notice
        (and take the exit for a crash). One still not sent by then is aborted: a client that
        reads nothing would hold it (and its reader) open for ever."""
        conns = list(self.connections.values())
        if not conns:
            return
        for conn in conns:
            conn.closed = True
            conn.writer.close()
        closing = {asyncio.ensure_future(_closed(conn.writer)): conn for conn in conns}
        _, unsent = await asyncio.wait(closing, timeout=CLOSE_GRACE_S)
        for task in unsent:
            closing[task].writer.transport.abort()
        await asyncio.wait([conn.reader_task for conn in conns], timeout=READERS_GRACE_S)

    # -- one connection -------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        foreign = foreign_peer(writer.get_extra_info("socket"))
        if foreign is not None:  # another user reached the socket (a leaked path): not a byte to it
            log.warning("refused a connection from uid %d: this daemon serves uid %d only",
                        foreign, os.getuid())
            writer.close()
            return
        conn = Connection(writer, asyncio.current_task())
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
                    await self.decode_budget.reserve(conn.id, frames.pending_bytes + len(data),
                                                     frames.pending_objects)
                    objs = frames.feed(data)
                    self.decode_budget.settle(conn.id, frames.pending_bytes, frames.pending_objects)
                except RpcError as exc:  # not msgpack, too big, or no room to decode it: cannot resync
                    self._count_error(exc.code)
                    await conn.send_error_notification(exc, fatal=True)
                    break
                for obj in objs:
                    if not await self._wait_for_room(conn):
                        conn.closed = True  # it left while its requests filled its share: release them
                    if conn.closed:  # or ``close`` closed it: the rest of the chunk would run for no one
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
            self.decode_budget.release(conn.id)
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
        when the client closed its socket meanwhile (nothing reads it now, so nothing else
        would notice, and its requests would run on for nobody), or the daemon did (``close``)."""
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


async def _closed(writer: asyncio.StreamWriter) -> None:
    """``writer.wait_closed()``, without its error (the peer left before all was sent)."""
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


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
