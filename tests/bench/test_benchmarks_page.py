"""docs/benchmarks.md's tables are what scripts/render_benchmarks.py makes of bench/runs/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def renderer(load_script):
    return load_script("render_benchmarks")


def test_the_page_is_what_the_committed_runs_render(renderer):
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert renderer.render_page(page) == page, "run: .venv/bin/python scripts/render_benchmarks.py --write"


def test_every_table_is_on_the_page_and_every_listed_run_is_there(renderer):
    r = renderer
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    names = set(re.findall(r"<!-- begin generated: ([\w-]+) -->", page))
    assert names == set(r.TABLES)
    for run in r.RUNS:
        assert (r.RUNS_DIR / run.file).is_file(), run.file
        assert set(run.tables) <= set(r.TABLES), run
        assert re.fullmatch(r"[0-9a-f]{7,40}", run.commit), run
        json.loads((r.RUNS_DIR / run.file).read_text(encoding="utf-8"))


def test_a_changed_run_changes_the_page(tmp_path, monkeypatch, renderer):
    """The check can fail: a figure edited in a run's JSON shows up as a difference."""
    r = renderer
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
