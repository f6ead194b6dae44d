"""Peak memory of a daemon decoding large messages on several connections at once.

Starts the daemon's Server (daemon/service/server.py, with a stub service: no model) in a child
process; ``--connections`` clients each send a message of ``--arrays`` nested open arrays of
2^20 two-character strings (66 MB for 21), all but its last bytes, at the same time; prints the
growth of the child's peak RSS (VmHWM) and the decode budget's figures
(daemon/protocol/decode_budget.py). ``--no-budget`` sets the budget past any total: as before it.

    .venv/bin/python scripts/measure_decode_budget.py --connections 2
    .venv/bin/python scripts/measure_decode_budget.py --connections 2 --no-budget
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, collections, json, sys
from pathlib import Path
from ngramd.daemon.service.server import Server

class Stub:
    errors = collections.Counter()
    shutdown_requested = None
    def client_connected(self, conn): pass
    def client_gone(self, conn): pass
    def cancel_all(self, reason): return 0
    def close(self): pass
    async def dispatch(self, conn, method, params):
        if method == "budget":
            return server.decode_budget.figures()
        return None

server = Server(Stub(), Path(sys.argv[1]), decode_budget_bytes=int(sys.argv[2]) or None)
asyncio.run(server.run(lambda: print("ready", flush=True)))
"""


def vm_hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def message(arrays: int) -> bytes:
    n = (1 << 20) - 1
    parts = [b"\xdd" + (n + 1).to_bytes(4, "big") + msgpack.packb("ab") * n for _ in range(arrays)]
    return (b"".join(parts) + msgpack.packb("ab"))[:-3]  # the last string unsent: every array open


def call(sock_path: str, method: str) -> object:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall(msgpack.packb([0, 1, method, {}]))
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            unpacker.feed(s.recv(1 << 16))
            for obj in unpacker:
                return obj[3]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--arrays", type=int, default=21)
    ap.add_argument("--no-budget", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sock_path = os.path.join(d, "s.sock")
        child = subprocess.Popen([sys.executable, "-c", CHILD, sock_path, str(1 << 40 if args.no_budget else 0)],
                                 cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            data = message(args.arrays)
            before = vm_hwm(child.pid)
            socks = []
            for _ in range(args.connections):
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock_path)
                socks.append(s)

            def send(s: socket.socket) -> None:
                try:
                    s.sendall(data)
                except OSError:  # refused: the daemon closed it
                    pass
            threads = [threading.Thread(target=send, args=(s,)) for s in socks]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            time.sleep(1.0)  # the last chunks decoded
            grew = vm_hwm(child.pid) - before
            figures = call(sock_path, "budget")
            print(f"{args.connections} connections x {len(data) / 1e6:.1f} MB (every array open), "
                  f"budget {'off' if args.no_budget else 'on'}: peak RSS grew {grew / 1e9:.2f} GB "
                  f"in {time.monotonic() - t0:.1f} s; budget {json.dumps(figures)}")
            for s in socks:
                s.close()
        finally:
            child.terminate()
            child.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
