"""scripts/gpu_bench.py and gpu_bench.sh: the projection's arithmetic, the --dry-run mode on CPU,
the exactness check, what a failure or a kill leaves, and the shell script's steps, order and exit statuses."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_bench(load_script):
    return load_script("gpu_bench")


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
    exact = res["exactness"]
    assert exact["path"] == "ngramd.daemon.runtime.model.ModelRuntime.forward" and exact["k"] == 8
    assert 0 <= exact["max_abs_logit_diff"] < 1e-3 and exact["min_top2_gap"] > 0
    assert exact["argmax_agrees"] is True  # fp32 on the CPU, the tiny model: far below its top-2 gaps
    assert "max |logit diff|" in printed


def two_dry_models(gpu_bench, monkeypatch):
    tiny = gpu_bench.DRY_MODELS["tiny-dry-run"]
    monkeypatch.setattr(gpu_bench, "DRY_MODELS", {"first": tiny, "second": tiny})


def test_a_kill_during_the_second_model_leaves_the_first_ones_figures(gpu_bench, tmp_path, monkeypatch):
    two_dry_models(gpu_bench, monkeypatch)
    real_curve = gpu_bench.verify_cost_curve
    calls = []

    def curve_then_killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stands in for the SIGTERM of a time limit: nothing after runs
        return real_curve(*args, **kwargs)

    monkeypatch.setattr(gpu_bench, "verify_cost_curve", curve_then_killed)
    out = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        gpu_bench.main(["--dry-run", "--traces", str(tmp_path / "none.json"), "--out", str(out)])
    first = json.loads(out.read_text())["models"]["first"]
    assert first["curve"]["ms"] and first["exactness"]["argmax_agrees"] is True


def test_a_failed_model_is_recorded_and_the_next_one_measured(gpu_bench, tmp_path, monkeypatch, capsys):
    two_dry_models(gpu_bench, monkeypatch)
    real_build = gpu_bench.build_model

    def first_fails(shape, device, dtype):
        if not first_fails.called:
            first_fails.called = True
            raise RuntimeError("CUDA out of memory (stand-in)")
        return real_build(shape, device, dtype)

    first_fails.called = False
    monkeypatch.setattr(gpu_bench, "build_model", first_fails)
    out = tmp_path / "r.json"
    assert gpu_bench.main(["--dry-run", "--traces", str(tmp_path / "none.json"), "--out", str(out)]) == 1
    models = json.loads(out.read_text())["models"]
    assert models["first"] == {"error": "RuntimeError: CUDA out of memory (stand-in)"}
    assert models["second"]["curve"]["ms"] and "error" not in models["second"]["exactness"]
    assert "first: FAILED: RuntimeError" in capsys.readouterr().out


def tiny_model_failing(gpu_bench, error, when):
    """The dry-run model, whose forward raises ``error`` for the in-place cache where ``when(input_ids)``."""
    from ngramd.daemon.runtime.kv_cache import InPlaceCache

    model = gpu_bench.build_model(gpu_bench.DRY_MODELS["tiny-dry-run"], "cpu", torch.float32)
    real = model.forward

    @functools.wraps(real)
    def forward(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if isinstance(cache, InPlaceCache) and when(kwargs["input_ids"]):
            raise error
        return real(*args, **kwargs)

    model.forward = forward
    return model


def test_out_of_memory_is_a_failure_not_a_cache_switch(gpu_bench):
    model = tiny_model_failing(gpu_bench, torch.cuda.OutOfMemoryError("CUDA out of memory"), lambda ids: True)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        gpu_bench.verify_cost_curve(model, "cpu", (64, 256), (1, 4), repeats=1)


def test_an_unsupported_in_place_cache_is_timed_as_dynamic_and_labelled(gpu_bench):
    model = tiny_model_failing(gpu_bench, TypeError("unexpected keyword"), lambda ids: True)
    curve = gpu_bench.verify_cost_curve(model, "cpu", (64, 256), (1, 4), repeats=1)
    assert curve["cache"] == "dynamic" and "TypeError: unexpected keyword" in curve["cache_note"]
    assert set(curve["ms"]) == {64, 256}


def test_the_cache_never_changes_in_the_middle_of_a_curve(gpu_bench):
    model = tiny_model_failing(gpu_bench, TypeError("at 256"), lambda ids: ids.shape[1] == 256)
    with pytest.raises(TypeError, match="at 256"):
        gpu_bench.verify_cost_curve(model, "cpu", (64, 256), (1, 4), repeats=1)


def test_every_context_is_prefilled_twice_the_first_a_warm_up(gpu_bench):
    prefills = []
    model = tiny_model_failing(gpu_bench, None, lambda ids: prefills.append(ids.shape[1]) and False)
    curve = gpu_bench.verify_cost_curve(model, "cpu", (64, 256), (1, 4), repeats=1)
    assert [n for n in prefills if n in (64, 256)] == [64, 64, 256, 256] and curve["cache"] == "inplace"


def test_the_grid_covers_the_traces_contexts(gpu_bench):
    traces = json.loads((REPO / "bench" / "traces_cpu.json").read_text())
    contexts = [ctx for case in traces["cases"] for ctx, _, _ in case["passes"]]  # 118..1267 tokens
    # below the grid, Cost holds the first point's figures: 118 tokens read as 128 is close enough
    assert 0.9 * gpu_bench.CTX[0] <= min(contexts) and max(contexts) <= gpu_bench.CTX[-1]



# --------------------------------------------------------------------------- the shell script

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the image's python3: logs each call, and exits as each step is told to.
printf '%s\\n' "$*" >> "$FAKE_CALLS"
case "$*" in
  *scripts/gpu_bench.py*)
    echo "env PYTHONPATH=$PYTHONPATH NGRAMD_CACHE_DIR=$NGRAMD_CACHE_DIR" >> "$FAKE_CALLS"
    # what the image's python imports there, with no site-packages (so no install) at all
    "$FAKE_REAL_PYTHON" -S -c 'import ngramd.daemon.cli.main as m; print("imports", m.__file__)' >> "$FAKE_CALLS"
    echo "fake cost table"; echo "fake gpu_bench warning" >&2
    [ -z "${FAKE_GPU_SLEEP:-}" ] || exec sleep "$FAKE_GPU_SLEEP"
    exit "${FAKE_GPU_RC:-0}";;
  "-m ngramd.daemon.cli bench"*)
    printf '%s\\n' "$@" > "$FAKE_ARGS"
    exit "${FAKE_BENCH_RC:-0}";;
esac
exit 0
"""


