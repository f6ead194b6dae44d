"""Recovery after kill -9: how long until completions work again through the LSP's link.

Drives lsp/daemon_link.py as the LSP does (it starts ``ngramd serve`` on the CPU, with the
embedded model by default as a user's editor does, and re-sends the open document on each connect), kills the daemon with SIGKILL ``--rounds``
times after a completion, and prints the time until the next completion succeeds, beside
the model load the new daemon logged (``model ... ready ... in X s``) and the phases its log
shows.

    .venv/bin/python scripts/measure_recovery.py --rounds 3            # the embedded model
    .venv/bin/python scripts/measure_recovery.py --rounds 3 --model tiny
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import tempfile
import time


from ngramd.lsp.daemon_client import DaemonError, DaemonUnavailable
from ngramd.lsp.daemon_link import STABLE_S, DaemonLink

TEXT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return"
LOAD = re.compile(r"model \S+ ready on .+? in ([\d.]+) s")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\S+) \w+ (.*)$")


async def complete(link: DaemonLink, timeout: float) -> dict:
    return await link.call("complete", {"uri": "file:///m.py", "version": 1, "offset": len(TEXT),
                                        "maxTokens": 8}, timeout=timeout)


async def main_async(rounds: int, model: str | None) -> int:
    d = tempfile.mkdtemp(prefix="ngd-rec-")
    os.chmod(d, 0o700)
    sock = os.path.join(d, "s.sock")

    async def on_connect(conn) -> None:  # what the LSP re-sends: initialize, every open document
        await conn.request("initialize", {"client": "measure_recovery"}, 30)
        conn.send("open", {"uri": "file:///m.py", "text": TEXT, "version": 1, "languageId": "python"})

    link = DaemonLink(sock, model=model, device="cpu", on_connect=on_connect)
    figures = []
    try:
        await complete(link, 300)
        for r in range(rounds):
            # a daemon that had served a while (STABLE_S): one lost sooner is taken for a crash loop
            await asyncio.sleep(STABLE_S + 1)
            pid = (await link.call("status", timeout=30))["daemon"]["pid"]
            log_start = os.path.getsize(sock + ".log")
            os.kill(pid, signal.SIGKILL)
            t0, t0_wall = time.monotonic(), time.time()
            for _ in range(3000):  # bounded: 300 s of 0.1 s tries at most
                try:
                    await complete(link, 30)
                    break
                except (DaemonUnavailable, DaemonError, asyncio.TimeoutError):
                    await asyncio.sleep(0.1)
            took = time.monotonic() - t0
            with open(sock + ".log") as f:
                f.seek(log_start)
                log = f.read()
            load = LOAD.search(log)
            figures.append((took, float(load.group(1)) if load else float("nan")))
            print(f"round {r + 1}: completions again after {took:.2f} s; the model load {figures[-1][1]:.2f} s; "
                  f"the rest {took - figures[-1][1]:.2f} s")
            _print_phases(log, t0_wall)
        await link.call("shutdown", timeout=30)
    finally:
        await link.close()
    mean = sum(t for t, _ in figures) / len(figures)
    load = sum(x for _, x in figures) / len(figures)
    print(f"mean of {len(figures)}: {mean:.2f} s, of which the model load {load:.2f} s (rest {mean - load:.2f} s)")
    return 0


def _print_phases(log: str, t0_wall: float) -> None:
    """The new daemon's log lines, each at its time since the kill."""
    import datetime

    for line in log.splitlines():
        m = STAMP.match(line)
        if m:
            at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            print(f"    {at - t0_wall:6.2f} s  {m.group(2)}: {m.group(3)[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None, help="the daemon's --model (default: the embedded model)")
    args = ap.parse_args()
    return asyncio.run(main_async(args.rounds, args.model))


if __name__ == "__main__":
    raise SystemExit(main())
