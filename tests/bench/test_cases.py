"""Case loading: valid cases resolve, malformed ones are rejected with a clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ngramd.daemon.bench.cases import (BenchCaseError, load_cases, parse_case, resolve_workspace, stdlib_root,
                                workspace_ref_for)

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, *objs, raw: str | None = None) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text(raw if raw is not None else "".join(json.dumps(o) + "\n" for o in objs))
    return path


def good(ws: Path, **over):
    case = {"id": "a", "workspace": str(ws), "file": "pkg/util.py", "offset": 0,
            "max_tokens": 16, "mode": "complete"}
    case.update(over)
    return case


def test_valid_case_resolves_text_and_defaults(tmp_path, workspace):
    (case,) = load_cases(write(tmp_path, good(workspace, offset=10)))
    assert case.text == (workspace / "pkg/util.py").read_text()
    assert case.offset == 10 and case.kind == "ordinary" and case.mode == "complete"
    assert case.path == workspace / "pkg/util.py"


def test_relative_workspace_is_relative_to_the_cases_file(tmp_path, workspace):
    (case,) = load_cases(write(tmp_path, good(workspace, workspace="ws")))
    assert case.workspace == workspace.resolve()


def test_buffer_replaces_the_file_and_cut_removes_after_cursor(tmp_path, workspace):
    (case,) = load_cases(write(tmp_path, good(workspace, buffer="abcdefgh", offset=2, cut=3)))
    assert case.text == "abfgh" and case.offset == 2


def test_anchor_moves_the_cursor_to_its_nearest_occurrence(tmp_path, workspace):
    text = (workspace / "pkg/util.py").read_text()
    true_offset = text.index("t = clamp")
    (case,) = load_cases(write(tmp_path, good(workspace, offset=true_offset - 7, anchor="t = clamp")))
    assert case.offset == true_offset


def test_stdlib_workspace_references():
    assert resolve_workspace("stdlib:") == stdlib_root()
    assert resolve_workspace("stdlib:json") == stdlib_root() / "json"
    assert resolve_workspace("stdlib:email.mime") == stdlib_root() / "email" / "mime"
    assert workspace_ref_for(stdlib_root() / "json") == "stdlib:json"
    with pytest.raises(BenchCaseError, match="no stdlib package"):
        resolve_workspace("stdlib:textwrap")  # a module, not a package directory
    with pytest.raises(BenchCaseError, match="not a module name"):
        resolve_workspace("stdlib:../etc")


@pytest.mark.parametrize("change, message", [
    ({"id": None}, "field 'id' must be str"),
    ({"offset": "3"}, "field 'offset' must be int"),
    ({"offset": True}, "field 'offset' must be int"),
    ({"offset": -1}, "offset must be >= 0"),
    ({"offset": 10_000}, "past the end"),
    ({"max_tokens": 0}, "max_tokens must be >= 1"),
    ({"mode": "fill"}, "mode must be one of"),
    ({"kind": "weird"}, "kind must be one of"),
    ({"file": "nope.py"}, "no file"),
    ({"file": "../x.py"}, "must be relative"),
    ({"workspace": "/no/such/dir"}, "not a directory"),
    ({"anchor": "this text is not in the file"}, "anchor"),
    ({"mode": "edit"}, "needs 'instruction' and 'end'"),
    ({"mode": "edit", "instruction": "x", "end": 1, "cut": 2}, "cannot have a cut"),
    ({"mode": "edit", "instruction": "x", "end": 10_000}, "end 10000 outside"),
    ({"cut": -2}, "cut must be >= 0"),
    ({"cut": 10_000}, "runs past the end of the text"),
    ({"instruction": "rename x"}, "belong to edit cases"),
    ({"end": 5}, "belong to edit cases"),
])
def test_malformed_case_is_rejected_with_its_reason(tmp_path, workspace, change, message):
    case = good(workspace, **change)
    with pytest.raises(BenchCaseError, match=message) as info:
        load_cases(write(tmp_path, case))
    assert "cases.jsonl:1" in str(info.value)  # names the file and line


def test_missing_field_bad_json_duplicates_and_empty_file(tmp_path, workspace):
    case = good(workspace)
    del case["max_tokens"]
    with pytest.raises(BenchCaseError, match="missing field 'max_tokens'"):
        load_cases(write(tmp_path, case))
    with pytest.raises(BenchCaseError, match=r"cases.jsonl:2: not valid JSON"):
        load_cases(write(tmp_path, raw=json.dumps(good(workspace)) + "\n{oops\n"))
    with pytest.raises(BenchCaseError, match="duplicate id 'a'"):
        load_cases(write(tmp_path, good(workspace), good(workspace)))
    with pytest.raises(BenchCaseError, match="no cases"):
        load_cases(write(tmp_path, raw="# only a comment\n\n"))
    with pytest.raises(BenchCaseError, match="a case is a JSON object"):
        parse_case([1, 2])
    with pytest.raises(BenchCaseError, match="cannot read cases file"):
        load_cases(tmp_path / "absent.jsonl")


def test_edit_case_keeps_instruction_and_range(tmp_path, workspace):
    (case,) = load_cases(write(tmp_path, good(workspace, mode="edit", offset=4, end=9, instruction="rename")))
    assert (case.offset, case.end, case.instruction) == (4, 9, "rename")


@pytest.mark.parametrize("name", ["stdlib.jsonl", "stdlib_wide.jsonl", "smoke.jsonl", "edits.jsonl",
                                  "edits_wide.jsonl", "edits_few.jsonl"])
def test_committed_cases_load_on_this_python(name):
    cases = load_cases(REPO / "bench" / "cases" / name)
    assert cases and all(c.workspace_ref.startswith("stdlib:") for c in cases)
    if name.startswith("edits"):
        # each range starts at a def (its anchor) and ends at the end of a line
        assert all(c.mode == "edit" and c.instruction for c in cases)
        assert all(re.match(r"(async\s+)?def ", c.text[c.offset:]) for c in cases)
        assert all(c.text[c.offset:c.end].rstrip(" ").endswith("\n") for c in cases)
    if name == "stdlib.jsonl":
        kinds = {c.kind for c in cases}
        assert kinds == {"ordinary", "repeat", "norepeat"}
        assert 12 <= len(cases) <= 20
    if name == "stdlib_wide.jsonl":  # 20 cases from each of 5 packages, none of stdlib.jsonl's
        assert len(cases) == 100 and len({c.workspace_ref for c in cases}) == 5
        assert {c.kind for c in cases} == {"ordinary", "repeat", "norepeat"}
    if name == "edits_wide.jsonl":  # --make-cases --mode edit --n 8 on 6 packages (one has 7 functions)
        assert len(cases) == 47 and len({c.workspace_ref for c in cases}) == 6


def test_the_few_line_edits_are_rows_of_the_two_edit_sets_unchanged():
    """docs/benchmarks.md times them as a subset: a row edited in one file only would make
    the few-line figures and the sets' figures disagree about the same case."""
    def rows(name):
        lines = (REPO / "bench" / "cases" / name).read_text().splitlines()
        return {row["id"]: row for row in map(json.loads, lines)}
    few = rows("edits_few.jsonl")
    sets = rows("edits.jsonl") | rows("edits_wide.jsonl")
    assert len(few) == 16
    assert all(sets.get(case_id) == row for case_id, row in few.items())


