"""``ngramd bench`` when an output cannot be written: one clear line, and the run's report is never lost."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from ngramd.daemon.cli import bench_cmd
from ngramd.daemon.bench.report import build_report
from ngramd.daemon.cli.main import main

SMOKE = "bench/cases/smoke.jsonl"


def fake_bench(calls):
    """A stand-in for ``bench_cmd.bench`` that hands two rows to ``on_row`` and reports them."""
    def bench(cases, on_row=None, **kwargs):
        calls.append(len(cases))
        rows = [{"id": f"r{i}", "kind": "ordinary", "mode": "complete", "status": "unsupported",
                 "error": "fake"} for i in range(2)]
        for row in rows:
            on_row(row)
        return build_report(rows, {"model": "fake", "device": "cpu"})
    return bench


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch):
    """The runs here are stand-ins: no model is loaded for them."""
    monkeypatch.setattr(bench_cmd, "load_runtime", lambda model, device, runtime="auto", **_: SimpleNamespace(name="fake"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_rows_write_failure_warns_once_and_the_report_is_still_printed(monkeypatch, capsys):
    calls: list[int] = []
    monkeypatch.setattr(bench_cmd, "bench", fake_bench(calls))
    assert main(["bench", "--cases", SMOKE, "--rows", "/dev/full", "--json"]) == 0
    out, err = capsys.readouterr()
    assert calls and [r["id"] for r in json.loads(out)["cases"]] == ["r0", "r1"]
    assert err.count("cannot write --rows /dev/full") == 1 and "Traceback" not in err


@pytest.mark.parametrize("where", ["missing_folder", "a_folder"])
def test_make_cases_out_that_cannot_be_written_is_one_line_and_rc_2(tmp_path, workspace, capsys, where):
    out = tmp_path / "no" / "such" / "c.jsonl" if where == "missing_folder" else tmp_path
    assert main(["bench", "--make-cases", str(workspace), "--n", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ngramd bench: cannot write --out {out}") and err.count("\n") == 1


@pytest.mark.parametrize("plot, message", [("p.foo", "cannot write .foo files"),
                                           ("nodir/p.png", "no folder")])
def test_a_plot_that_cannot_be_written_fails_before_the_run(monkeypatch, tmp_path, capsys, plot, message):
    pytest.importorskip("matplotlib")
    calls: list[int] = []
    monkeypatch.setattr(bench_cmd, "bench", fake_bench(calls))
    assert main(["bench", "--cases", SMOKE, "--plot", str(tmp_path / plot)]) == 2
    assert message in capsys.readouterr().err and not calls


def test_a_plot_path_without_a_folder_or_suffix_is_accepted(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_cmd, "bench", fake_bench([]))
    assert main(["bench", "--cases", os.path.join(os.path.dirname(bench_cmd.__file__), "..", "..", SMOKE),
                 "--plot", "speedups"]) == 0
    assert (tmp_path / "speedups.png").exists() or (tmp_path / "speedups").exists()


def test_make_cases_with_cases_is_refused_not_half_done(tmp_path, workspace, capsys):
    out = tmp_path / "made.jsonl"
    assert main(["bench", "--cases", str(tmp_path / "x.jsonl"), "--make-cases", str(workspace),
                 "--out", str(out)]) == 2
    assert "give one of the two" in capsys.readouterr().err and not out.exists()


def test_typed_instruction_without_prepared_is_refused_before_anything_runs(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(bench_cmd, "bench", fake_bench(calls))
    assert main(["bench", "--cases", SMOKE, "--typed-instruction"]) == 2
    assert "give --prepared too" in capsys.readouterr().err and calls == []


@pytest.mark.parametrize("argv, says", [
    (["--prepared-repeat", "9"], "give --prepared too"),  # would run nothing more
    (["--prepared", "--repeat", "5", "--prepared-repeat", "3"], "at least --repeat (5)"),
])
def test_prepared_repeat_without_prepared_or_below_repeat_is_refused(monkeypatch, capsys, argv, says):
    calls = []
    monkeypatch.setattr(bench_cmd, "bench", fake_bench(calls))
    assert main(["bench", "--cases", SMOKE, *argv]) == 2
    assert says in capsys.readouterr().err and calls == []


def test_a_model_that_cannot_load_is_one_line_and_leaves_no_rows_file(monkeypatch, tmp_path, capsys):
    monkeypatch.undo()  # the real loader
    rows = tmp_path / "rows.jsonl"
    for model in ("/nonexistent.gguf", str(tmp_path)):  # no file; a folder that holds no model
        assert main(["bench", "--cases", SMOKE, "--model", model, "--device", "cpu", "--rows", str(rows)]) == 2
        err = capsys.readouterr().err
        assert "ngramd bench: error:" in err and "Traceback" not in err
        assert not rows.exists()


@pytest.mark.parametrize("argv, named", [
    (["--cases", SMOKE, "--mode", "edit"], "--mode"),
    (["--cases", SMOKE, "--n", "5", "--seed", "1"], "--n, --seed"),
    (["--make-cases", "index", "--repeat", "3"], "--repeat"),
    (["--make-cases", "index", "--prepared", "--json"], "--json, --prepared"),
    (["--make-cases", "index", "--device", "cpu"], "--device"),
])
def test_an_option_of_the_other_use_is_refused_not_ignored(monkeypatch, capsys, argv, named):
    calls: list[int] = []
    monkeypatch.setattr(bench_cmd, "bench", fake_bench(calls))
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "only apply with" in err and not calls


@pytest.mark.parametrize("where, reason", [("absent/rows.jsonl", "no folder"), (".", "it is a folder")])
def test_rows_that_cannot_be_written_are_refused_before_the_model_loads(monkeypatch, tmp_path, capsys,
                                                                        where, reason):
    loads: list[str] = []
    monkeypatch.setattr(bench_cmd, "load_runtime", lambda model, device, runtime="auto", **_: loads.append(model))
    assert main(["bench", "--cases", SMOKE, "--rows", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert "cannot write --rows" in err and reason in err and not loads
