"""A client that shuts its write side (``shutdown(SHUT_WR)``, as ``socat``, ``nc -N`` and shell
scripts do) and reads on gets every answer, then end of input; one that closes its socket has
its work cancelled. The real ``serve --model tiny`` process, started once for the module; the
last test stops it."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from daemon_helpers import RealDaemon, wait_until

from ngramd.daemon.protocol.rpc import EXITING, REQUEST_CANCELLED, FrameReader, Notification, Response, decode, pack_request

pytestmark = pytest.mark.process

pytest.importorskip("ngramd.index.store", reason="the n-gram index (index/store.py) is not there yet")
pytest.importorskip("ngramd.daemon.engine.completer")

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"


@pytest.fixture(scope="module")
def daemon():
    root = Path(tempfile.mkdtemp(prefix="ngd-"))
    workspace = root / "ws"
    workspace.mkdir()
    d = RealDaemon(root, workspace)
    yield d
    d.close()
    shutil.rmtree(root, ignore_errors=True)


def _half_closed_exchange(daemon: RealDaemon, data: bytes) -> list:
    """Send ``data``, shut the write side, read every message until the daemon closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(str(daemon.sock))
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        frames, got = FrameReader(), []
        while chunk := s.recv(65536):  # b"": the daemon closed the connection
            got += [decode(obj) for obj in frames.feed(chunk)]
        return got
    finally:
        s.close()


def _complete(msgid: int, uri: str, **extra) -> bytes:
    params = {"uri": uri, "text": SOURCE, "offset": len(SOURCE), "maxTokens": 24, **extra}
    return pack_request(msgid, "complete", params)


def test_a_half_closed_client_gets_every_answer_then_end_of_input(daemon):
    edit = pack_request(2, "edit", {"uri": "mem://e", "text": SOURCE, "start": 0, "end": 14,
                                    "instruction": "rename add to plus", "maxTokens": 24})
    got = _half_closed_exchange(daemon, _complete(1, "mem://c") + edit + pack_request(3, "status", {}))
    assert all(isinstance(m, Response) for m in got), got
    answers = {m.msgid: m for m in got}
    assert sorted(answers) == [1, 2, 3] and len(got) == 3
    assert all(m.error is None for m in got), [m.error for m in got]
    assert isinstance(answers[1].result["text"], str) and isinstance(answers[2].result["text"], str)
    assert answers[3].result["daemon"]["pid"] == daemon.proc.pid


def test_a_truncated_last_message_is_dropped_and_the_rest_answered(daemon):
    cut = _complete(2, "mem://cut")
    got = _half_closed_exchange(daemon, _complete(1, "mem://whole") + cut[:len(cut) // 2])
    assert [(type(m), getattr(m, "msgid", None)) for m in got] == [(Response, 1)]
    assert got[0].error is None


def test_a_client_closing_after_its_half_close_has_its_request_cancelled(daemon):
    with daemon.client() as watcher:
        before = watcher.call("status")["requests"].get("client disconnected", 0)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.sock))
        s.sendall(pack_request(1, "complete", {"uri": "mem://gone", "text": "x", "offset": 1, "maxTokens": 3000,
                                               "multiline": True, "requestId": "gone"}))
        s.shutdown(socket.SHUT_WR)

        wait_until(lambda: (watcher.call("status")["requests"]["running"] or {}).get("requestId") == "gone",
                   timeout=120)
        s.close()
        wait_until(lambda: watcher.call("status")["requests"].get("client disconnected", 0) > before,
                   timeout=120)
        assert watcher.call("status")["daemon"]["pid"] == daemon.proc.pid  # still serving


def test_a_half_closed_shutdown_gets_the_answers_and_the_exiting_notice(daemon):
    """Last: it stops the module's daemon. The running request is answered "cancelled
    (shutdown)", the shutdown itself null, and the ``exiting`` notice comes last."""
    long = pack_request(1, "complete", {"uri": "mem://long", "text": "x", "offset": 1,
                                        "maxTokens": 3000, "multiline": True})
    got = _half_closed_exchange(daemon, long + pack_request(2, "shutdown", {}))
    assert len(got) == 3, got
    answers = {m.msgid: m for m in got[:2] if isinstance(m, Response)}
    assert answers[1].error["code"] == REQUEST_CANCELLED and "shutdown" in answers[1].error["message"]
    assert answers[2].error is None and answers[2].result is None
    assert isinstance(got[2], Notification) and (got[2].method, got[2].params) == (EXITING, {"reason": "shutdown"})
    assert daemon.proc.wait(60) == 0
