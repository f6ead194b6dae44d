"""How long one keystroke in a small document waits while another, big document is being opened.

The daemon mirrors documents into the index on ``daemon.service.INDEX_THREADS`` threads, each
document's updates in order (daemon/keyed_executor.py); with one thread, as before, a keystroke
in any document waited for the big one's tokenizing. Runs the real service and index with the
default model's tokenizer, in process, once per thread count: opens a document of ``--chars``
characters of real code, and while it is indexed, times ``--keys`` one-character changes to a
small open document (each awaited as the daemon's ``change`` handler awaits its index update).

    .venv/bin/python scripts/bench_sync_during_big_open.py --threads 1 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _code(chars: int) -> str:
    """``chars`` characters of this repository's Python, repeated."""
    repo = Path(__file__).resolve().parents[1]
    text = "\n".join(p.read_text() for d in ("daemon", "index", "lsp") for p in sorted((repo / d).glob("*.py")))
    return (text * (chars // len(text) + 1))[:chars]


async def _run(service, big_text: str, keys: int) -> tuple[float, list[float]]:
    """(ms until the big open is done, each keystroke's ms)."""
    await service.dispatch(2, "open", {"uri": "file:///small.py", "text": "x = 1\n", "version": 1})
    t0 = time.perf_counter()
    big = asyncio.ensure_future(service.dispatch(1, "open", {"uri": "file:///big.py", "text": big_text, "version": 1}))
    await asyncio.sleep(0.05)  # the big open has begun
    waits = []
    for i in range(keys):
        t = time.perf_counter()
        await service.dispatch(2, "change", {"uri": "file:///small.py", "version": 2 + i,
                                             "changes": [{"range": {"start": 0, "end": 0}, "text": "#"}]})
        waits.append((time.perf_counter() - t) * 1000)
    await big
    return (time.perf_counter() - t0) * 1000, waits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--chars", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=20)
    args = ap.parse_args()

    import daemon.service as service_module
    from daemon.model import load_runtime
    from index.store import IndexConfig, NgramIndex

    rt = load_runtime(None, "cpu")
    big_text = _code(args.chars)
    print(f"# a {len(big_text):,}-character document opened; {args.keys} keystrokes in another meanwhile")
    for threads in args.threads:
        service_module.INDEX_THREADS = threads
        index = NgramIndex(rt.tokenize_batch, IndexConfig(restore_in_background=True))
        service = service_module.Service(None, index)
        try:
            big_ms, waits = asyncio.run(_run(service, big_text, args.keys))
        finally:
            service.close()
        print(f"threads={threads}: big open {big_ms:,.0f} ms; keystroke waits median {statistics.median(waits):,.1f} ms,"
              f" first {waits[0]:,.0f} ms, max {max(waits):,.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
