"""Resident memory while forward passes see many row counts (what a long editor session does).

    .venv/bin/python scripts/measure_pass_memory.py [--variant bucketed|any_rows] [--sweeps 3]

A daemon's passes come in every size: verification passes of 1 + k tokens and prefill
chunks of whatever was typed since the last request. oneDNN (the packed linears of
daemon/fast_linear.py) keeps a kernel for every row count it is called with. This runs
the default model over passes of 1..64 tokens and then 65..512 in steps of 7, after a
600-token context, ``--sweeps`` times, and prints the growth of resident memory after
each sweep: flat after the first sweep means bounded.

``bucketed`` is what runs (row counts from ``fast_linear.PACK_BUCKETS``); ``any_rows``
calls oneDNN with every row count as it comes (scripts/profile_forward.py's
``packed_any_rows``), as before the buckets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) // 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=("bucketed", "any_rows"), default="bucketed")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import profile_forward
    from daemon import fast_linear
    from daemon.kv_cache import InPlaceCache
    from daemon.model import load_runtime

    torch.set_num_threads(args.threads)
    rt = load_runtime(None, device="cpu")
    if args.variant == "any_rows":
        fast_linear.packed_linear = profile_forward._packed_any_rows
    text = (Path(__file__).resolve().parents[1] / "daemon" / "engine.py").read_text() * 3
    ids = torch.tensor([rt.encode(text)[:1200]])  # [1, 1200]
    cache = InPlaceCache()
    rt.forward(ids[:, :600], cache, keep_last=1)
    sizes = list(range(1, 65)) + list(range(65, 513, 7))
    start = rss_mib()
    print(f"{args.variant}: {rss_mib()} MiB resident after the context; passes of {len(sizes)} sizes per sweep")
    for sweep in range(args.sweeps):
        for n in sizes:
            rt.forward(ids[:, 600:600 + n], cache)
            cache.crop(-n)
        print(f"{args.variant}: after sweep {sweep + 1}: +{rss_mib() - start} MiB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
