"""LSP overhead figures (docs/benchmarks.md at 53c478e, "LSP") (not a test; run by hand):

    .venv/bin/python tests/lsp/bench_lsp.py

Against the fake daemon (which answers at once), so what is measured is the LSP's own
cost: process start to the ``initialize`` answer, one inline-completion round trip
(editor -> LSP -> daemon -> LSP -> editor), one ``didChange`` until the daemon has
applied it, and the position helper on a large file.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from lsprotocol import types  # noqa: E402
from pytest_lsp import make_test_lsp_client  # noqa: E402

from lsp_helpers import client_capabilities  # noqa: E402
from ngramd.lsp import positions  # noqa: E402
from lsp_fake_daemon import FakeDaemon  # noqa: E402
from lsp_helpers import change, inline_params, open_doc, rng  # noqa: E402

URI = "file:///tmp/bench/a.py"


async def start(sock: str):
    client = make_test_lsp_client()
    t0 = time.perf_counter()
    await client.start_io(sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--socket", sock,
                          env=dict(os.environ, NGRAMD_LSP_NO_SPAWN="1"), cwd=str(HERE.parents[1]))
    await client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(), initialization_options={"debounceMs": 0}))
    return client, (time.perf_counter() - t0) * 1000


async def main() -> None:
    d = tempfile.mkdtemp(prefix="ngb-", dir="/tmp")
    sock = os.path.join(d, "d.sock")
    fake = await FakeDaemon(sock, proposal="x = 1").start()
    starts = []
    for _ in range(5):
        client, ms = await start(sock)
        starts.append(ms)
        await client.shutdown_session()
        await client.stop()
    client, _ = await start(sock)
    text = "".join(f"def f{i}(a, b):\n    return a + b  # {i}\n" for i in range(2500))
    open_doc(client, URI, text)
    lines = text.count("\n")
    await client.text_document_inline_completion_async(inline_params(URI, lines - 1, 4))  # warm
    rt = []
    for _ in range(50):
        t0 = time.perf_counter()
        await client.text_document_inline_completion_async(inline_params(URI, lines - 1, 4))
        rt.append((time.perf_counter() - t0) * 1000)
    ch = []
    for v in range(2, 52):
        t0 = time.perf_counter()
        change(client, URI, v, (rng(lines - 1, 0, lines - 1, 0), "#"))
        while fake.docs[URI]["version"] != v:
            await asyncio.sleep(0.0005)
        ch.append((time.perf_counter() - t0) * 1000)
    await client.shutdown_session()
    await client.stop()
    await fake.stop()
    n = 20
    conv = timeit.timeit(lambda: positions.offset_at(text, lines - 1, 4), number=n) / n * 1000
    print(f"document: {lines} lines, {len(text)} chars")
    print(f"start -> initialize answered: median {statistics.median(starts):.0f} ms")
    print(f"inline completion round trip (fake daemon): median {statistics.median(rt):.1f} ms")
    print(f"didChange -> applied by the daemon: median {statistics.median(ch):.1f} ms")
    print(f"positions.offset_at, last line: {conv:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
