"""What scripts/bench_edit_prepared.py and scripts/bench_completion_prepared.py share: their
arguments, their cases (as ``ngramd bench`` runs them), and each case run four ways per
repeat, interleaved, prepared against cold, speculative against plain.

Each run starts from cold KV caches of the case's document (``drop_cache``). A prepared
run first calls ``prepare`` untimed (its own time is reported apart: it runs while the
user is not waiting), then the request, timed (wall clock around it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

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


def parse_args(cases: Path, what: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
               ) -> argparse.Namespace:
    """``--cases`` (default ``cases``), ``--repeat``, ``--ids`` (default: every ``what`` case), and
    the script's own (``extra``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=str(cases))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ids", default="", help=f"comma-separated case ids (default: every {what} case)")
    if extra is not None:
        extra(ap)
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    return args


def measure_cases(args: argparse.Namespace, mode: str,
                  calls: Callable[[Any, Any], tuple[Callable[[], Any], Callable[[bool], Any]]],
                  ) -> Iterator[tuple[Any, Measured]]:
    """Every ``mode`` case of ``args.cases`` (those of ``args.ids`` when given), measured as
    ``ngramd bench`` handles a case: a Completer of the default model on the case's workspace
    index, no history, the case's file out of the index and its text the open buffer.
    ``calls(completer, case)``: the case's (prepare, request(speculate))."""
    from daemon.bench_cases import load_cases
    from daemon.bench_runner import BenchRunner, case_document
    from daemon.completer import Completer
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime

    wanted = {i for i in args.ids.split(",") if i}
    cases = [c for c in load_cases(args.cases) if c.mode == mode and (not wanted or c.id in wanted)]
    if not cases:  # before the model loads: nothing to measure is an error, not a report of nan
        which = f" among --ids {args.ids}" if wanted else ""
        raise SystemExit(f"no {mode} cases in {args.cases}{which}")
    rt = load_runtime(None, device="cpu")
    runner = BenchRunner(rt, hf=False)  # only for its per-workspace index
    for n, case in enumerate(cases):
        index = runner.index_for(case.workspace)
        completer = Completer(rt, index, EngineConfig(add_history=False))
        prepare, request = calls(completer, case)
        with case_document(index, case):
            measured = measure(completer, case.path.as_uri(), prepare, request, args.repeat, warm_up=n == 0)
        print(f"{case.id}: done", flush=True)
        yield case, measured