def test_offsets_count_the_carriage_returns_of_a_crlf_file(tmp_path):
    (tmp_path / "m.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    case = parse_case(good(tmp_path, file="m.py", offset=7, anchor="b = 2"))
    assert case.offset == 7 and case.text == "a = 1\r\nb = 2\r\n"


def test_bad_json_message_names_the_column_once(tmp_path, workspace):
    path = write(tmp_path, raw='{"id": "a\n')
    with pytest.raises(BenchCaseError) as info:
        load_cases(path)
    assert "at at" not in str(info.value) and "column" in str(info.value)


def test_a_byte_order_mark_is_not_part_of_the_text_nor_counted_in_offsets(tmp_path):
    """As in the editors, the CLI and the index (and the cases --make-cases writes from it)."""
    (tmp_path / "m.py").write_bytes("\ufeffa = 1\nb = 2\n".encode("utf-8"))
    case = parse_case(good(tmp_path, file="m.py", offset=6, anchor="b = 2"))
    assert case.text == "a = 1\nb = 2\n" and case.offset == 6


def test_a_stdlib_folder_whose_name_is_no_module_name_is_written_as_its_path(tmp_path, monkeypatch):
    """--make-cases on config-3.11-x86_64-linux-gnu wrote "stdlib:config-3.11-...", which the loader refuses."""
    import ngramd.daemon.bench.cases as bench_cases

    odd = tmp_path / "config-3.11-x86_64-linux-gnu"
    odd.mkdir()
    (tmp_path / "json").mkdir()
    monkeypatch.setattr(bench_cases, "stdlib_root", lambda: tmp_path)
    assert workspace_ref_for(tmp_path / "json") == "stdlib:json"
    ref = workspace_ref_for(odd)
    assert ref == str(odd.resolve()) and resolve_workspace(ref) == odd.resolve()
