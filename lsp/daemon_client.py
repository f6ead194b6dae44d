"""An asyncio msgpack-RPC connection to the daemon (framing: daemon/protocol/rpc.py).

One ``RpcConnection`` is one unix-socket connection. Requests carry increasing
msgids; a reader task matches each response to its future. Its connect is retried
while the daemon's listen queue is full, and refused to a server of another user
(daemon/protocol/connect.py); after that it never retries: when the socket closes,
every pending request fails with ``DaemonUnavailable`` and ``on_close`` is called;
reconnecting (and restarting the daemon) is ``daemon_link.DaemonLink``'s job.

Text from the editor may hold *lone surrogates* (JSON allows ``"\\ud800"``, UTF-8 and
so msgpack do not): such a message is sent with each one replaced by U+FFFD, which,
like the surrogate, is one code point and one UTF-16 unit (three UTF-8 bytes, as
``surrogatepass`` counts it), so every offset and position still agrees with the
editor's text. A message that cannot be encoded at all, or that is longer than the
daemon reads (``max_message_bytes``: it would close the connection, and every
reconnect would re-send the same document), fails its own future with
``DaemonError(INVALID_PARAMS)``, logged, without being written; the connection goes on.

Torch-free: the LSP imports this.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from typing import Any, Callable

from ngramd.daemon.protocol import rpc
from ngramd.daemon.protocol.connect import connect_unix_async
from ngramd.daemon.protocol.peer import ForeignPeer
from ngramd.daemon.protocol.rpc import DaemonUnavailable

log = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins valid pairs: any left is lone
REPLACEMENT = "\ufffd"


class DaemonError(Exception):
    """The daemon answered with an error ``{"code", "message"}``."""

    def __init__(self, code: int, message: str, method: str = "") -> None:
        super().__init__(f"{method}: {message} (code {code})" if method else message)
        self.code = code
        self.message = message
        self.method = method


class RpcConnection:
    """A msgpack-RPC client over one unix socket.

    Invariant: every msgid in ``_pending`` names a request written on this connection
    and not yet answered; when the connection closes, ``_pending`` is emptied and each
    future fails.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_close: Callable[["RpcConnection"], None] | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self._on_close = on_close
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._closed = False
        self.exit_announced = False  # the daemon said it is exiting because it was asked to
        self.fatal_error: str | None = None  # why the daemon is closing this connection, if it said
        self.cancelled = False  # its reading was cancelled here (the event loop ends): no daemon was lost
        self.answered = False  # the daemon answered a request on it
        # The longest message the daemon reads (its initialize answer says; until then its default).
        self.max_message_bytes = rpc.DEFAULT_MAX_MESSAGE_BYTES
        self.daemon_pid: int | None = None  # the daemon's process id, as its initialize answer says
        self._frames = rpc.FrameReader()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, path: str, on_close: Callable[["RpcConnection"], None] | None = None,
                   timeout: float = 2.0) -> "RpcConnection":
        """Connect to the socket at ``path``; raises ``DaemonUnavailable`` (``ForeignPeer``
        when another user serves it: nothing is sent). A full listen queue is tried again
        for up to ``timeout`` (daemon/protocol/connect.py)."""
        try:
            sock = await connect_unix_async(path, retry_s=timeout)
        except ForeignPeer:
            raise
        except OSError as exc:
            raise DaemonUnavailable(f"cannot connect to {path}: {exc}") from exc
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(sock=sock, limit=1 << 20), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            sock.close()
            raise DaemonUnavailable(f"cannot connect to {path}: {exc or 'timeout'}") from exc
        return cls(reader, writer, on_close)

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        """Write a request now; the returned future resolves to the result.

        Writing is synchronous (the bytes go to the transport's buffer at once), so
        requests sent from one event-loop step arrive at the daemon in that order.
        """
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(DaemonUnavailable("connection to the daemon is closed"))
            return fut
        msgid = next(self._ids)
        try:
            data = _pack(msgid, method, params if params is not None else {})
        except (TypeError, ValueError, OverflowError) as exc:
            log.error("cannot encode %s for the daemon: %s", method, exc)
            fut.set_exception(DaemonError(rpc.INVALID_PARAMS, f"cannot encode the request: {exc}", method))
            return fut
        if len(data) > self.max_message_bytes:
            why = (f"the message ({len(data):,} bytes) is longer than the daemon reads "
                   f"({self.max_message_bytes:,} bytes, `ngramd serve --max-message-bytes`)")
            log.error("%s not sent: %s", method, why)
            fut.set_exception(DaemonError(rpc.INVALID_PARAMS, why, method))
            return fut
        self._pending[msgid] = (method, fut)
        try:
            self._writer.write(data)
        except (OSError, RuntimeError) as exc:
            self._pending.pop(msgid, None)
            fut.set_exception(DaemonUnavailable(f"write failed: {exc}"))
            self.close()
        return fut

    async def request(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        """Send and wait. Raises DaemonError, DaemonUnavailable (also on timeout)."""
        fut = self.send(method, params)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError as exc:
            fut.cancel()  # a late answer is dropped by _dispatch
            raise DaemonUnavailable(f"daemon did not answer {method} within {timeout:.1f} s") from exc
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pending, self._pending = self._pending, {}
        for method, fut in pending.values():
            if not fut.done():
                fut.set_exception(DaemonUnavailable(f"connection to the daemon lost during {method}"))
                fut.exception()  # mark retrieved: nobody may be awaiting a fire-and-forget send
        try:
            self._writer.close()
        except (OSError, RuntimeError):
            pass
        if asyncio.current_task() is not self._task:
            self._task.cancel()
        if self._on_close is not None:
            self._on_close(self)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for obj in self._frames.feed(data):
                    self._dispatch(obj)
        except asyncio.CancelledError:
            self.cancelled = True
        except rpc.RpcError as exc:
            log.error("daemon sent unreadable data: %s", exc.message)
        except OSError as exc:
            log.info("daemon connection error: %s", exc)
        finally:
            self.close()

    def _dispatch(self, obj: Any) -> None:
        try:
            msg = rpc.decode(obj)
        except rpc.RpcError as exc:
            log.warning("ignoring a malformed message from the daemon: %s", exc.message)
            return
        if isinstance(msg, rpc.Notification) and msg.method == rpc.EXITING:
            self.exit_announced = True
            return
        if isinstance(msg, rpc.Notification) and msg.method == rpc.ERROR_NOTICE:
            params = msg.params if isinstance(msg.params, dict) else {}
            message = str(params.get("message") or params)
            if params.get("fatal"):
                self.fatal_error = message
                log.error("the daemon is closing the connection: %s", message)
            else:
                log.warning("the daemon reported an error: %s", message)
            return
        if not isinstance(msg, rpc.Response):
            log.debug("ignoring %s from the daemon", type(msg).__name__)
            return
        self.answered = True
        method, fut = self._pending.pop(msg.msgid, ("", None))
        if fut is None or fut.done():
            return  # timed out or cancelled meanwhile
        if msg.error is not None:
            fut.set_exception(DaemonError(msg.error["code"], msg.error["message"], method))
        else:
            fut.set_result(msg.result)


def replace_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (dict keys too) replaced by
    U+FFFD: the same length in code points and in UTF-16 units."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {replace_lone_surrogates(k): replace_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [replace_lone_surrogates(v) for v in value]
    return value


def _pack(msgid: int, method: str, params: Any) -> bytes:
    """The request's bytes; lone surrogates (only then: the common case is not walked)
    are replaced, with a warning, since the daemon's text then differs from the editor's."""
    try:
        return rpc.pack_request(msgid, method, params)
    except UnicodeEncodeError:
        log.warning("%s: text with lone surrogates (invalid UTF-16) sent to the daemon "
                    "with U+FFFD in their place", method)
        return rpc.pack_request(msgid, method, replace_lone_surrogates(params))
