"""Lookup latency while a workspace is being indexed (the daemon's first minutes on a big folder).

    .venv/bin/python scripts/bench_index_scan.py [ROOT] [--variants writer,lookup]

One thread runs ``index_workspace(ROOT)`` (default: the site-packages folder of
transformers, ~15M tokens, past the 8M bound); this thread asks for a draft every
35 ms (one forward pass on the CPU) and times each ``propose``. Variants, run one
after the other in this process, each on a fresh index:

- ``writer``: the index as it is: the writer builds the dynamic set's lookup
  structure after each change, outside the lock (``NgramIndex._warm_dynamic``);
- ``lookup``: the first lookup after each change builds it from scratch, under
  the lock (the index before that change; emulated by disabling the writer's build
  and the reuse of the last set).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.model import load_tokenizer_only  # noqa: E402
from index import NgramIndex  # noqa: E402
from index.scan_set import ScanSet  # noqa: E402

CONTEXT = "    def __init__(self, config=None):\n        self."


def default_root() -> str:
    import transformers

    return str(Path(transformers.__file__).parent)


def as_lookup_built(idx: NgramIndex) -> None:
    """Emulate the earlier index: no build by the writer, a stale set never reused, no extension."""
    idx._warm_dynamic = lambda: None

    def build_under_lock() -> ScanSet:
        hit = idx._cache.get("dynamic")
        if hit is not None and hit[0] == idx._dyn_version:
            return hit[1]
        s = idx._make_dynamic(None, idx._dynamic_snapshot())  # from scratch, no extension
        idx._cache["dynamic"] = (idx._dyn_version, s)
        return s

    idx._dynamic_set = build_under_lock


def run(root: str, tokenize, variant: str, interval_s: float) -> dict:
    idx = NgramIndex(tokenize)
    if variant == "lookup":
        as_lookup_built(idx)
    ctx = np.asarray(tokenize([CONTEXT])[0], np.int32)
    done = threading.Event()
    counts: dict = {}

    def scan() -> None:
        t = time.perf_counter()
        counts.update(idx.index_workspace(root))
        counts["scan_s"] = round(time.perf_counter() - t, 1)
        done.set()

    threading.Thread(target=scan, daemon=True).start()
    ms = []
    while not done.is_set():
        t = time.perf_counter()
        idx.propose(ctx, 8, 1)
        ms.append((time.perf_counter() - t) * 1000)
        time.sleep(interval_s)
    a = np.asarray(ms)
    return {"variant": variant, "lookups": len(a), "p50_ms": float(np.median(a)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()), "sum_ms": float(a.sum()),
            "scan_s": counts["scan_s"], "tokens": counts["tokens"], "files": counts["indexed"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=None)
    ap.add_argument("--variants", default="writer,lookup")
    ap.add_argument("--interval-ms", type=float, default=35.0)
    args = ap.parse_args()
    root = args.root or default_root()
    tok = load_tokenizer_only()

    def tokenize(texts):
        return tok(texts, add_special_tokens=False)["input_ids"] if texts else []

    print(f"# root {root}")
    print("| variant | lookups | p50 ms | p99 ms | max ms | summed ms | scan s | tokens | files |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant in args.variants.split(","):
        r = run(root, tokenize, variant, args.interval_ms / 1000)
        print(f"| {variant} | {r['lookups']} | {r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} "
              f"| {r['sum_ms']:.0f} | {r['scan_s']} | {r['tokens']:,} | {r['files']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