def run_script(tmp_path, python=None, args=(), **env):
    """gpu_bench.sh with ``python`` (default: the fake) as PYTHON, $OUT in tmp_path; (process, calls)."""
    if python is None:
        python = tmp_path / "bin" / "python3"
        python.parent.mkdir(exist_ok=True)
        python.write_text(FAKE_PYTHON)
        python.chmod(0o755)
    calls = tmp_path / "calls.txt"
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NGRAMD_CACHE_DIR", "OUT")}
    full_env.update(PYTHON=str(python), OUT=str(tmp_path / "out"), FAKE_CALLS=str(calls),
                    FAKE_ARGS=str(tmp_path / "args.txt"), TMPDIR=str(tmp_path),
                    FAKE_REAL_PYTHON=sys.executable, **env)
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_bench.sh"), *args], env=full_env,
                          capture_output=True, text=True, timeout=120)
    return proc, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("bench_rc, expected", [(0, 0), (1, 1), (2, 2), (124, 3)])
def test_shell_script_exit_status_reflects_the_real_model_bench(tmp_path, bench_rc, expected):
    model = tmp_path / "my models" / "coder"
    proc, _ = run_script(tmp_path, NGRAMD_GPU_MODEL=str(model), FAKE_BENCH_RC=str(bench_rc))
    assert proc.returncode == expected, proc.stdout + proc.stderr  # 124 (timed out) reads as 3
    assert str(model) in (tmp_path / "args.txt").read_text().splitlines()  # one argument


def test_shell_script_runs_the_images_python_first_the_cost_curve_and_logs(tmp_path):
    proc, calls = run_script(tmp_path, NGRAMD_GPU_MODEL="some/model")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any("venv" in c or "pip" in c for c in calls), calls  # no venv, no install: PYTHON itself
    steps = [i for i, c in enumerate(calls) if "scripts/gpu_bench.py" in c or c.startswith("-m ngramd.daemon.cli bench")]
    assert "scripts/gpu_bench.py" in calls[steps[0]] and calls[steps[1]].startswith("-m ngramd.daemon.cli bench")
    env = next(c for c in calls if c.startswith("env "))
    assert f"PYTHONPATH={tmp_path}/ngramd_src." in env  # the source tree as ngramd, nothing installed
    assert f"imports {REPO}/daemon/cli/main.py" in calls
    assert f"NGRAMD_CACHE_DIR={tmp_path}/" in env and "/out/" not in env  # set (no platformdirs there), not in $OUT
    log = (tmp_path / "out" / "gpu_bench.log").read_text()
    assert "fake cost table" in log and "fake gpu_bench warning" in log


def test_shell_script_exit_status_is_gpu_bench_pys_when_it_fails(tmp_path):
    proc, calls = run_script(tmp_path, NGRAMD_GPU_MODEL="some/model", FAKE_GPU_RC="1", FAKE_BENCH_RC="0")
    assert proc.returncode == 1
    assert any(c.startswith("-m ngramd.daemon.cli bench") for c in calls)  # the other step still ran


def test_shell_script_stops_a_step_at_the_budget_with_status_3(tmp_path):
    proc, calls = run_script(tmp_path, NGRAMD_GPU_MODEL="some/model", NGRAMD_GPU_BUDGET_S="1",
                             FAKE_GPU_SLEEP="60")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "stopped after 1 s" in proc.stdout  # the log's pipe carries stderr too
    assert not any(c.startswith("-m ngramd.daemon.cli bench") for c in calls)  # no time left for it


def test_shell_script_says_what_the_python_lacks(tmp_path):
    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -S "$@"\n')  # no site-packages: no torch
    bare.chmod(0o755)
    proc, _ = run_script(tmp_path, python=bare)
    assert proc.returncode == 4
    assert "lacks torch (ModuleNotFoundError" in proc.stdout and "set PYTHON" in proc.stdout


def test_shell_script_dry_run_writes_its_files(tmp_path):
    proc, _ = run_script(tmp_path, python=Path(sys.executable), args=["--dry-run"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "out"
    results = json.loads((out / "gpu_cost.json").read_text())
    assert results["dry_run"] is True
    assert set(results["models"]["tiny-dry-run"]["exactness"]) >= {"max_abs_logit_diff", "min_top2_gap",
                                                                    "argmax_agrees"}
    assert "PROJECTED" in (out / "gpu_bench.log").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["gpu_bench.log", "gpu_cost.json"]
