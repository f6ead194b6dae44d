"""msgpack-RPC framing, as Neovim uses it. Pure and torch-free (the LSP imports it).

    request       [0, msgid, method, params]
    response      [1, msgid, error, result]      error is None or {"code", "message"}
                                                 (``decode`` guarantees an int code, a str message)
    notification  [2, method, params]

Messages are plain msgpack arrays streamed back to back on a socket; the
``FrameReader`` wraps msgpack's streaming ``Unpacker`` and bounds the size of any
one message, so a hostile or broken peer cannot make us buffer without limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Elements in one msgpack array or map: each costs tens of bytes as a Python object
# but can take one byte on the wire, so the byte limit alone bounds memory loosely.
MAX_CONTAINER_ITEMS = 1 << 20

# Error codes (JSON-RPC's numbers, so that the LSP can pass them through).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
CONTENT_MODIFIED = -32801  # stale document version

# How the daemon's INVALID_PARAMS for a uri that is not open begins (the uri follows).
# The LSP tells this refusal (re-send the document and retry) from a refused setting
# by it, so the daemon (daemon/documents.py) and the LSP must share it.
DOCUMENT_NOT_OPEN = "document not open: "


class RpcError(Exception):
    """An error that travels back to the peer as ``{"code", "message"}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class DaemonUnavailable(ConnectionError):
    """No daemon answers: cannot connect, or the connection was lost.

    Raised by both clients (daemon/client.py, lsp/daemon_client.py); the LSP's
    asynchronous client also raises it when an answer does not come in time
    (the synchronous one raises TimeoutError).
    """


class FrameTooLarge(RpcError):
    def __init__(self, limit: int) -> None:
        super().__init__(INVALID_REQUEST, f"message larger than {limit} bytes")


@dataclass(frozen=True)
class Request:
    msgid: int
    method: str
    params: Any


@dataclass(frozen=True)
class Response:
    msgid: int
    error: dict[str, Any] | None
    result: Any


@dataclass(frozen=True)
class Notification:
    method: str
    params: Any


Message = Request | Response | Notification


# The daemon's last notification to every client when it exits because it was asked to
# (`shutdown`, SIGTERM/SIGINT); a daemon that dies sends none.
EXITING = "exiting"
# The daemon's notice of an error in a message it could not answer (docs/rpc.md "Errors");
# with ``fatal: true`` it closes the connection next (bytes it cannot read past).
ERROR_NOTICE = "error"


def pack_request(msgid: int, method: str, params: Any) -> bytes:
    return msgpack.packb([REQUEST, msgid, method, params], use_bin_type=True)


def pack_response(msgid: int, error: dict[str, Any] | None, result: Any) -> bytes:
    return msgpack.packb([RESPONSE, msgid, error, result], use_bin_type=True)


def pack_notification(method: str, params: Any) -> bytes:
    return msgpack.packb([NOTIFICATION, method, params], use_bin_type=True)


def msgid_of(obj: Any) -> int | None:
    """The msgid of an unpacked request or response (valid or not), else None: where an
    error about a malformed request can be answered."""
    if not isinstance(obj, (list, tuple)) or len(obj) < 2 or type(obj[0]) is not int:  # False == 0 ...
        return None
    msgid = obj[1]
    # ... but False is not REQUEST, nor is True a msgid
    return msgid if obj[0] in (REQUEST, RESPONSE) and type(msgid) is int and -2**63 <= msgid < 2**64 else None


def decode(obj: Any) -> Message:
    """Validate one unpacked object as a message; raises RpcError(INVALID_REQUEST)."""
    if not isinstance(obj, (list, tuple)) or not obj:
        raise RpcError(INVALID_REQUEST, "a message is a non-empty msgpack array")
    kind = obj[0] if type(obj[0]) is int else None
    msgid = msgid_of(obj)
    if kind == REQUEST and len(obj) == 4 and msgid is not None and isinstance(obj[2], str):
        return Request(msgid, obj[2], obj[3])
    if kind == RESPONSE and len(obj) == 4 and msgid is not None:
        return Response(msgid, _wire_error(obj[2]), obj[3])
    if kind == NOTIFICATION and len(obj) == 3 and isinstance(obj[1], str):
        return Notification(obj[1], obj[2])
    raise RpcError(INVALID_REQUEST, f"not a msgpack-RPC message: {str(obj)[:80]}")


def _wire_error(error: Any) -> dict[str, Any] | None:
    """A response's error as ``{"code": int, "message": str}`` (other keys kept), whatever the peer sent."""
    if error is None:
        return None
    if not isinstance(error, dict):
        return {"code": INTERNAL_ERROR, "message": str(error)}
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = INTERNAL_ERROR
    return {**error, "code": code, "message": str(error.get("message", error))}


class FrameReader:
    """Feed bytes in, get decoded objects out. Bounds each message's size.

    Invariant: no message longer than ``max_message_bytes`` is returned, however it
    is split into chunks; past that many bytes of one message ``feed`` raises
    FrameTooLarge and the connection should be closed.
    """

    # Bytes handed to the Unpacker at a time: its buffer then holds at most the message in
    # progress (bounded by the count below) and one piece. A buffer bound of the message
    # limit alone refused a message just under it whose bytes came with the next one's.
    FEED_PIECE = 64 * 1024

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self._limit = max_message_bytes
        # The Unpacker drops bytes it has parsed, so its buffer bound alone lets a big
        # message through in chunks: we also count the bytes of the message in progress.
        container_limit = min(max_message_bytes, MAX_CONTAINER_ITEMS)
        self._unpacker = msgpack.Unpacker(
            raw=False,
            max_buffer_size=max_message_bytes + self.FEED_PIECE,
            max_array_len=container_limit,
            max_map_len=container_limit,
            strict_map_key=False,
        )
        self._fed = 0  # bytes fed so far
        self._message_start = 0  # stream offset where the message in progress began

    def feed(self, data: bytes) -> list[Any]:
        """Return every complete object now available (raw, not yet ``decode``d).

        Raises FrameTooLarge for an oversized message and RpcError(PARSE_ERROR)
        for bytes that are not msgpack; either way the stream cannot be resynced.
        """
        if len(data) <= self.FEED_PIECE:
            return self._feed_piece(data)
        view = memoryview(data)
        out: list[Any] = []
        for i in range(0, len(data), self.FEED_PIECE):
            out.extend(self._feed_piece(view[i: i + self.FEED_PIECE]))
        return out

    def _feed_piece(self, data: bytes | memoryview) -> list[Any]:
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull as exc:
            raise FrameTooLarge(self._limit) from exc
        self._fed += len(data)
        out: list[Any] = []
        try:
            for obj in self._unpacker:
                end = self._unpacker.tell()
                if end - self._message_start > self._limit:
                    raise FrameTooLarge(self._limit)
                self._message_start = end
                out.append(obj)
            if self._fed - self._message_start > self._limit:  # the message in progress
                raise FrameTooLarge(self._limit)
        except msgpack.BufferFull as exc:
            raise FrameTooLarge(self._limit) from exc
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError,
                TypeError) as exc:  # TypeError: a map key that is an array or a map (unhashable)
            raise RpcError(PARSE_ERROR, f"malformed msgpack: {str(exc) or type(exc).__name__}") from exc
        return out
