"""The llama.cpp baselines of the bench (daemon/bench/llamacpp_peer.py): llama.cpp's own plain and
prompt-lookup decoding of the same GGUF, beside ngramd on the llama.cpp runtime, and the report's
fields and targets over them."""

from __future__ import annotations

import io
import json

import pytest

from ngramd.daemon.bench.cases import load_cases
from ngramd.daemon.bench.report import build_report, render_text, summarize
from ngramd.daemon.cli.bench_cmd import bench

PEER_KEYS = {f"{pre}{peer}_{field}" for pre in ("", "prepared_") for peer in ("llamacpp_plain", "llamacpp_pld")
             for field in ("ms", "first_token_ms", "identical")}


@pytest.mark.real_model
def test_bench_on_llamacpp_times_llamacpps_own_decoding_on_the_same_ids(llama_rt, workspace, tmp_path):
    shapes = (workspace / "pkg/shapes.py").read_text()
    cases = [{"id": f"lc-{kind}", "workspace": str(workspace), "file": "pkg/shapes.py",
              "offset": shapes.index(anchor), "max_tokens": 6, "mode": "complete", "kind": kind, "cut": 20}
             for kind, anchor in (("repeat", "result = self.width * self.height"), ("ordinary", "name = type"))]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    report = bench(load_cases(path), runtime=llama_rt, prepared=True)
    assert report["meta"]["runtime"] == "llamacpp" and report["meta"]["hf_baseline"] is False
    assert "torch model" in report["meta"]["hf_skipped"]
    # each engine's tokens a llama_decode call, said: ngramd's own setting, the baselines' the binding's default
    assert report["meta"]["llama_cpp_batch"] == llama_rt.batch
    assert report["meta"]["llama_cpp_peer_batch"] == 512
    for row in report["cases"]:
        assert row["status"] == "ok", row.get("error")
        assert PEER_KEYS <= row.keys() and row["hf_prompt_lookup_ms"] is None
        # greedy on the same prompt ids, as many tokens: every decoder made plain's very ids
        assert row["identical"] and row["generated"] >= 1
        assert all(row[k] is True for k in PEER_KEYS if k.endswith("identical"))
        assert row["llamacpp_plain_forward_passes"] == row["generated"]  # one token a pass
        assert 1 <= row["llamacpp_pld_forward_passes"] <= row["generated"]
        assert len(row["runs_ms"]["llamacpp_pld"]) == len(row["runs_ms"]["prep_llamacpp_plain"]) == 1
        assert row["speedup_llamacpp_plain"] == round(row["llamacpp_plain_ms"] / row["ms"], 3)
    summary = report["summary"]
    assert summary["completions"]["llamacpp_plain_identical"] == summary["completions"]["llamacpp_pld_identical"] == 2
    assert {"completions_vs_llamacpp_plain", "completions_vs_llamacpp_pld"} <= summary["targets"].keys()


def peer_row(id_, ms, plain, lc, pld, prep=None, mode="complete"):
    """A row as the runner writes it on llama.cpp; ``prep``: (ngramd, llama.cpp plain, pld) prepared ms."""
    r = {"id": id_, "kind": "ordinary", "mode": mode, "status": "ok", "ms": ms, "plain_ms": plain,
         "hf_prompt_lookup_ms": None, "first_token_ms": 40.0, "plain_first_token_ms": 50.0, "generated": 10,
         "forward_passes": 10, "plain_forward_passes": 10, "drafted": 0, "accepted": 0, "identical": True,
         "speedup_plain": round(plain / ms, 3), "speedup_hf": None, "accepted_per_pass": [],
         "llamacpp_plain_ms": lc, "llamacpp_plain_first_token_ms": 45.0, "llamacpp_plain_identical": True,
         "llamacpp_pld_ms": pld, "llamacpp_pld_first_token_ms": 60.0, "llamacpp_pld_identical": id_ != "b",
         "speedup_llamacpp_plain": round(lc / ms, 3), "speedup_llamacpp_pld": round(pld / ms, 3)}
    if prep:
        r.update(prepared_ms=prep[0], prepared_plain_ms=prep[0], prepared_first_token_ms=10.0,
                 prepared_plain_first_token_ms=10.0, prepared_llamacpp_plain_ms=prep[1],
                 prepared_llamacpp_plain_first_token_ms=12.0, prepared_llamacpp_plain_identical=True,
                 prepared_llamacpp_pld_ms=prep[2], prepared_llamacpp_pld_first_token_ms=15.0,
                 prepared_llamacpp_pld_identical=True, speedup_prepared=1.0)
    return r


