"""``ngramd lsp``'s stdio transport: LSP framing read by ngramd, messages handled by pygls.

pygls' own reader (``pygls.io_.run_async``) matches each header line against
``^Content-Length: (\\d+)\\r\\n$`` and otherwise ignores it, so one malformed header
(``Content-Length: abc``, a lowercase name, LF-only line ends, a negative length) or a
body shorter or longer than its header says leaves it out of step for good: every later
header is read as part of a body, and the server stays alive and answers nothing. It
also drops, unanswered, a message without ``"jsonrpc": "2.0"`` and one nested too deep
to decode, so a client waiting for their answers hangs.

Here ``FrameReader`` splits the byte stream into bodies and gets back in step after any
malformed frame, and ``handle_body`` answers every body it cannot hand to pygls:

- header names are case-insensitive and lines may end in LF alone (lenient, unambiguous);
- a header block that cannot be read (no valid ``Content-Length``, a negative or
  non-numeric one, a line that is not a header, more than ``MAX_HEADER_BYTES``) is
  reported and skipped up to the next ``Content-Length:`` in the stream;
- a body shorter than its length: its bytes are not JSON (a parse error is answered),
  and the rest is skipped up to the next header as above;
- a body longer than its length would swallow the next messages: while a body is
  awaited, a complete JSON object followed by nothing or by the next ``Content-Length:``
  ends it early (a valid body is one JSON value and optional white space, so this never
  cuts a valid one short), and the stream goes on from there;
- a length over ``MAX_BODY_BYTES`` is refused like a malformed header.

Every such error is answered with a JSON-RPC error whose id is null (none could be
read), a body that is not a valid JSON-RPC 2.0 message with ``InvalidRequest`` under its
own id when one can be read (``top_level_id``, which also reads it from a body nested too
deep for ``json``). Messages themselves are handled by pygls (``structure_message``,
``handle_message``) as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
# A header block longer than this without its blank line is not LSP framing.
MAX_HEADER_BYTES = 8 * 1024
# The longest body read (an 18 Mi-character document escaped as JSON fits many times over).
MAX_BODY_BYTES = 1 << 30
# A body awaited is looked at for an early end at each ``}`` while it is this short.
EARLY_END_ALWAYS = 64 * 1024
_HEADER_START = b"content-length:"
_TOKEN_NAME = re.compile(rb"[A-Za-z0-9-]+")
_WHITE = b" \t\r\n"


class FrameReader:
    """Bodies out of an LSP byte stream; ``feed`` returns ``("body", bytes)`` and
    ``("error", reason)`` events in stream order. Pure: no I/O, no JSON handling."""

    def __init__(self, max_body: int = MAX_BODY_BYTES, max_header: int = MAX_HEADER_BYTES) -> None:
        self.max_body = max_body
        self.max_header = max_header
        self._buf = bytearray()
        self._length: int | None = None  # the body awaited, once its header is read
        self._tried_at = 0  # buffered body bytes when an early end was last looked for

    def feed(self, data: bytes) -> list[tuple[str, Any]]:
        self._buf += data
        events: list[tuple[str, Any]] = []
        while True:
            if self._length is None:
                if not self._read_header(events):
                    return events
            else:
                body = self._take_body(data)
                if body is None:
                    return events
                events.append(("body", body))

    def _read_header(self, events: list[tuple[str, Any]]) -> bool:
        """Read one header block; False when more bytes are needed."""
        buf = self._buf
        start = 0
        while start < len(buf) and buf[start] in _WHITE:  # blank lines (and a long body's padding)
            start += 1
        del buf[:start]
        if not buf:
            return False
        length: int | None = None
        pos = 0
        while True:
            end = buf.find(b"\n", pos)
            if end < 0:
                if len(buf) > self.max_header:
                    return self._resync(events, "a header longer than %d bytes" % self.max_header)
                return False
            if end + 1 > self.max_header:
                return self._resync(events, "a header longer than %d bytes" % self.max_header)
            line = bytes(buf[pos:end]).rstrip(b"\r")
            pos = end + 1
            if not line:
                break
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN_NAME.fullmatch(name.strip()):
                return self._resync(events, f"not a header line: {_show(line)}")
            if name.strip().lower() == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    return self._resync(events, f"a Content-Length that is not a length: {_show(value)}")
                length = int(value)
                if length > self.max_body:
                    return self._resync(events, f"a Content-Length of {length} bytes, over the "
                                                f"{self.max_body} read")
        if length is None:
            return self._resync(events, "a header without Content-Length")
        del buf[:pos]
        self._length = length
        self._tried_at = 0
        return True

    def _resync(self, events: list[tuple[str, Any]], reason: str) -> bool:
        """Report a malformed frame and skip to the next ``Content-Length:`` after its start;
        True when one was found (parse on), False when more bytes are needed."""
        events.append(("error", f"malformed message header ({reason}); skipped to the next header"))
        at = bytes(self._buf).lower().find(_HEADER_START, 1)
        if at < 0:  # keep what could be the start of a header cut in two
            del self._buf[:max(0, len(self._buf) - len(_HEADER_START) + 1)]
            return False
        del self._buf[:at]
        return True

    def _take_body(self, data: bytes) -> bytes | None:
        """The awaited body once its bytes are in; None while more are needed."""
        assert self._length is not None
        buf = self._buf
        if len(buf) >= self._length:
            end = self._length
            if _HEADER_START in bytes(buf[:end]).lower():  # it may have swallowed the next ones
                end = self._json_end(end) or end
        else:
            end = self._early_end(data)
            if end is None:
                return None
        if end < self._length:
            log.warning("a message body ended %d bytes before its Content-Length said; "
                        "reading on from there", self._length - end)
        body = bytes(buf[:end])
        del buf[:end]
        self._length = None
        return body

    def _early_end(self, data: bytes) -> int | None:
        """Where the awaited body ends when its header claimed more than it holds: a
        complete JSON object followed by nothing or by the next header. Looked for when
        the last bytes read name a header, or end in ``}`` while the body is short or has
        doubled since the last look (a big document in transit is not parsed again and
        again: one too long and last is read when the next message comes)."""
        buf = self._buf
        if buf[0:1] != b"{":
            return None
        names_header = _HEADER_START in data.lower()
        ends_object = bytes(buf[-64:]).rstrip(_WHITE).endswith(b"}")
        grown = len(buf) <= EARLY_END_ALWAYS or len(buf) >= 2 * self._tried_at
        if not names_header and not (ends_object and grown):
            return None
        self._tried_at = len(buf)
        return self._json_end(len(buf))

    def _json_end(self, limit: int) -> int | None:
        """The end of the JSON object that starts the buffer, when it ends before ``limit``
        and is followed by white space and then the next header or the buffer's end."""
        buf = self._buf
        if buf[0:1] != b"{":
            return None
        try:  # latin-1: one character a byte, so the index is the byte offset
            _, end = json.JSONDecoder().raw_decode(bytes(buf[:limit]).decode("latin-1"))
        except (ValueError, RecursionError):
            return None
        rest = bytes(buf[end:end + 4096]).lstrip(_WHITE)
        if not rest or rest[:len(_HEADER_START)].lower() == _HEADER_START:
            return end
        return None


