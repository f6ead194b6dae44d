#!/usr/bin/env python
"""Whole-pass cost of ``ModelRuntime.forward`` by new-token count n, old vs new forward path, side by side.

    .venv/bin/python scripts/profile_forward.py [--threads 1] [--context 1000] [--rounds 6] [--profile N]

Variants (one model, switched between passes):
- ``before``: transformers' DynamicCache (appends by torch.cat) and F.linear everywhere;
- ``cache``: the in-place KV cache (daemon/kv_cache.py), F.linear everywhere;
- ``linear``: ``cache`` plus daemon/fast_linear.py's row table;
- ``after``: ``linear`` plus daemon/fast_attention.py (copy-free GQA), with unpacked weights;
- ``packed``: ``after`` with oneDNN's pre-packed weights from 3 rows on (``PACKED_WX_ROWS``):
  what the daemon runs for models within ``fast_linear.PACK_MAX_BYTES``.
Extra variants to decide the tables: ``head_all`` / ``layers_all`` (W @ x.T for every n <= 32 in the
lm_head / in the decoder layers), ``packed_wx4`` (packed, W @ x.T up to 4 rows in the layers).

Each round runs every (n, variant) once, round-robin, so a busy CPU biases no variant;
the figure is the minimum over rounds (other processes only ever add time).
``--profile N``: print torch profiler tables for n=N instead (before vs after).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon import fast_attention, fast_linear  # noqa: E402
from daemon.kv_cache import InPlaceCache  # noqa: E402
from daemon.model import load_runtime  # noqa: E402

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
TABLE = dict(fast_linear.WX_ROWS)
UP_TO_32 = frozenset(range(1, 33))
PACKED = dict(fast_linear.PACKED_WX_ROWS)
VARIANTS = {  # name: (cache class, head rows, layer rows, attention, packed weights)
    "before": ("dynamic", frozenset(), frozenset(), "sdpa", False),
    "cache": ("inplace", frozenset(), frozenset(), "sdpa", False),
    "linear": ("inplace", TABLE["head"], TABLE["layer"], "sdpa", False),
    "after": ("inplace", TABLE["head"], TABLE["layer"], fast_attention.NAME, False),
    "head_all": ("inplace", UP_TO_32, TABLE["layer"], fast_attention.NAME, False),
    "layers_all": ("inplace", TABLE["head"], UP_TO_32, fast_attention.NAME, False),
    "packed": ("inplace", PACKED["head"], PACKED["layer"], fast_attention.NAME, True),
    "packed_wx4": ("inplace", PACKED["head"], frozenset(range(1, 5)), fast_attention.NAME, True),
    # packed weights called with any row count, as before the row buckets (fast_linear.PACK_BUCKETS)
    "packed_any_rows": ("inplace", PACKED["head"], PACKED["layer"], fast_attention.NAME, True),
}
BUCKETED_LINEAR = fast_linear.packed_linear


def _packed_any_rows(x, packed, bias, n):  # one oneDNN call with all n rows (a kernel kept per n)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
PACKS: dict[object, object] = {}  # FastLinear -> its packed weight, taken off for unpacked variants


def make_cache(kind: str):
    from transformers import DynamicCache

    return DynamicCache() if kind == "dynamic" else InPlaceCache()


def run_pass(rt, cache, ids: torch.Tensor, ctx: int, n: int, variant: str) -> float:
    _, head, layer, attention, packed = VARIANTS[variant]
    fast_linear.WX_ROWS.update(head=head, layer=layer)
    fast_linear.PACKED_WX_ROWS.update(head=head, layer=layer)
    for module, weight in PACKS.items():
        module.packed = weight if packed else None
    fast_linear.packed_linear = _packed_any_rows if variant == "packed_any_rows" else BUCKETED_LINEAR
    if rt.model.config._attn_implementation != attention:
        rt.model.set_attn_implementation(attention)
    t0 = time.perf_counter()
    rt.forward(ids[:, ctx:ctx + n], cache)
    dt = (time.perf_counter() - t0) * 1000
    cache.crop(-n)  # roll back: DynamicCache slices (a view), InPlaceCache moves its length
    return dt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--variants", default="before,cache,after")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rt = load_runtime(args.model, device="cpu")
    ctx = args.context
    variants = args.variants.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = torch.randint(100, 30000, (1, ctx + max(sizes)), generator=torch.Generator().manual_seed(0))
    rt.forward(ids[:, :1], make_cache("inplace"))  # installs the fast paths
    PACKS.update({m: m.packed for m in rt.model.modules() if getattr(m, "packed", None) is not None})
    if any(VARIANTS[v][4] for v in variants) and not PACKS:
        print("no packed weights here (fast_linear.can_pack is false): packed variants run unpacked")
    caches = {}
    for v in variants:
        caches[v] = make_cache(VARIANTS[v][0])
        rt.forward(ids[:, :ctx], caches[v], keep_last=1)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for v in variants:
            for _ in range(2):
                run_pass(rt, caches[v], ids, ctx, args.profile, v)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    run_pass(rt, caches[v], ids, ctx, args.profile, v)
            print(f"--- {v}, n={args.profile}, 3 passes")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
        return 0
    best: dict[tuple[int, str], float] = {}
    for rnd in range(args.rounds + 1):
        for n in sizes:
            for v in variants:
                dt = run_pass(rt, caches[v], ids, ctx, n, v)
                if rnd:  # round 0 warms up
                    best[(n, v)] = min(best.get((n, v), float("inf")), dt)
    print(f"threads={args.threads} context={ctx} rounds={args.rounds}; ms per pass (min)")
    print("| n | " + " | ".join(variants) + " |")
    print("|---" * (len(variants) + 1) + "|")
    for n in sizes:
        print(f"| {n} | " + " | ".join(f"{best[(n, v)]:.1f}" for v in variants) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
