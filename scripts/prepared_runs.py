"""What scripts/bench_edit_prepared.py and scripts/bench_completion_prepared.py share: one
case run four ways per repeat, interleaved, prepared against cold, speculative against plain.

Each run starts from cold KV caches of the case's document (``drop_cache``). A prepared
run first calls ``prepare`` untimed (its own time is reported apart: it runs while the
user is not waiting), then the request, timed (wall clock around it).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

VARIANTS = ("cold_spec", "cold_plain", "prep_spec", "prep_plain")


@dataclass
class Measured:
    ms: dict[str, float]  # median ms per variant
    prepare_ms: float  # median time of the prepares
    first: dict[str, Any]  # the first result of each variant
    identical: bool  # every run of every variant token-identical to the first cold plain one


def measure(completer: Any, uri: str, prepare: Callable[[], Any], request: Callable[[bool], Any],
            repeat: int, warm_up: bool) -> Measured:
    """Run ``request(speculate)`` four ways per repeat (``VARIANTS``), ``prepare()`` first for
    the prepared ones. ``warm_up``: one untimed round first (one-time kernel and calibration
    costs out of the first case)."""
    def run(variant: str) -> tuple[Any, float, float | None]:
        completer.drop_cache(uri)
        prepare_ms = None
        if variant.startswith("prep"):
            t0 = time.perf_counter()
            prepare()
            prepare_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        result = request(variant.endswith("spec"))
        return result, (time.perf_counter() - t0) * 1000, prepare_ms

    if warm_up:
        for variant in VARIANTS:
            run(variant)
    ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    outs: dict[str, list[Any]] = {v: [] for v in VARIANTS}
    prepare_ms = []
    for _ in range(repeat):
        for variant in VARIANTS:
            result, t, p = run(variant)
            ms[variant].append(t)
            outs[variant].append(result)
            if p is not None:
                prepare_ms.append(p)
    ref = outs["cold_plain"][0]
    return Measured({v: statistics.median(ms[v]) for v in VARIANTS}, statistics.median(prepare_ms),
                    {v: outs[v][0] for v in VARIANTS},
                    all(r.token_ids == ref.token_ids for runs in outs.values() for r in runs))


def total(rows: list[dict[str, Any]], num: str, den: str) -> float:
    """Sum of ``num`` over sum of ``den``: a total speedup over ``rows``."""
    return sum(r[num] for r in rows) / sum(r[den] for r in rows) if rows else float("nan")
