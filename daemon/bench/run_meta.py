"""The ``meta`` of a measuring script's JSON (scripts/compare_runtimes.py, measure_stop_cut.py):
when, on which commit and machine, with which cases, rounds and model a run was made."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any


def checkout_commit() -> str | None:
    """The short commit of the checkout this runs in; None outside one (or without git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def script_run_meta(cases_file: Path, repeat: int, model: str | None) -> dict[str, Any]:
    """A run's meta: date, commit, platform, CPUs, cases file, rounds, model (None: the embedded one)."""
    return {"date": time.strftime("%Y-%m-%d"), "commit": checkout_commit(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "cases_file": str(cases_file), "repeat": repeat,
            "model": model or "embedded"}
