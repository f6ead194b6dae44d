"""Two `ngramd bench --json` runs of the same cases set against each other, case by case: how
much faster the second is than the first in one variant's time (default: ngramd's, prepared).

    .venv/bin/python scripts/compare_bench_runs.py TORCH.json LLAMACPP.json [--field prepared_ms]

Prints the total ratio (sum of the first's times over the second's), the median and lowest
per-case ratio, and whether every case made the same tokens in both. Runs made back to back on
one machine only: two runs are not one run, so read the ratio with the machine's noise in mind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--field", default="prepared_ms", help="a case's time to compare (ms, prepared_ms, ...)")
    args = ap.parse_args()
    runs = [{c["id"]: c for c in json.loads(p.read_text())["cases"] if c.get("status") == "ok"}
            for p in (args.first, args.second)]
    ids = [i for i in runs[0] if i in runs[1] and runs[0][i].get(args.field) and runs[1][i].get(args.field)]
    if not ids:
        print(f"no case has {args.field} in both runs", file=sys.stderr)
        return 1
    ratios = {i: runs[0][i][args.field] / runs[1][i][args.field] for i in ids}
    total = sum(runs[0][i][args.field] for i in ids) / sum(runs[1][i][args.field] for i in ids)
    same = sum(runs[0][i].get("token_ids") == runs[1][i].get("token_ids") for i in ids)
    print(f"{len(ids)} cases, {args.field}: the second {total:.2f}x faster in total, "
          f"median {statistics.median(ratios.values()):.2f}x, lowest {min(ratios.values()):.2f}x "
          f"({min(ratios, key=ratios.get)}); same tokens in {same} of {len(ids)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
