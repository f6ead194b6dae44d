"""The whole bench with the real engine and index on the tiny model: two cases,
well-formed output, identical flags present, a summary; the CLI's JSON and exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ngramd.daemon.bench.cases import load_cases
from ngramd.daemon.cli.bench_cmd import bench
from ngramd.daemon.cli.main import main

ROW_KEYS = {"id", "kind", "mode", "status", "prompt", "prompt_tokens", "text", "token_ids", "generated",
            "ms", "plain_ms", "hf_prompt_lookup_ms", "first_token_ms", "forward_passes", "plain_forward_passes",
            "drafted", "accepted", "acceptance", "acceptance_by_source", "accepted_per_pass", "trace",
            "identical", "hf_identical", "speedup_plain", "speedup_hf", "runs_ms", "stop_reason"}
SUMMARY_KEYS = {"cases", "ok", "identical", "not_identical", "all_identical", "vs_plain", "vs_hf",
                "decode_vs_plain", "decode_vs_hf", "by_kind", "targets", "acceptance", "tokens_per_pass"}


@pytest.fixture()
def cases_file(tmp_path, workspace):
    shapes = (workspace / "pkg/shapes.py").read_text()
    lines = [
        # the Rectangle's area: its sibling in Square looks alike
        {"id": "tiny-repeat", "workspace": str(workspace), "file": "pkg/shapes.py",
         "offset": shapes.index("result = self.width * self.height"), "max_tokens": 8, "mode": "complete",
         "kind": "repeat", "cut": len("result = self.width * self.height\n        return result\n")},
        {"id": "tiny-edit", "workspace": str(workspace), "file": "pkg/util.py", "offset": 0,
         "end": (workspace / "pkg/util.py").read_text().index("\n\n") + 1,
         "instruction": "Rename the function clamp to bound.",
         "max_tokens": 8, "mode": "edit"},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in lines))
    return path


def test_bench_on_two_tiny_cases(tiny_runtime, cases_file):
    report = bench(load_cases(cases_file), runtime=tiny_runtime, repeat=1)
    assert [r["id"] for r in report["cases"]] == ["tiny-repeat", "tiny-edit"]
    for row in report["cases"]:
        assert row["status"] == "ok", row.get("error")  # both modes run: complete and edit
        assert ROW_KEYS <= row.keys()
        assert isinstance(row["identical"], bool)
        assert row["identical"], "speculation changed the output"
        assert len(row["token_ids"]) == row["generated"] >= 1
        assert row["ms"] > 0 and row["plain_ms"] > 0 and row["hf_prompt_lookup_ms"] > 0
        assert row["prompt"] and row["prompt_tokens"] > 0
        assert row["accepted"] <= row["drafted"]
        assert row["forward_passes"] <= row["plain_forward_passes"]
        assert row["hf_generated"] <= row["generated"]
        assert 1 <= row["hf_forward_passes"] <= row["hf_generated"]  # each of HF's passes yields a token or more
    edit = report["cases"][1]
    # judged (a rename of a whole function), and not done: 8 tokens cannot hold the function renamed
    assert edit["followed"] is False and edit["stop_reason"] == "max_tokens"
    summary = report["summary"]
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["identical"] == summary["ok"] == 2 and summary["all_identical"]
    assert "repeat" in summary["by_kind"]
    assert json.loads(json.dumps(report)) == report  # JSON-clean
    assert report["meta"]["model"] == "tiny"


def test_bench_prepared_times_the_editor_flow_with_the_same_head_start(tiny_runtime, cases_file):
    report = bench(load_cases(cases_file), runtime=tiny_runtime, repeat=2, hf=False, prepared=True)
    assert report["meta"]["prepared"] is True
    for row in report["cases"]:
        assert row["status"] == "ok", row.get("error")
        assert row["prepared_ms"] > 0 and row["prepared_plain_ms"] > 0 and row["prepare_ms"] > 0
        assert row["speedup_prepared"] == round(row["prepared_plain_ms"] / row["prepared_ms"], 3)
        assert len(row["runs_ms"]["prep_spec"]) == len(row["runs_ms"]["prep_plain"]) == 2
        assert row["prepared_identical"] is True and row["identical"] is True
        # the prepare did the prompt's work: the request prefilled at most the edit's instruction
        assert row["prepared_prefill_tokens"] < row["prompt_tokens"] // 2
        assert 0 < row["prepared_first_token_ms"] <= row["prepared_ms"]
        assert 0 < row["prepared_plain_first_token_ms"] <= row["prepared_plain_ms"]
    assert report["cases"][0]["prepared_prefill_tokens"] == 0  # a completion asked where it was prepared
    summary = report["summary"]
    assert summary["by_kind"]["repeat"]["prepared_vs_plain"]["total"] is not None
    assert summary["edits"]["prepared_vs_plain"]["total"] is not None
    assert "prepared" in summary["targets"]["repeat_vs_plain"]
    assert summary["targets"]["repeat_vs_plain"]["prepared_ceiling"] > 0


def test_prepared_repeat_runs_the_prepared_variants_alone_past_the_cold_rounds(tiny_runtime, cases_file):
    report = bench(load_cases(cases_file)[:1], runtime=tiny_runtime, repeat=1, prepared_repeat=3, hf=False,
                   prepared=True)
    assert report["meta"]["repeat"] == 1 and report["meta"]["prepared_repeat"] == 3
    row = report["cases"][0]
    assert row["status"] == "ok", row.get("error")
    runs = row["runs_ms"]
    assert len(runs["spec"]) == len(runs["plain"]) == 1  # the cold variants: --repeat rounds
    assert len(runs["prep_spec"]) == len(runs["prep_plain"]) == 3
    assert row["prepared_identical"] is True and row["identical"] is True
    with pytest.raises(ValueError, match="at least repeat"):
        bench(load_cases(cases_file)[:1], runtime=tiny_runtime, repeat=2, prepared_repeat=1, hf=False, prepared=True)


def test_bench_prepared_through_the_typed_instruction_leaves_the_edit_no_prompt_to_prefill(
        tiny_runtime, cases_file):
    report = bench(load_cases(cases_file), runtime=tiny_runtime, repeat=1, hf=False, prepared=True,
                   typed_instruction=True)
    assert report["meta"]["typed_instruction"] is True
    edit = next(row for row in report["cases"] if row["mode"] == "edit")
    assert edit["status"] == "ok" and edit["prepared_identical"] is True and edit["identical"] is True
    assert edit["prepared_prefill_tokens"] == 0  # its last prompt token rides with the first pass


def test_a_prepared_answer_unlike_plain_makes_the_case_not_identical_and_shows_where(
        tiny_runtime, cases_file, monkeypatch):
    """A stand-in fault on the prepared speculative path only (its second token changed): the cold
    runs agree, the case is reported not identical, with the prepared answer and where it departs."""
    import dataclasses

    from ngramd.daemon.bench.runner import BenchRunner

    real = BenchRunner._engine_run

    def faulty(self, case, index, speculate, max_tokens=None, prepared=False):
        run = real(self, case, index, speculate, max_tokens, prepared)
        if prepared and speculate and max_tokens is None:
            ids = list(run.result.token_ids)
            ids[1] += 1
            run = dataclasses.replace(run, result=dataclasses.replace(run.result, token_ids=ids))
        return run

    monkeypatch.setattr(BenchRunner, "_engine_run", faulty)
    report = bench(load_cases(cases_file)[:1], runtime=tiny_runtime, repeat=1, hf=False, prepared=True)
    row = report["cases"][0]
    assert row["prepared_identical"] is False and row["identical"] is False
    assert row["prepared_first_difference"] == 1
    assert row["prepared_token_ids"][1] == row["plain_token_ids"][1] + 1
    assert row["token_ids"] == row["plain_token_ids"]  # the cold runs agree
    assert report["summary"]["not_identical"] == ["tiny-repeat"]


def test_bench_without_prepared_has_no_prepared_figures(tiny_runtime, cases_file):
    report = bench(load_cases(cases_file)[:1], runtime=tiny_runtime, repeat=1, hf=False)
    row = report["cases"][0]
    assert "prepared_ms" not in row and set(row["runs_ms"]) == {"spec", "plain", "hf"}
    assert report["summary"]["by_kind"]["repeat"]["prepared_vs_plain"]["total"] is None
    assert "prepared" not in report["summary"]["targets"]["repeat_vs_plain"]


def test_cli_json_and_exit_code(cases_file, capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rc = main(["bench", "--cases", str(cases_file), "--model", "tiny", "--device", "cpu", "--json", "--no-hf",
               "--rows", str(rows)])
    out = json.loads(capsys.readouterr().out)
    assert rc == (0 if out["summary"]["all_identical"] else 1)
    assert out["cases"][0]["hf_prompt_lookup_ms"] is None and out["summary"]["vs_hf"]["total"] is None
    # each row was also appended as it was measured
    assert [json.loads(line) for line in rows.read_text().splitlines()] == out["cases"]


def test_cli_rejects_a_malformed_cases_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert main(["bench", "--cases", str(bad)]) == 2
    assert "missing field" in capsys.readouterr().err
    assert main(["bench"]) == 2
    good = Path(__file__).resolve().parents[2] / "bench" / "cases" / "smoke.jsonl"
    assert main(["bench", "--cases", str(good), "--model", "tiny", "--device", "cpu",
                 "--rows", str(tmp_path / "no" / "such" / "dir.jsonl")]) == 2
    assert "cannot write --rows" in capsys.readouterr().err


def test_the_bench_puts_each_case_buffer_in_the_index_once_per_case_document(tiny_runtime, cases_file, monkeypatch):
    """The case's buffer is opened by ``case_document`` alone (warm-up, then the case): the engine's
    own buffer sync would re-tokenize it inside the first timed run that syncs."""
    from ngramd.index.store import NgramIndex

    opened = []
    real = NgramIndex.open_buffer

    def counting(self, uri, text, *args, **kwargs):
        opened.append(uri)
        return real(self, uri, text, *args, **kwargs)

    monkeypatch.setattr(NgramIndex, "open_buffer", counting)
    report = bench(load_cases(cases_file), runtime=tiny_runtime, repeat=2, hf=False)
    assert [r["status"] for r in report["cases"]] == ["ok", "ok"]
    uris = [case.path.as_uri() for case in load_cases(cases_file)]
    # the first case: its warm-up's case_document and its own; the second: its own only
    assert opened == [uris[0], uris[0], uris[1]]
