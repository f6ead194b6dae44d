"""Resident memory a big document leaves behind once it is closed.

Starts ``ngramd serve --model tiny`` (CPU), then opens a document of ``--chars`` characters
(6 Mi by default), asks one completion at its end and one in its middle, closes it, and prints
the daemon's RSS (``status``) at each step; ``--rounds`` repeats open/complete/close.

    .venv/bin/python scripts/measure_closed_document_memory.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


from ngramd.daemon.protocol.client import Client, spawn_daemon, wait_ready


def rss(c: Client) -> float:
    return c.call("status")["memory"]["rss_bytes"] / 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=6 << 20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    line = "def f(x):\n    return x + 1  # a line of code\n"
    text = (line * (args.chars // len(line) + 1))[:args.chars]
    with tempfile.TemporaryDirectory() as d:
        sock = os.path.join(d, "s.sock")
        proc = spawn_daemon(sock, model="tiny", device="cpu", extra_args=["--max-message-bytes", str(64 << 20)])
        try:
            wait_ready(sock, timeout=300)
            with Client(sock, timeout=600) as c:
                c.call("complete", {"uri": "file:///warm.py", "text": "def g(y):\n    return", "offset": 20,
                                    "maxTokens": 8})
                base = rss(c)
                print(f"idle, model loaded: rss {base:.0f} MB")
                for r in range(args.rounds):
                    t0 = time.monotonic()
                    c.call("open", {"uri": "file:///big.py", "text": text, "version": 1})
                    opened = rss(c)
                    c.call("complete", {"uri": "file:///big.py", "offset": len(text), "maxTokens": 16})
                    c.call("complete", {"uri": "file:///big.py", "offset": len(text) // 2, "maxTokens": 16})
                    used = rss(c)
                    c.call("close", {"uri": "file:///big.py"})
                    time.sleep(1.0)  # the index's close and the caches' drop run on threads
                    closed = rss(c)
                    print(f"round {r + 1}: open {opened:.0f} MB, after 2 completions {used:.0f} MB, "
                          f"closed {closed:.0f} MB: {closed - base:+.0f} MB kept "
                          f"({time.monotonic() - t0:.1f} s)")
                c.call("shutdown")
        finally:
            proc.wait(60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
