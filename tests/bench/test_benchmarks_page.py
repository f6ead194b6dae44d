"""docs/benchmarks.md's tables are what scripts/render_benchmarks.py makes of bench/runs/."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def renderer():
    spec = importlib.util.spec_from_file_location("render_benchmarks", REPO / "scripts" / "render_benchmarks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_committed_runs_render():
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert renderer().render_page(page) == page, "run: .venv/bin/python scripts/render_benchmarks.py --write"


def test_every_table_is_on_the_page_and_every_listed_run_is_there():
    r = renderer()
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    names = set(re.findall(r"<!-- begin generated: ([\w-]+) -->", page))
    assert names == set(r.TABLES)
    for run in r.RUNS:
        assert (r.RUNS_DIR / run.file).is_file(), run.file
        assert set(run.tables) <= set(r.TABLES), run
        assert re.fullmatch(r"[0-9a-f]{7,40}", run.commit), run
        json.loads((r.RUNS_DIR / run.file).read_text(encoding="utf-8"))


def test_a_changed_run_changes_the_page(tmp_path, monkeypatch):
    """The check can fail: a figure edited in a run's JSON shows up as a difference."""
    r = renderer()
    for other in r.RUNS:
        (tmp_path / other.file).write_bytes((r.RUNS_DIR / other.file).read_bytes())
    run = next(x for x in r.RUNS if "edits" in x.tables)
    report = json.loads((r.RUNS_DIR / run.file).read_text(encoding="utf-8"))
    for case in report["cases"]:
        case["plain_ms"] = case["plain_ms"] * 2
    (tmp_path / run.file).write_text(json.dumps(report), encoding="utf-8")
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    monkeypatch.setattr(r, "RUNS_DIR", tmp_path)
    assert r.render_page(page) != page


def test_the_page_speaks_of_the_project_alone():
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert not re.search(r"session \d", page, re.IGNORECASE)