def test_summary_over_the_llamacpp_baselines_and_their_targets():
    rows = [peer_row("a", 100, 100, 110, 150, prep=(50, 60, 40)), peer_row("b", 200, 200, 180, 250, prep=(100, 90, 80))]
    s = summarize(rows)
    c = s["completions"]
    # no runs_ms in these rows: nothing to pair by round
    assert c["vs_llamacpp_plain"] == {"total": round(290 / 300, 3), "median": 1.0, "min": 0.9, "paired_min": None}
    assert c["prepared_vs_llamacpp_plain"]["total"] == 1.0  # 150 / 150
    assert c["vs_llamacpp_pld"]["total"] == round(400 / 300, 3)
    assert c["llamacpp_plain_identical"] == 2 and c["llamacpp_pld_identical"] == 1
    assert c["totals_ms"] == {"spec": 300, "prep_spec": 150, "plain": 300, "prep_plain": 150, "llamacpp_plain": 290,
                              "prep_llamacpp_plain": 150, "llamacpp_pld": 400, "prep_llamacpp_pld": 120}
    assert c["first_token_totals_ms"]["llamacpp_plain"] == 90 and c["first_token_totals_ms"]["prep_spec"] == 20
    assert c["ceiling_vs_llamacpp_plain"] == round(290 / 80, 3)  # the faster first token: ngramd's 40 ms
    assert c["ceiling_prepared_vs_llamacpp_plain"] == round(150 / 20, 3)  # prepared first tokens: 10 + 10 ms
    t = s["targets"]
    assert t["completions_vs_llamacpp_plain"]["met"] is False and t["completions_vs_llamacpp_plain"]["prepared_met"]
    assert t["completions_vs_llamacpp_plain"]["prepared_ceiling"] == round(150 / 20, 3)
    assert "prepared_ceiling" not in t["completions_min_vs_llamacpp_plain"]  # a minimum has no ceiling
    assert t["completions_min_vs_llamacpp_plain"]["value"] == 0.9 and t["completions_min_vs_llamacpp_plain"]["met"] is False
    assert t["completions_vs_llamacpp_pld"]["met"] is True and t["completions_vs_llamacpp_pld"]["prepared_met"] is False
    assert t["edits_vs_llamacpp_plain"]["met"] is None  # no edit case


def test_the_table_shows_the_llamacpp_columns_and_says_why_hf_is_missing():
    report = build_report([peer_row("a", 100, 100, 110, 150, prep=(50, 60, 40))],
                          {"runtime": "llamacpp", "hf_skipped": "no torch model"})
    out = io.StringIO()
    render_text(report, out, use_rich=False)
    text = out.getvalue()
    assert "x lc" in text and "prep pld" in text and "1.10x" in text  # 110 / 100
    assert "hf baseline skipped: no torch model" in text
    assert "vs llama.cpp plain total 1.10x" in text


def test_the_lowest_case_paired_by_round_beside_the_ratio_of_medians():
    """A case whose rounds ran at two speeds: its medians fall in different rounds (llama.cpp's in
    a fast one, ngramd's in a slow one), while within every round ngramd was 4-5% faster."""
    slow_fast = {"prep_spec": [100.0, 130.0, 96.0, 131.0, 129.0], "prep_llamacpp_plain": [105.0, 136.0, 100.0, 101.0, 135.0],
                 "spec": [200.0] * 5, "llamacpp_plain": [210.0] * 5}
    rows = [{**peer_row("a", 200, 200, 210, 250, prep=(129.0, 105.0, 90)), "runs_ms": slow_fast},
            {**peer_row("b", 100, 100, 110, 150, prep=(50, 60, 40)),
             "runs_ms": {"prep_spec": [50.0] * 5, "prep_llamacpp_plain": [60.0] * 5, "spec": [100.0] * 5,
                         "llamacpp_plain": [110.0] * 5}}]
    s = summarize(rows)
    prepared = s["completions"]["prepared_vs_llamacpp_plain"]
    assert prepared["min"] == round(105 / 129, 3)  # the ratio of medians: 0.81x
    assert prepared["paired_min"] == round(136 / 130, 3)  # median of 1.05, 1.046, 1.042, 0.771, 1.047
    t = s["targets"]["completions_min_vs_llamacpp_plain"]
    assert t["prepared"] == round(105 / 129, 3) and t["prepared_met"] is False  # met stays the medians'
    assert t["prepared_paired"] == round(136 / 130, 3) and t["paired"] == 1.05
    # ngramd's plain decoding against llama.cpp plain, beside: its rows' plain_ms as ms here
    assert s["completions"]["plain_vs_llamacpp_plain"]["min"] == 1.05  # 210 / 200 and 110 / 100
    assert t["plain_reference"] == 1.05 and t["prepared_plain_reference"] == round(105 / 129, 3)
    out = io.StringIO()
    render_text(build_report(rows, {"runtime": "llamacpp"}), out, use_rich=False)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("target completions_min_vs_llamacpp_plain"))
    assert line.endswith("prepared 0.81 MISSED; paired by round 1.05, prepared 1.05; "
                         "ngramd's plain decoding, the same passes, 1.05, prepared 0.81")
    # a case without runs of both in every round: no paired figure at all
    rows[1]["runs_ms"]["prep_llamacpp_plain"] = [60.0] * 4
    assert summarize(rows)["completions"]["prepared_vs_llamacpp_plain"]["paired_min"] is None
