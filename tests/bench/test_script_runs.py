"""daemon/bench/script_runs.py: the command line, cases and JSON the measuring scripts share."""

from __future__ import annotations

import argparse
import json

import pytest

from ngramd.daemon.bench.script_runs import completion_cases, measuring_arguments, write_script_run


def _cases_file(tmp_path, workspace):
    lines = [{"id": "c1", "workspace": str(workspace), "file": "pkg/shapes.py", "offset": 10, "max_tokens": 8, "mode": "complete"},
             {"id": "c2", "workspace": str(workspace), "file": "pkg/shapes.py", "offset": 20, "max_tokens": 8, "mode": "complete"},
             {"id": "e1", "workspace": str(workspace), "file": "pkg/util.py", "offset": 0, "end": 10,
              "instruction": "Rename x.", "max_tokens": 8, "mode": "edit"}]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_completion_cases_are_those_of_the_file_or_those_only_names(tmp_path, workspace):
    path = _cases_file(tmp_path, workspace)
    every = measuring_arguments("d", repeat=3, argv=["--cases", str(path)])
    assert every.repeat == 3 and every.json is None and every.model is None
    assert [c.id for c in completion_cases(every)] == ["c1", "c2"]  # the edit left out
    named = measuring_arguments("d", repeat=3, argv=["--cases", str(path), "--only", "c2,e1"])
    assert [c.id for c in completion_cases(named)] == ["c2"]


def test_fewer_than_one_round_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        measuring_arguments("d", repeat=3, argv=["--repeat", "0"])
    assert exc.value.code == 2 and "--repeat must be at least 1" in capsys.readouterr().err


def test_the_run_is_written_only_where_asked(tmp_path):
    out = tmp_path / "run.json"
    args = measuring_arguments("d", repeat=2, argv=["--json", str(out), "--cases", "x.jsonl"])
    write_script_run(args, [{"id": "c1"}], {"cases": 1})
    run = json.loads(out.read_text())
    assert run["cases"] == [{"id": "c1"}] and run["summary"] == {"cases": 1}
    assert run["meta"]["repeat"] == 2 and run["meta"]["cases_file"] == "x.jsonl" and run["meta"]["model"] == "embedded"
    out.unlink()
    write_script_run(measuring_arguments("d", repeat=2, argv=[]), [], {})
    assert not out.exists()


def test_a_script_adds_options_of_its_own():
    def own(ap):
        ap.add_argument("--tokens", type=int, default=1024)

    assert measuring_arguments("d", repeat=2, argv=[], extra=own).tokens == 1024
    args = measuring_arguments("d", repeat=2, argv=["--tokens", "300", "--repeat", "4"], extra=own)
    assert (args.tokens, args.repeat) == (300, 4)


def test_prefill_batch_sizes_always_measure_the_base(load_script):
    """``measure_prefill_batch.py --sizes``: sorted, deduplicated, 512 (the ratios' base) added; bad lists refused."""
    script = load_script("measure_prefill_batch")
    assert script.batch_sizes("256,128,256") == (128, 256, 512)
    assert script.batch_sizes("512") == (512,)
    for bad in ("", "a,256", "0,256", "-64"):
        with pytest.raises(argparse.ArgumentTypeError):
            script.batch_sizes(bad)
