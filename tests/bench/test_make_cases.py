"""``--make-cases``: cursors at code lines inside function bodies, valid cases, kinds."""

from __future__ import annotations

import ast
import json

import pytest

from daemon.bench_cases import BenchCaseError, load_cases, make_cases, overlap_score, _grams
from daemon.cli import main


def enclosing_function(text: str, offset: int):
    line = text.count("\n", 0, offset) + 1
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.body[0].lineno <= line <= node.end_lineno:
            return node
    return None


def test_made_cases_load_and_sit_inside_function_bodies(tmp_path, workspace):
    cases = make_cases(workspace, n=6, seed=0)
    assert 1 <= len(cases) <= 6
    path = tmp_path / "made.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    loaded = load_cases(path)
    assert [c.id for c in loaded] == [c["id"] for c in cases]
    for case in loaded:
        original = (workspace / case.file).read_text()
        assert original[case.offset:].startswith(case.extra.get("anchor", "") or "")
        assert enclosing_function(original, case.offset) is not None
        line_start = original.rfind("\n", 0, case.offset) + 1
        assert original[line_start:case.offset].strip() == ""  # after the indentation, nothing typed yet
        assert case.kind in ("ordinary", "repeat", "norepeat")
        # the cut removed the rest of the function: its text is no longer after the cursor
        func = enclosing_function(original, case.offset)
        last_line = original.splitlines()[func.end_lineno - 1]
        assert last_line not in case.text[case.offset:case.offset + len(last_line) + 1] or not last_line.strip()


def test_same_seed_same_cases_other_seed_may_differ(workspace):
    assert make_cases(workspace, n=4, seed=3) == make_cases(workspace, n=4, seed=3)


def test_repeat_score():
    elsewhere = _grams("def area(self):\n    result = self.side * self.side\n    return result\n")
    assert overlap_score("result = self.side * self.side\n    return result", elsewhere) == 1.0
    assert overlap_score("completely fresh words appear here and nowhere else at all", elsewhere) == 0.0


def test_make_cases_errors(tmp_path):
    with pytest.raises(BenchCaseError, match="not a directory"):
        make_cases(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchCaseError, match="no Python files"):
        make_cases(tmp_path / "empty")
    with pytest.raises(BenchCaseError, match="--n must be"):
        make_cases(tmp_path, n=0)


def test_cli_make_cases_writes_jsonl(tmp_path, workspace, capsys):
    out = tmp_path / "c.jsonl"
    assert main(["bench", "--make-cases", str(workspace), "--n", "3", "--seed", "1", "--out", str(out)]) == 0
    assert len(load_cases(out)) == len(out.read_text().splitlines()) >= 1
    assert main(["bench", "--make-cases", str(tmp_path / "absent")]) == 2
    assert "not a directory" in capsys.readouterr().err
