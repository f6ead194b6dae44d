"""Probe ``ngramd lsp`` and ``ngramd serve`` from outside, as a broken client would.

Bounded (a fixed count of messages and connects, a wait limit on each answer) and local
only (pipes and a unix socket in a temp folder). Two parts:

- ``lsp``: ``ngramd lsp`` gets each malformed frame or message of docs/rpc.md's
  "Robustness" table, then 5 valid requests; counted: the answers, and whether it lives.
- ``burst``: a ``serve --model tiny`` daemon gets bursts of raw connects (held open, never
  retried, as a storm of clients would) while ``ngramd status``'s client (retrying a full
  listen queue) runs; counted: connects refused, and status calls that failed.

    .venv/bin/python scripts/probe_robustness.py                # both parts
    .venv/bin/python scripts/probe_robustness.py --part lsp
    .venv/bin/python scripts/probe_robustness.py --part burst --bursts 1000 3000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from ngramd.daemon.protocol.client import Client, spawn_daemon, wait_ready  # noqa: E402

WAIT_S = 10.0  # the longest wait for one answer
MAX_BURST = 5000
MAX_ROUNDS = 10


def _frame(obj, header: bytes | None = None, delta: int = 0) -> bytes:
    body = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    return (header if header is not None else b"Content-Length: %d\r\n\r\n" % (len(body) + delta)) + body


def _req(msg_id, method="ngramd/nothing", params=None) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}}


def lsp_cases() -> dict[str, tuple[bytes, object]]:
    """name -> (bytes, the id whose answer is expected: None for none but the valid ones)."""
    x = json.dumps(_req("x")).encode()
    deep = ('{"jsonrpc":"2.0","id":"x","method":"textDocument/hover","params":'
            + "[" * 50000 + "]" * 50000 + "}").encode()
    return {
        "Content-Length: abc": (_frame(x, b"Content-Length: abc\r\n\r\n"), None),
        "lowercase content-length": (_frame(x, b"content-length: %d\r\n\r\n" % len(x)), "x"),
        "LF-only line ends": (_frame(x, b"Content-Length: %d\n\n" % len(x)), "x"),
        "negative length": (_frame(x, b"Content-Length: -5\r\n\r\n"), None),
        "length too short": (_frame(x, delta=-7), None),
        "length too long": (_frame(x, delta=300), "x"),
        "length 10^14": (_frame(x, b"Content-Length: 99999999999999\r\n\r\n"), None),
        "no jsonrpc": (_frame({"id": "x", "method": "ngramd/nothing", "params": {}}), "x"),
        '"jsonrpc":"1.0"': (_frame({"jsonrpc": "1.0", "id": "x", "method": "ngramd/nothing"}), "x"),
        "params nested 50,000 deep": (_frame(deep), "x"),
    }


class LspProcess:
    def __init__(self, sock: str) -> None:
        env = dict(os.environ, NGRAMD_LSP_NO_SPAWN="1", NGRAMD_LSP_LOG="critical")
        self.proc = subprocess.Popen([sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--socket", sock],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=str(REPO), env=env)
        self.answers: queue.Queue = queue.Queue()
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
            msg = json.loads(out.read(length))
            if "result" in msg or "error" in msg:
                self.answers.put(msg.get("id"))

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def collect(self, wanted: set) -> set:
        got: set = set()
        deadline = time.monotonic() + WAIT_S
        while not wanted <= got and time.monotonic() < deadline:
            try:
                got.add(self.answers.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break
        return got & wanted

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


def probe_lsp(sock: str) -> list[dict]:
    rows = []
    for name, (data, expected) in lsp_cases().items():
        lsp = LspProcess(sock)
        lsp.send(_frame(_req("init", "initialize", {"processId": None, "rootUri": None, "capabilities": {}})))
        lsp.collect({"init"})
        lsp.send(data)
        valid = {f"v{i}" for i in range(5)}
        lsp.send(b"".join(_frame(_req(i)) for i in sorted(valid)))
        got = lsp.collect(valid | ({expected} if expected else set()))
        rows.append({"case": name, "valid answered": len(got & valid),
                     "bad one answered": None if expected is None else expected in got,
                     "alive": lsp.proc.poll() is None})
        lsp.close()
    return rows


def burst(sock: str, count: int) -> tuple[int, list[socket.socket]]:
    held, refused = [], 0
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(sock)
            held.append(s)
        except BlockingIOError:
            refused += 1
            s.close()
    return refused, held


def probe_bursts(sock: str, sizes: list[int], rounds: int) -> list[dict]:
    rows = []
    for size in sizes:
        refused_total, failed, calls = 0, 0, 0
        for _ in range(rounds):
            result: dict = {}
            t = threading.Thread(target=lambda: result.update(zip(("refused", "held"), burst(sock, size))))
            t.start()
            for _ in range(3):  # `ngramd status`'s client, during the burst
                calls += 1
                try:
                    with Client(sock, timeout=WAIT_S) as c:
                        c.call("status")
                except Exception:
                    failed += 1
            t.join()
            refused_total += result["refused"]
            for s in result["held"]:
                s.close()
        rows.append({"burst": size, "rounds": rounds, "connects refused": refused_total,
                     "of": size * rounds, "status failed": failed, "status calls": calls})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["lsp", "burst", "all"], default="all")
    ap.add_argument("--bursts", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sizes = [min(MAX_BURST, max(1, n)) for n in args.bursts]
    rounds = min(MAX_ROUNDS, max(1, args.rounds))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, MAX_BURST + 1024)), hard))
    with tempfile.TemporaryDirectory(prefix="ngp-", dir="/tmp") as d:
        sock = os.path.join(d, "s.sock")
        if args.part in ("lsp", "all"):
            for row in probe_lsp(sock):
                print(json.dumps(row))
        if args.part in ("burst", "all"):
            log = open(os.path.join(d, "serve.log"), "w")
            proc = spawn_daemon(sock, model="tiny", device="cpu", stderr=log, stdout=log)
            try:
                wait_ready(sock, timeout=240, proc=proc)
                for row in probe_bursts(sock, sizes, rounds):
                    print(json.dumps(row))
            finally:
                try:
                    with Client(sock, timeout=WAIT_S) as c:
                        c.call("shutdown")
                except Exception:
                    proc.kill()
                proc.wait(timeout=60)
                log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
