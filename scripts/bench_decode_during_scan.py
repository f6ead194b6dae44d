"""Completion speed while a workspace is being indexed, with the indexer at equal or lowest priority.

    .venv/bin/python scripts/bench_decode_during_scan.py [ROOT] [--runs 5]

The daemon indexes a newly opened folder on a thread of its own while the model
decodes on the same cores. This loads the embedded model, then times plain
completions (32 tokens at a fixed position of index/store.py, no KV reuse)
idle (before and after), and while ``index_workspace(ROOT)`` runs on another thread (default ROOT:
the transformers package, ~15M tokens, a 2-minute scan here), once with that
thread at the default priority and once lowered as the daemon's watcher does
(``daemon/priority.py``). Medians of ``--runs`` completions per phase.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.completer import Completer  # noqa: E402
from daemon.engine import EngineConfig  # noqa: E402
from daemon.model import load_runtime  # noqa: E402
from daemon.priority import lower_this_thread  # noqa: E402
from daemon.requests import CompletionRequest  # noqa: E402
from index.store import NgramIndex  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def default_root() -> str:
    import transformers

    return str(Path(transformers.__file__).parent)


def timed(completer: Completer, req: CompletionRequest, runs: int) -> dict:
    totals, firsts, per_token = [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        stats = completer.complete(req).stats
        ms = (time.perf_counter() - t) * 1000
        totals.append(ms)
        firsts.append(stats.first_token_ms)
        per_token.append((ms - stats.first_token_ms) / max(1, stats.generated - 1))
    return {"total_ms": statistics.median(totals), "first_token_ms": statistics.median(firsts),
            "decode_ms_per_token": statistics.median(per_token)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=None)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    root = args.root or default_root()
    rt = load_runtime(None, device="cpu")
    text = (REPO / "index" / "store.py").read_text()
    req = CompletionRequest("file:///bench.py", text, text.index("    def merge(self)"), max_tokens=32,
                            speculate=False)
    rows = []
    for phase in ("idle", "scan, equal priority", "scan, lowest priority", "idle again"):
        scanning = phase.startswith("scan")
        index = NgramIndex(rt.tokenize_batch)
        completer = Completer(rt, index, EngineConfig(reuse_kv=False))
        completer.complete(req)  # warm-up
        done = threading.Event()
        if scanning:
            lowered = phase.endswith("lowest priority")

            def scan(lowered: bool = lowered) -> None:
                if lowered:
                    lower_this_thread()
                index.index_workspace(root)
                done.set()

            threading.Thread(target=scan, daemon=True).start()
            time.sleep(3)  # into the scan
        r = timed(completer, req, args.runs)
        r["scan_still_running"] = scanning and not done.is_set()
        rows.append((phase, r))
        print(f"{phase}: {r}", file=sys.stderr, flush=True)
        while scanning and not done.is_set():
            time.sleep(1)  # the next phase starts from a quiet machine
    print(f"# root {root}; {args.runs} completions of 32 tokens per phase, medians")
    print("| phase | total ms | first token ms | decode ms/token | scan still running at the end |")
    print("|---|---:|---:|---:|---|")
    for phase, r in rows:
        print(f"| {phase} | {r['total_ms']:.0f} | {r['first_token_ms']:.0f} | {r['decode_ms_per_token']:.1f} "
              f"| {r['scan_still_running'] if phase.startswith('scan') else '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
