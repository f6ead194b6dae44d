"""``ngramd lsp``'s stdio framing (lsp/stdio.py): a malformed header or a body of the wrong
length must not leave the server alive and deaf, and a message that is not JSON-RPC 2.0
(no ``jsonrpc``, ``"1.0"``, nested 50,000 deep) must get an error answer.

The end-to-end tests run the real ``ngramd lsp`` (no daemon: none is needed to answer
``initialize`` and an unknown method) and speak raw bytes to it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ngramd.lsp.stdio import FrameReader, top_level_id

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0  # a guard against a hang, not a measured time


def frame(obj: dict, length_delta: int = 0, header: bytes | None = None) -> bytes:
    body = json.dumps(obj).encode()
    head = header if header is not None else b"Content-Length: %d\r\n\r\n" % (len(body) + length_delta)
    return head + body


def request(msg_id, method="ngramd/nothing", params=None) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}}


def feed_all(data: bytes, step: int | None = None) -> list[tuple[str, object]]:
    reader, events = FrameReader(), []
    step = step or len(data) or 1
    for i in range(0, len(data), step):
        events += reader.feed(data[i:i + step])
    return events


def ids_of(events) -> list:
    """The ids of the bodies that are JSON (a body cut short is not)."""
    found = []
    for kind, value in events:
        if kind == "body":
            try:
                found.append(json.loads(value)["id"])
            except ValueError:
                pass
    return found


VALID = b"".join(frame(request(i)) for i in range(5))
BAD_HEADERS = {
    "not a number": frame(request("x"), header=b"Content-Length: abc\r\n\r\n"),
    "negative": frame(request("x"), header=b"Content-Length: -5\r\n\r\n"),
    "not a header": b"hello there\r\n\r\n" + json.dumps(request("x")).encode(),
    "no length": frame(request("x"), header=b"Content-Type: x\r\n\r\n"),
    "huge": frame(request("x"), header=b"Content-Length: 99999999999999\r\n\r\n"),
    "too short": frame(request("x"), length_delta=-7),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
@pytest.mark.parametrize("step", [None, 1, 7])
def test_the_reader_gets_back_in_step_after_a_malformed_frame(case, step):
    events = feed_all(BAD_HEADERS[case] + VALID, step)
    assert ids_of(events) == [0, 1, 2, 3, 4]
    assert any(kind == "error" for kind, _ in events) or case == "too short"


@pytest.mark.parametrize("step", [None, 1, 7])
def test_lenient_headers_are_read(step):
    lower = frame(request("lower"), header=b"content-length: %d\r\n\r\n" % len(json.dumps(request("lower"))))
    lf = frame(request("lf"), header=b"Content-Length: %d\n\n" % len(json.dumps(request("lf"))))
    events = feed_all(lower + lf + VALID, step)
    assert ids_of(events) == ["lower", "lf", 0, 1, 2, 3, 4]
    assert not [e for e in events if e[0] == "error"]


@pytest.mark.parametrize("delta", [100, 500])  # within the next messages, past them
@pytest.mark.parametrize("step", [None, 1, 7])
def test_a_body_longer_than_its_header_says_ends_at_its_json(step, delta):
    events = feed_all(frame(request("long"), length_delta=delta) + VALID, step)
    assert ids_of(events) == ["long", 0, 1, 2, 3, 4]
    # alone (nothing after it): it is read at once, not when the next message comes
    assert ids_of(feed_all(frame(request("alone"), length_delta=500), step)) == ["alone"]


def test_a_valid_body_is_never_cut_short():
    text = "x = {'a': 1}\nContent-Length: 12\n}" * 50  # a document that looks like framing
    msg = request(1, "textDocument/didOpen", {"text": text})
    padded = frame(msg, header=b"Content-Length: %d\r\n\r\n" % (len(json.dumps(msg)) + 3)) + b"   "
    for step in (None, 1, 13, 64):
        events = feed_all(padded + VALID, step)
        first = next(v for k, v in events if k == "body")
        assert json.loads(first)["params"]["text"] == text
        assert ids_of(events) == [1, 0, 1, 2, 3, 4]


def test_top_level_id_of_a_body_nested_too_deep():
    deep = '{"jsonrpc":"2.0","method":"m","params":' + "[" * 50000 + "]" * 50000 + ',"id":42}'
    assert top_level_id(deep.encode()) == 42
    assert top_level_id(b'{"params":{"id":1},"id":"a\\"b"}') == 'a"b'
    assert top_level_id(b'{"params":{"id":1}}') is None


class Lsp:
    """``ngramd lsp`` over raw pipes; its messages are read by a thread into a queue."""

    def __init__(self, sock: str) -> None:
        env = dict(os.environ, NGRAMD_LSP_NO_SPAWN="1", NGRAMD_LSP_LOG="error")
        self.proc = subprocess.Popen([sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--socket", sock],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=str(REPO), env=env)
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.messages.put(json.loads(out.read(length)))

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answers(self, ids: set) -> dict:
        """The answers to ``ids`` (others are collected too, under their id)."""
        got: dict = {}
        while not ids <= got.keys():
            try:
                msg = self.messages.get(timeout=WAIT_S)
            except queue.Empty:
                raise AssertionError(f"no answer to {sorted(map(str, ids - got.keys()))}; "
                                     f"alive: {self.proc.poll() is None}") from None
            if "id" in msg and ("result" in msg or "error" in msg):
                got.setdefault(msg["id"], msg)
        return got

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def lsp(sock):
    server = Lsp(sock)
    server.write(frame(request("init", "initialize", {"processId": None, "rootUri": None,
                                                       "capabilities": {}})))
    assert "result" in server.answers({"init"})["init"]
    yield server
    server.close()


E2E = dict(BAD_HEADERS, **{
    "lowercase": frame(request("x"), header=b"content-length: %d\r\n\r\n" % len(json.dumps(request("x")))),
    "LF only": frame(request("x"), header=b"Content-Length: %d\n\n" % len(json.dumps(request("x")))),
    "too long": frame(request("x"), length_delta=300),
})


@pytest.mark.parametrize("case", sorted(E2E))
def test_the_server_answers_after_a_malformed_header(lsp, case):
    lsp.write(E2E[case])
    lsp.write(b"".join(frame(request(f"after-{i}")) for i in range(5)))
    got = lsp.answers({f"after-{i}" for i in range(5)})
    assert all(got[f"after-{i}"]["error"]["code"] == -32601 for i in range(5))  # method not found
    assert lsp.proc.poll() is None


@pytest.mark.parametrize("case, body, code", [
    ("no jsonrpc", {"id": "q", "method": "ngramd/nothing", "params": {}}, -32600),
    ("jsonrpc 1.0", {"jsonrpc": "1.0", "id": "q", "method": "ngramd/nothing", "params": {}}, -32600),
    ("not an object", [1, 2], -32600),
])
def test_a_message_that_is_not_json_rpc_2_gets_an_error(lsp, case, body, code):
    lsp.write(frame(body))
    lsp.write(frame(request("next")))
    if isinstance(body, dict):
        assert lsp.answers({"q"})["q"]["error"]["code"] == code
    else:
        assert lsp.answers({None})[None]["error"]["code"] == code
    assert "error" in lsp.answers({"next"})["next"]


def test_params_nested_50000_deep_get_an_error(lsp):
    body = ('{"jsonrpc":"2.0","id":"deep","method":"textDocument/hover","params":'
            + "[" * 50000 + "]" * 50000 + "}").encode()
    lsp.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    lsp.write(frame(request("next")))
    assert lsp.answers({"deep"})["deep"]["error"]["code"] == -32600
    assert "error" in lsp.answers({"next"})["next"]