def _show(raw: bytes) -> str:
    return repr(raw[:60].decode("utf-8", "replace"))


_ID_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],]')
_ID_VALUE = re.compile(rb'\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*[,}]')


def top_level_id(body: bytes) -> int | str | None:
    """The ``id`` member of the top-level object in ``body``, read without decoding
    the rest (which may be nested too deep for ``json``); None if there is none."""
    depth = 0
    prev = b""
    for m in _ID_TOKEN.finditer(body):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and tok == b'"id"' and prev in (b"{", b","):
            value = _ID_VALUE.match(body, m.end())
            if value is not None:
                try:
                    found = json.loads(value.group(1))
                except ValueError:
                    return None
                return found if isinstance(found, (int, str)) else None
        prev = tok
    return None


def _message_id(data: dict[str, Any]) -> int | str | None:
    found = data.get("id")
    return found if isinstance(found, (int, str)) and not isinstance(found, bool) else None


def send_error(protocol: Any, msg_id: int | str | None, code: int, message: str) -> None:
    # A plain dict: pygls' converter would drop the null id that JSON-RPC requires.
    protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": int(code), "message": message}})


def handle_body(server: Any, body: bytes) -> None:
    """Decode one body and hand it to pygls; answer with an error what pygls cannot take."""
    protocol = server.protocol
    try:
        data = json.loads(body)
    except RecursionError:
        send_error(protocol, top_level_id(body), types.ErrorCodes.InvalidRequest,
                   "invalid request: nested too deeply to decode")
        return
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        send_error(protocol, None, types.ErrorCodes.ParseError, f"parse error: {exc}")
        return
    if not isinstance(data, dict):
        send_error(protocol, None, types.ErrorCodes.InvalidRequest,
                   "invalid request: a message is a JSON object (batches are not part of LSP)")
        return
    if data.get("jsonrpc") != "2.0":
        send_error(protocol, _message_id(data), types.ErrorCodes.InvalidRequest,
                   f'invalid request: "jsonrpc" must be "2.0", not {json.dumps(data.get("jsonrpc"))[:40]}')
        return
    try:
        # (pygls calls this for every nested object as json's object_hook; the nested ones
        # have no "jsonrpc" and are returned as they are, so calling it once is the same)
        message = protocol.structure_message(data)
    except JsonRpcException as exc:
        send_error(protocol, _message_id(data), exc.code, f"invalid message: {exc.message}")
        return
    except RecursionError:
        send_error(protocol, _message_id(data), types.ErrorCodes.InvalidRequest,
                   "invalid request: nested too deeply")
        return
    try:
        protocol.handle_message(message)
    except RecursionError:
        send_error(protocol, _message_id(data), types.ErrorCodes.InvalidRequest,
                   "invalid request: nested too deeply")
    except Exception as exc:
        log.exception("unable to handle a message")
        server._report_server_error(exc, JsonRpcException)


async def read_messages(server: Any, stdin: BinaryIO, stop: threading.Event) -> None:
    loop = asyncio.get_running_loop()
    read = getattr(stdin, "read1", stdin.read)
    frames = FrameReader()
    while not stop.is_set():
        data = await loop.run_in_executor(server.thread_pool, read, READ_CHUNK)
        if not data:
            return
        for kind, value in frames.feed(data):
            if kind == "body":
                handle_body(server, value)
            else:
                log.warning("%s", value)
                send_error(server.protocol, None, types.ErrorCodes.ParseError, value)


def start_io(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """pygls' ``start_io`` with ``read_messages`` as the reader; the exit status (0 at the
    end of input, 1 when stdin cannot be read)."""
    server._stop_event = stop = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        asyncio.run(read_messages(server, stdin or sys.stdin.buffer, stop))
    except BrokenPipeError:
        log.error("the editor closed the connection; shutting down")
    except OSError as exc:
        log.error("cannot read from the editor: %s", exc)
        return 1
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
    return 0
