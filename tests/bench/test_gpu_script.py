"""scripts/gpu_bench.py: the projection's arithmetic and the --dry-run mode on CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "scripts" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def curve(ms_of_n):
    sizes = (1, 8, 64)
    return {"prefill_ms": {1000: 50.0, 4000: 200.0},
            "ms": {1000: {n: ms_of_n(n) for n in sizes}, 4000: {n: 2 * ms_of_n(n) for n in sizes}}}


def test_cost_interpolates_in_n_and_log_ctx(gpu_bench):
    cost = gpu_bench.Cost(curve(lambda n: 10.0 + n))
    assert cost(1, 1000) == 11.0 and cost(8, 1000) == 18.0
    assert cost(4, 1000) == pytest.approx(14.0)
    assert cost(1, 4000) == 22.0 and cost(1, 2000) == pytest.approx(16.5)  # halfway in log(ctx)
    assert cost.prefill_ms(4000) == 200.0


def test_projection_of_a_trace(gpu_bench):
    cost = gpu_bench.Cost(curve(lambda n: 10.0 + n))
    # 8 tokens in 2 passes: verify 5 (commit 5), then verify 4 (last pass)
    traces = {"cases": [{"id": "a", "kind": "repeat", "generated": 8, "passes": [[1000, 5, 5], [1005, 4, -1]]}]}
    (row,) = gpu_bench.project(traces, cost)
    spec = cost(5, 1000) + cost(4, 1005)
    plain = sum(cost(1, 1000 + i) for i in range(8))
    assert row["projected_decode_speedup"] == round(plain / spec, 3)
    assert row["projected_speedup"] == round((50 + plain) / (50 + spec), 3)
    assert gpu_bench.summarize_projection([row])["repeat"]["cases"] == 1


def test_traces_from_a_bench_report(gpu_bench):
    report = {"meta": {"model": "m"}, "cases": [
        {"id": "a", "kind": "ordinary", "status": "ok", "prompt_tokens": 10, "generated": 3, "identical": True,
         "speedup_plain": 1.5, "trace": [{"ctx": 9, "n": 3, "committed": 2}, {"ctx": 11, "n": 1, "committed": -1}]},
        {"id": "b", "status": "error"}]}
    traces = gpu_bench.traces_from_report(report)
    assert traces["model"] == "m" and [c["id"] for c in traces["cases"]] == ["a"]
    assert traces["cases"][0]["passes"] == [[9, 3, 2], [11, 1, -1]]


def test_dry_run_on_cpu_measures_and_projects(gpu_bench, tmp_path, capsys):
    traces = tmp_path / "t.json"
    traces.write_text(json.dumps({"model": "m", "cases": [
        {"id": "a", "kind": "ordinary", "generated": 4, "passes": [[100, 3, 3], [103, 2, -1]]}]}))
    out = tmp_path / "r.json"
    assert gpu_bench.main(["--dry-run", "--traces", str(traces), "--out", str(out)]) == 0
    res = json.loads(out.read_text())["models"]["tiny-dry-run"]
    assert all(v > 0 for row in res["curve"]["ms"].values() for v in row.values())
    assert res["projection"][0]["id"] == "a" and res["projection"][0]["projected_decode_speedup"] > 0
    printed = capsys.readouterr().out
    assert "PROJECTED" in printed.splitlines()[-3]  # the table comes last
    assert "decode" in printed.splitlines()[-1]
    measured = "CPU" if json.loads(out.read_text())["device"] == "cpu" else "GPU"
    assert f"{measured} cost curve above" in printed  # the heading names what was measured


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the venv's python: records the bench's arguments, exits with $FAKE_BENCH_RC for it.
if [ "$1" = -m ]; then
  printf '%s\\n' "$@" > "$FAKE_ARGS"
  exit "$FAKE_BENCH_RC"
fi
exit 0
"""


@pytest.mark.parametrize("bench_rc, expected", [(0, 0), (1, 1), (2, 2), (124, 124)])
def test_shell_script_exit_status_reflects_the_real_model_bench(tmp_path, bench_rc, expected):
    import os
    import subprocess

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    args = tmp_path / "args.txt"
    env = dict(os.environ, NGRAMD_GPU_VENV=str(tmp_path / "venv"), OUT=str(tmp_path / "out"),
               NGRAMD_GPU_MODEL=str(tmp_path / "my models" / "coder"), FAKE_ARGS=str(args),
               FAKE_BENCH_RC=str(bench_rc))
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_bench.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == expected, proc.stderr
    assert str(tmp_path / "my models" / "coder") in args.read_text().splitlines()  # one argument
