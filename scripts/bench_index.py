"""Benchmark the n-gram index over this machine's Python standard library.

    .venv/bin/python scripts/bench_index.py [--tokens 5000000] [--json]

Measures, with SmolLM2's tokenizer (``ngramd.daemon.runtime.gguf_tokenizer.load_tokenizer_only``):
- tokenizer throughput, and index build throughput with tokens cached
  (install + suffix sorting + merges), over ~--tokens tokens of stdlib *.py;
- lookup latency (propose) p50/p99 at that size, with and without a 20k-token
  current buffer;
- one-line edit re-index latency in a 20k-token buffer, p50/p99;
- bytes per indexed token (index structures, from stats());
- how often chunk-by-chunk tokenization equals whole-file tokenization.

Token ids are cached in /tmp/ngramd_bench_tokens.pkl (tokenizing ~9M tokens
takes about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import random
import re
import shutil
import sysconfig
import time
from pathlib import Path

import numpy as np


from ngramd.daemon.runtime.gguf_tokenizer import load_tokenizer_only
from ngramd.index import IndexConfig, NgramIndex
from ngramd.index.document import Document

CACHE = Path("/tmp/ngramd_bench_tokens.pkl")
WS = Path("/tmp/ngramd_bench_ws")


def load_tokenizer():
    tok = load_tokenizer_only()
    return lambda texts: tok(texts, add_special_tokens=False)["input_ids"] if texts else []


def stdlib_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file())


def pct(xs, q) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))  # ms


def timed(fn, arg, repeats: int) -> list[float]:
    """Wall-clock seconds of ``repeats`` back-to-back calls ``fn(arg)``."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(arg)
        runs.append(time.perf_counter() - t0)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=5_000_000)
    ap.add_argument("--lookups", type=int, default=3000)
    ap.add_argument("--edits", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(0)
    out: dict = {}

    out["load_average_start"] = os.getloadavg()
    t0 = time.perf_counter()
    tok = load_tokenizer()
    out["tokenizer_load_s"] = time.perf_counter() - t0
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    texts = {}
    for p in files:
        try:
            texts[str(p)] = p.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            pass

    # ---- tokenizer throughput (and the cache) ----
    cache = pickle.loads(CACHE.read_bytes()) if CACHE.exists() else {}
    sample = sorted(texts)[:200]
    t0 = time.perf_counter()
    ids = tok([texts[k] for k in sample])
    dt = time.perf_counter() - t0
    out["tokenizer_tokens_per_s"] = sum(map(len, ids)) / dt
    missing = [k for k in texts if k not in cache]
    for i in range(0, len(missing), 64):
        batch = missing[i : i + 64]
        for k, x in zip(batch, tok([texts[k] for k in batch])):
            cache[k] = x
    if missing:
        CACHE.write_bytes(pickle.dumps(cache))
    # numpy arrays, not lists of ints: millions of list slots would make every
    # full garbage collection of this process (not of the index) take milliseconds.
    cache = {k: np.asarray(v, np.int32) for k, v in cache.items()}

    # ---- the workspace: stdlib files up to --tokens tokens, copied to WS ----
    chosen, total = [], 0
    for k in sorted(texts):
        if total >= args.tokens:
            break
        if len(texts[k].encode()) <= (1 << 20):
            chosen.append(k)
            total += len(cache[k])
    if WS.exists():
        shutil.rmtree(WS)
    by_text = {}
    for k in chosen:
        dst = WS / os.path.relpath(k, root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(texts[k], "utf-8")
        by_text[texts[k]] = cache[k].tolist()

    def cached_tok(batch):
        return [by_text[t] if t in by_text else tok([t])[0] for t in batch]

    cfg = IndexConfig(max_indexed_tokens=max(8_000_000, int(total * 1.2)))
    idx = NgramIndex(cached_tok, cfg)
    t0 = time.perf_counter()
    counts = idx.index_workspace(WS)
    build_s = time.perf_counter() - t0
    st = idx.stats()
    out["workspace"] = {"files": counts["indexed"], "tokens": st["workspace_tokens"], "build_s": build_s,
                        "build_tokens_per_s_cached": st["workspace_tokens"] / build_s, "merges": st["merges"],
                        "static_tokens": st["static_tokens"], "dynamic_tokens": st["dynamic_tokens"]}
    out["bytes_per_token"] = st["bytes_per_token"]
    out["index_bytes"] = st["index_bytes"]

    by_text.clear()
    gc.collect()
    gc.freeze()  # the steady state of a daemon: setup objects are not collected again

    # ---- lookups ----
    arrays = [cache[k] for k in chosen]
    def contexts(n):
        res = []
        while len(res) < n:
            a = arrays[rng.randrange(len(arrays))]
            if len(a) < 80:
                continue
            i = rng.randrange(64, len(a))
            res.append(a[i - 64 : i])
        return res

    ctxs = contexts(args.lookups)
    for c in ctxs[:50]:
        idx.propose(c, k=8)  # warm-up
    lat = {}
    # Per-context best of 5: this 2-core machine is shared (load ~9), so single
    # timings include time slices lost to other processes; the best of 5 per
    # context keeps the spread between contexts and drops most preemptions.
    lat["w1_best_of_5"] = [min(timed(lambda c: idx.propose(c, k=8), c, 5)) for c in ctxs[:1000]]
    hits = 0
    for name, w in (("w1", 1), ("w3", 3)):
        ts = []
        for c in ctxs:
            t0 = time.perf_counter()
            d = idx.propose(c, k=8, w=w)
            ts.append(time.perf_counter() - t0)
            hits += bool(d)
        lat[name] = ts
    miss = [np.array([rng.randrange(49152) for _ in range(64)], np.int32) for _ in range(500)]
    lat["random_context"] = [timed(lambda c: idx.propose(c, k=8), c, 1)[0] for c in miss]

    # ---- a 20k-token buffer: edits, and lookups with it as the current buffer ----
    big = min(chosen, key=lambda k: abs(len(cache[k]) - 20_000))
    text = texts[big]
    idx.open_buffer("file:///bench.py", text)
    buf_tokens = len(idx.buffer_tokens("file:///bench.py"))
    def with_buffer(c):
        return idx.propose(c, k=8, current_uri="file:///bench.py")

    lat["w1_with_20k_buffer"] = [timed(with_buffer, c, 1)[0] for c in ctxs]
    lat["w1_with_20k_buffer_best_of_5"] = [min(timed(with_buffer, c, 5)) for c in ctxs[:1000]]
    # Contexts taken from the buffer itself (the buffer supplies the match).
    btoks = idx.buffer_tokens("file:///bench.py")
    bctx = [btoks[i - 64 : i] for i in (rng.randrange(64, len(btoks)) for _ in range(1000))]
    runs = [timed(with_buffer, c, 5) for c in bctx]
    lat["buffer_contexts_20k_buffer"] = [r[0] for r in runs]
    lat["buffer_contexts_20k_buffer_best_of_5"] = [min(r) for r in runs]
    edit_ts = []
    for _ in range(args.edits):
        cur = idx.buffer_text("file:///bench.py")
        line_starts = [0] + [m.end() for m in re.finditer("\n", cur)][:-1]
        s = line_starts[rng.randrange(len(line_starts))]
        e = cur.find("\n", s)
        e = len(cur) if e < 0 else e
        col = s + rng.randrange(0, max(e - s, 1))
        if rng.random() < 0.5:  # a keystroke
            t0 = time.perf_counter()
            idx.edit_buffer("file:///bench.py", col, col, "x")
        else:  # retype the line's tail
            t0 = time.perf_counter()
            idx.edit_buffer("file:///bench.py", col, e, cur[col:e][::-1])
        edit_ts.append(time.perf_counter() - t0)
    # The same edits, best of 3 each (undoing in between), for the preemption-free spread.
    edit_best = []
    for _ in range(300):
        cur = idx.buffer_text("file:///bench.py")
        col = rng.randrange(len(cur))
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            idx.edit_buffer("file:///bench.py", col, col, "x")
            runs.append(time.perf_counter() - t0)
            idx.edit_buffer("file:///bench.py", col, col + 1, "")
        edit_best.append(min(runs))
    final = idx.buffer_tokens("file:///bench.py")
    exact = np.array_equal(final, np.asarray(tok([idx.buffer_text("file:///bench.py")])[0], np.int32))

    out["lookup_ms"] = {k: {"p50": pct(v, 50), "p99": pct(v, 99), "n": len(v)} for k, v in lat.items()}
    out["lookup_hit_rate"] = hits / (2 * len(ctxs))
    out["edit_ms"] = {"p50": pct(edit_ts, 50), "p99": pct(edit_ts, 99), "n": len(edit_ts),
                      "best_of_3_p50": pct(edit_best, 50), "best_of_3_p99": pct(edit_best, 99),
                      "buffer_tokens": buf_tokens, "final_tokens_equal_fresh_tokenization": bool(exact)}

    # ---- chunked == whole tokenization over stdlib files ----
    sample = sorted(texts)
    rng.shuffle(sample)
    sample = sample[:400]
    same = sum(Document.from_text(texts[k], tok).tokens.tolist() == list(cache[k]) for k in sample)
    out["chunked_equals_whole"] = {"files": len(sample), "equal": same}

    out["load_average_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
