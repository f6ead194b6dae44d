"""``--make-cases``: cursors at code lines inside function bodies, valid cases, kinds."""

from __future__ import annotations

import ast
import json

import pytest

from ngramd.daemon.bench.cases import BenchCaseError, load_cases, make_cases, overlap_score, _grams
from ngramd.daemon.cli.main import main


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


FUNC = "def total(values, factor):\n    total = 0\n    for value in values:\n        total += value * factor\n    return total\n"


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr_only"])
def test_made_cases_load_back_whatever_the_line_endings(tmp_path, newline):
    ws = tmp_path / "ws"
    ws.mkdir()
    source = (FUNC + "\n\n" + FUNC.replace("total", "sum_of")).replace("\n", newline)
    (ws / "m.py").write_bytes(source.encode())
    cases = make_cases(ws, n=4, seed=0)
    assert cases
    out = tmp_path / "c.jsonl"
    assert main(["bench", "--make-cases", str(ws), "--n", "4", "--out", str(out)]) == 0
    for made, case in zip(cases, load_cases(out)):
        assert "\r" not in made["anchor"]
        assert case.offset == made["offset"]  # offsets count the file's \r characters
        assert source[case.offset:].startswith(made["anchor"])


def test_made_cases_with_a_line_separator_in_a_string_load_back(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "m.py").write_text(FUNC.replace("total = 0", "total = 0; sep = '\u2028\x85'"), encoding="utf-8")
    out = tmp_path / "c.jsonl"
    assert main(["bench", "--make-cases", str(ws), "--n", "4", "--out", str(out)]) == 0
    assert len(load_cases(out)) >= 1


def test_file_names_that_are_not_utf8_are_skipped(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ok.py").write_text(FUNC)
    try:
        (ws / "\udcff.py").write_text(FUNC.replace("total", "other"))
    except (UnicodeEncodeError, OSError):
        pytest.skip("this file system does not take a non-UTF-8 name")
    out = tmp_path / "c.jsonl"
    assert main(["bench", "--make-cases", str(ws), "--n", "6", "--out", str(out)]) == 0
    assert {c.file for c in load_cases(out)} == {"ok.py"}
    assert main(["bench", "--make-cases", str(ws), "--n", "6"]) == 0
    assert "\udcff" not in capsys.readouterr().out


def test_no_cursor_message_says_which_files_were_skipped(tmp_path):
    # control bytes throughout: binary, not source in another encoding
    (tmp_path / "blob.py").write_bytes(FUNC.encode() + bytes(range(1, 32)) * 40 + b"\xff\xfe")
    with pytest.raises(BenchCaseError, match="1 skipped: not UTF-8 or binary"):
        make_cases(tmp_path)


def test_a_latin1_source_file_is_read_not_skipped(tmp_path):
    """index/workspace.py reads a file that is not UTF-8 by its coding line, else as Latin-1."""
    (tmp_path / "latin.py").write_bytes(FUNC.replace("total = 0", "total = 0  # \xe9").encode("latin-1"))
    cases = make_cases(tmp_path, n=2, seed=0)
    assert cases and {c["file"] for c in cases} == {"latin.py"}


@pytest.mark.parametrize("deep", ["    y = " + "+".join(["a"] * 3000) + "\n",  # RecursionError in ast
                                  "    y = " + "-" * 10000 + "1\n"])  # MemoryError (parser stack)
def test_a_file_too_deep_to_parse_is_skipped_not_fatal(tmp_path, deep):
    (tmp_path / "ok.py").write_text(FUNC)
    (tmp_path / "deep.py").write_text("def f(a):\n" + deep + "    return y\n")
    cases = make_cases(tmp_path, n=3, seed=0)
    assert cases and {c["file"] for c in cases} == {"ok.py"}
    (tmp_path / "ok.py").unlink()
    with pytest.raises(BenchCaseError, match="1 skipped: too deeply nested to parse"):
        make_cases(tmp_path)
