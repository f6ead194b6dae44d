"""Once shutdown has begun (a `shutdown` request, SIGTERM), new model work is refused with
REQUEST_CANCELLED ("the daemon is shutting down") and never reaches the model; the pass already
running ends as before (docs/rpc.md, `shutdown`)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest

from ngramd.daemon.protocol.requests import CompletionResult, GenerationStats
from ngramd.daemon.protocol.rpc import REQUEST_CANCELLED, pack_notification, pack_request
from ngramd.daemon.service.server import Connection, Server
from daemon_helpers import FakeCompleter

HELD = "file:///held.py"
LATE = "file:///late.py"
# each model method and its params on a small text
LATE_WORK = {
    "complete": {"uri": LATE, "text": "abc", "offset": 0},
    "edit": {"uri": LATE, "text": "abc", "start": 0, "end": 3, "instruction": "shout"},
    "prepareComplete": {"uri": LATE, "text": "abc", "offset": 0},
    "prepareEdit": {"uri": LATE, "text": "abc", "start": 0, "end": 3},
}


class PassInProgress(FakeCompleter):
    """A completion of ``HELD`` is a model pass that goes on after it is cancelled until the
    test releases it, holding the daemon in its shutdown grace while later work arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = threading.Event()  # the held pass was told to stop: shutdown has begun
        self.release = threading.Event()

    def complete(self, req, cancel=None):
        if req.uri != HELD:
            return super().complete(req, cancel)
        self.started.set()
        cancel.wait(30)
        self.cancelled.set()
        self.release.wait(30)
        return CompletionResult("", [], "", GenerationStats(), cancelled=True, stop_reason="cancelled")


@pytest.mark.parametrize("method", sorted(LATE_WORK))
def test_work_sent_after_shutdown_is_refused_and_never_reaches_the_model(inproc, method):
    completer = inproc.service.completer = PassInProgress()
    with inproc.client() as editor, inproc.client() as asker, inproc.client() as late:
        try:
            held = editor.send("complete", {"uri": HELD, "text": "x", "offset": 0})
            assert completer.started.wait(10)
            assert asker.call("shutdown") is None
            assert completer.cancelled.wait(10)
            late_id = late.send(method, LATE_WORK[method])
        finally:
            completer.release.set()  # without the fix the late work runs once the held pass ends
        reply = late.wait_response(late_id, timeout=10)
        assert reply.error is not None, reply.result
        assert reply.error["code"] == REQUEST_CANCELLED
        assert "shutting down" in reply.error["message"]
        assert LATE not in completer.calls
        # the pass that was running ends as before: cancelled, "request shutdown"
        assert editor.wait_response(held, timeout=10).error == {
            "code": REQUEST_CANCELLED, "message": "request shutdown"}


def test_a_connection_closed_at_shutdown_first_sends_what_it_holds_to_a_client_that_reads(monkeypatch):
    """``drain`` returns below the high-water mark, not once all is sent: aborted with bytes still
    unsent, a connection lost the ``exiting`` notice it sent last, and its client took the
    exit for a crash. (A grace far longer than a loaded machine needs: the old code aborted at once.)"""
    import ngramd.daemon.service.server

    monkeypatch.setattr(ngramd.daemon.service.server, "CLOSE_GRACE_S", 10.0)
    held = bytes(range(256)) * 4096  # 1 MiB: more than the socket itself holds
    ours, theirs = socket.socketpair(socket.AF_UNIX)
    received = bytearray()

    def read_soon() -> None:  # a client that reads, but not at once
        time.sleep(0.1)
        while chunk := theirs.recv(1 << 16):
            received.extend(chunk)

    async def close_with_bytes_unsent() -> None:
        server = Server(service=None, socket_path=Path("unused"))
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        conn = Connection(writer, asyncio.create_task(reader.read()))  # its reader ends at the close
        server.connections[conn.id] = conn
        writer.write(held)
        assert writer.transport.get_write_buffer_size() > 0
        await server._close_connections()

    client = threading.Thread(target=read_soon)
    client.start()
    try:
        asyncio.run(close_with_bytes_unsent())
    finally:
        client.join(10)
        theirs.close()
    assert len(received) == len(held) and received == held


def test_the_rest_of_a_pipelined_chunk_is_not_handled_once_shutdown_closed_the_connection(inproc, monkeypatch):
    """Messages read in one chunk after a ``shutdown`` were still handled (and answered to no one)
    after the shutdown closed their connection."""
    closed_when_handled = []
    handle = inproc.server._on_message

    async def noting(conn, obj):
        closed_when_handled.append(conn.closed)
        await handle(conn, obj)

    monkeypatch.setattr(inproc.server, "_on_message", noting)
    no_op = pack_notification("cancel", {"requestId": 10**6})  # answers nothing
    with inproc.client() as client:
        client.send_raw(pack_request(1, "shutdown", {}) + no_op * 2000)  # 50 KB: one read
        client.wait_notification("exiting", timeout=10)
    inproc._thread.join(15)
    assert closed_when_handled[0] is False and True not in closed_when_handled
