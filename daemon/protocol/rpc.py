"""msgpack-RPC framing, as Neovim uses it. Pure and torch-free (the LSP imports it).

    request       [0, msgid, method, params]
    response      [1, msgid, error, result]      error is None or {"code", "message"}
                                                 (``decode`` guarantees an int code, a str message)
    notification  [2, method, params]

Messages are plain msgpack arrays streamed back to back on a socket; the
``FrameReader`` wraps msgpack's streaming ``Unpacker`` and bounds the size of any
one message, in bytes and in objects, so a hostile or broken peer cannot make us
buffer or build without limit.
"""

from __future__ import annotations

import itertools
import reprlib
from dataclasses import dataclass
from typing import Any

import msgpack

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_DOCUMENT_CHARS = 8 << 20  # a longer document is refused (initialize says the figure)
# Elements in one msgpack array or map: each costs tens of bytes as a Python object
# but can take one byte on the wire, so the byte limit alone bounds memory loosely.
MAX_CONTAINER_ITEMS = 1 << 20
# Objects in one message: each array and map, and its items (a map entry is two). An empty
# map is one byte on the wire and ~70 as a Python object: 66 MB of them took the daemon 5 GB.
# Counted as each container completes (msgpack's hooks), so the scalars of arrays still open
# are not: short strings in nested open arrays took 23x their bytes (docs/rpc.md).
MAX_MESSAGE_OBJECTS = 1 << 21

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
# by it, so the daemon (daemon/service/documents.py) and the LSP must share it.
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

    Raised by both clients (daemon/protocol/client.py, lsp/daemon_client.py); the LSP's
    asynchronous client also raises it when an answer does not come in time
    (the synchronous one raises TimeoutError).
    """


class FrameTooLarge(RpcError):
    def __init__(self, limit: int, unit: str = "bytes") -> None:
        super().__init__(INVALID_REQUEST, f"message larger than {limit} {unit}")


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
    raise RpcError(INVALID_REQUEST, f"not a msgpack-RPC message: {_glimpse(obj)}")


def _wire_error(error: Any) -> dict[str, Any] | None:
    """A response's error as ``{"code": int, "message": str}`` (other keys kept), whatever the peer sent."""
    if error is None:
        return None
    if not isinstance(error, dict):
        return {"code": INTERNAL_ERROR, "message": _as_text(error)}
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = INTERNAL_ERROR
    return {**error, "code": code, "message": _as_text(error.get("message", error))}


class _Glimpse(reprlib.Repr):
    """The start of an object's repr, built from a few of its items only: rendering a whole
    64 MiB message to keep 80 characters of it held the daemon's loop for 5 s. reprlib cuts
    containers and strings before rendering them, but renders bytes and ExtType whole."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxstring = 3, 6, 4, 40

    def repr_bytes(self, x: bytes, level: int) -> str:
        return repr(x[:self.maxstring]) + (self.fillvalue if len(x) > self.maxstring else "")

    def repr_ExtType(self, x: msgpack.ExtType, level: int) -> str:
        return f"ExtType({x.code}, {self.repr_bytes(x.data, level)})"

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        """The first items in the peer's order: reprlib sorts every key to keep 4 of them,
        and 2^20 keys held the loop 0.7 s."""
        if not x:
            return "{}"
        if level <= 0:
            return "{" + self.fillvalue + "}"
        pieces = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                  for k, v in itertools.islice(x.items(), self.maxdict)]
        if len(x) > self.maxdict:
            pieces.append(self.fillvalue)
        return "{" + ", ".join(pieces) + "}"


_GLIMPSE = _Glimpse()


def _glimpse(obj: Any, length: int = 80) -> str:
    return _GLIMPSE.repr(obj)[:length]


def _as_text(value: Any) -> str:
    """A peer's error message as text: a str as it is, anything else as ``str`` would show
    its start (never rendered whole: a peer may send a huge one)."""
    return value if isinstance(value, str) else _glimpse(value, 200)


class FrameReader:
    """Feed bytes in, get decoded objects out. Bounds each message's size.

    Invariant: no message longer than ``max_message_bytes`` nor of more than
    MAX_MESSAGE_OBJECTS objects is returned, however it is split into chunks; past
    either ``feed`` raises FrameTooLarge and the connection should be closed.
    """

    # Bytes handed to the Unpacker at a time: its buffer then holds at most the message in
    # progress (bounded by the count below) and one piece. A buffer bound of the message
    # limit alone refused a message just under it whose bytes came with the next one's.
    FEED_PIECE = 64 * 1024
    # The Unpacker's first buffer (it grows as a message needs). msgpack's default of 1 MiB per
    # connection, malloc'd and freed as clients came and went, left the daemon's memory
    # fragmented: 20k short connections kept 1.7 GB.
    INITIAL_BUFFER = 4 * 1024

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self._limit = max_message_bytes
        # The Unpacker drops bytes it has parsed, so its buffer bound alone lets a big
        # message through in chunks: we also count the bytes of the message in progress.
        container_limit = min(max_message_bytes, MAX_CONTAINER_ITEMS)
        self._objects = _ObjectCount(MAX_MESSAGE_OBJECTS)
        self._unpacker = msgpack.Unpacker(
            raw=False,
            max_buffer_size=max_message_bytes + self.FEED_PIECE,
            read_size=self.INITIAL_BUFFER,
            max_array_len=container_limit,
            max_map_len=container_limit,
            strict_map_key=False,
            list_hook=self._objects.array,
            object_hook=self._objects.map,
        )
        self._fed = 0  # bytes fed so far
        self._message_start = 0  # stream offset where the message in progress began

    @property
    def pending_bytes(self) -> int:
        """Bytes of the message in progress (fed, not yet returned as an object)."""
        return self._fed - self._message_start

    @property
    def pending_objects(self) -> int:
        """Objects of the message in progress counted so far (see ``_ObjectCount``)."""
        return self._objects.count

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
                self._objects.count = 0
                out.append(obj)
            if self._fed - self._message_start > self._limit:  # the message in progress
                raise FrameTooLarge(self._limit)
        except msgpack.BufferFull as exc:
            raise FrameTooLarge(self._limit) from exc
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError,
                TypeError) as exc:  # TypeError: a map key that is an array or a map (unhashable)
            raise RpcError(PARSE_ERROR, f"malformed msgpack: {str(exc) or type(exc).__name__}") from exc
        return out


class _ObjectCount:
    """The Unpacker's hooks for arrays and maps: count the objects of the message in progress
    as they are built, and refuse it past ``limit`` (the bytes do not bound them: see
    MAX_MESSAGE_OBJECTS). Apart from the FrameReader, so that the hooks the Unpacker holds
    do not make a reference cycle that keeps its buffer until the cyclic GC runs.

    A hook runs when its container is complete, so the items of an array still open are not
    seen; each container counts itself too, so that the empty maps such an array holds are
    (8 open arrays of 2^20 empty maps counted 0 and took 600 MB)."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int) -> None:
        self.count = 0
        self.limit = limit

    def array(self, items: list[Any]) -> list[Any]:
        self._add(1 + len(items))
        return items

    def map(self, entries: dict[Any, Any]) -> dict[Any, Any]:
        self._add(1 + 2 * len(entries))
        return entries

    def _add(self, objects: int) -> None:
        self.count += objects
        if self.count > self.limit:
            raise FrameTooLarge(self.limit, "objects")
