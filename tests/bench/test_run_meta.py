"""daemon/bench/run_meta.py: the meta the measuring scripts write beside their figures."""

from __future__ import annotations

import subprocess

from ngramd.daemon.bench.run_meta import checkout_commit, script_run_meta


def test_the_meta_names_the_commit_machine_cases_rounds_and_model(tmp_path):
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = script_run_meta(tmp_path / "cases.jsonl", 3, None)
    assert meta["commit"] == (head or None)
    assert meta["cases_file"] == str(tmp_path / "cases.jsonl") and meta["repeat"] == 3
    assert meta["model"] == "embedded" and meta["cpu_count"] >= 1 and len(meta["date"]) == 10
    assert script_run_meta(tmp_path / "c.jsonl", 1, "/m/x.gguf")["model"] == "/m/x.gguf"


def test_outside_a_checkout_there_is_no_commit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert checkout_commit() is None
