"""What the measuring scripts that run the bench's completion cases in one process share
(scripts/measure_loop_overhead.py, measure_stop_cut.py, compare_runtimes.py): their command line
(``--cases``, ``--model``, ``--repeat``, ``--only``, ``--json``), the cases they run, and the
JSON they write (``meta``, ``cases``, ``summary``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ngramd.daemon.bench.run_meta import script_run_meta


def measuring_arguments(description: str, repeat: int, repeat_help: str = "rounds per case",
                        argv: Sequence[str] | None = None,
                        extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The shared command line, parsed; exits with a usage error for fewer than one round.
    ``extra`` adds a script's own options to the parser."""
    ap = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(ap)
    ap.add_argument("--cases", type=Path, default=Path("bench/cases/stdlib.jsonl"))
    ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    ap.add_argument("--repeat", type=int, default=repeat, help=repeat_help)
    ap.add_argument("--only", default="", help="comma-separated case ids (default: every completion case)")
    ap.add_argument("--json", type=Path, default=None, help="write the per-case figures here")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    return args


def completion_cases(args: argparse.Namespace) -> list[Any]:
    """The completion cases of ``args.cases``, those named by ``--only`` where it names any."""
    from ngramd.daemon.bench.cases import load_cases

    only = {x for x in args.only.split(",") if x}
    return [c for c in load_cases(args.cases) if c.mode == "complete" and (not only or c.id in only)]


def write_script_run(args: argparse.Namespace, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The run's JSON at ``--json``, if asked: its meta (script_run_meta), the rows, the summary."""
    if args.json is not None:
        meta = script_run_meta(args.cases, args.repeat, args.model)
        args.json.write_text(json.dumps({"meta": meta, "cases": rows, "summary": summary}, indent=1) + "\n")
