"""The summary's arithmetic, the table, and the plot's clear failure without matplotlib."""

from __future__ import annotations

import io
import sys

import pytest

from ngramd.daemon.bench.report import (PlotUnavailable, build_report, changed_lines, markdown_table, plot, render_text,
                                 still_compiles,
                                 summarize)


def row(id_, kind, ms, plain, hf, identical=True, first=10.0):
    return {"id": id_, "kind": kind, "status": "ok", "ms": ms, "plain_ms": plain, "hf_prompt_lookup_ms": hf,
            "first_token_ms": first, "plain_first_token_ms": first, "hf_first_token_ms": first,
            "generated": 10, "forward_passes": 5, "plain_forward_passes": 10, "drafted": 8, "accepted": 6, "identical": identical,
            "hf_identical": True, "speedup_plain": round(plain / ms, 3), "speedup_hf": round(hf / ms, 3),
            "accepted_per_pass": [1, 2, 0]}


ROWS = [row("a", "ordinary", 100, 300, 200), row("b", "ordinary", 200, 300, 300),
        row("c", "repeat", 50, 400, 100), row("d", "norepeat", 100, 90, 95, identical=False),
        {"id": "e", "kind": "ordinary", "status": "unsupported", "error": "edit mode"}]


def test_summary_speedups_identical_and_targets():
    s = summarize(ROWS)
    assert s["cases"] == 5 and s["ok"] == 4 and s["unsupported"] == ["e"]
    assert s["identical"] == 3 and s["not_identical"] == ["d"] and s["all_identical"] is False
    ordinary = s["by_kind"]["ordinary"]
    assert ordinary["vs_plain"]["total"] == 2.0  # 600 / 300
    assert ordinary["vs_plain"]["median"] == 2.25  # median(3.0, 1.5)
    assert ordinary["vs_hf"]["total"] == round(500 / 300, 3)
    assert ordinary["decode_vs_plain"] == round((290 + 290) / (90 + 190), 3)
    assert s["by_kind"]["repeat"]["vs_plain"]["total"] == 8.0
    t = s["targets"]
    assert t["ordinary_vs_plain"]["met"] is True and t["ordinary_vs_hf"]["met"] is True
    assert t["repeat_vs_plain"]["met"] is True
    assert t["norepeat_min_vs_plain"]["met"] is False  # 0.9x
    assert t["identical"]["met"] is False
    assert s["acceptance"] == 0.75 and s["tokens_per_pass"] == 2.0 and s["passes_vs_plain"] == 2.0


def test_ceiling_is_the_baseline_over_the_time_to_the_first_token():
    # a: prefill-heavy (first token at 90 of 100 ms): even free decoding gives plain 150 / 90;
    # b: decoding-heavy, its ceiling far above the goal; its speculative first pass (30 ms, a
    # draft riding on it) is slower than plain's (20 ms): the faster one bounds it
    rows = [row("a", "ordinary", 100, 150, 120, first=90.0),
            {**row("b", "repeat", 100, 800, 400, first=20.0), "first_token_ms": 30.0}]
    s = summarize(rows)
    assert s["by_kind"]["ordinary"]["ceiling_vs_plain"] == round(150 / 90, 3)
    assert s["by_kind"]["ordinary"]["ceiling_vs_hf"] == round(120 / 90, 3)
    assert s["ceiling_vs_plain"] == round(950 / 110, 3)
    assert s["ceiling_prepared"] is None  # no prepared runs
    t = s["targets"]
    assert t["ordinary_vs_plain"] == {"value": 1.5, "goal": 2.0, "met": False, "ceiling": round(150 / 90, 3)}
    assert t["repeat_vs_plain"]["ceiling"] == 40.0 and t["repeat_vs_plain"]["met"] is True
    assert "ceiling" not in t["norepeat_min_vs_plain"]  # a minimum has no ceiling of this kind
    out = io.StringIO()
    render_text(build_report(rows, {}), out, use_rich=False)
    lines = out.getvalue().splitlines()
    ordinary = next(line for line in lines if line.startswith("target ordinary_vs_plain"))
    assert "ceiling 1.67, below the goal: drafting alone cannot meet it here" in ordinary
    repeat = next(line for line in lines if line.startswith("target repeat_vs_plain"))
    assert "ceiling 40.00)" in repeat and "below the goal" not in repeat


def test_prepared_figures_beside_the_cold_ones():
    def prepared(r, ms, plain):
        return {**r, "prepared_ms": ms, "prepared_plain_ms": plain, "speedup_prepared": round(plain / ms, 3),
                "prepared_first_token_ms": 5.0, "prepared_plain_first_token_ms": 4.0}

    rows = [prepared(row("a", "repeat", 100, 300, 300), 50, 400), prepared(row("b", "repeat", 100, 300, 300), 50, 200)]
    s = summarize(rows)
    assert s["by_kind"]["repeat"]["prepared_vs_plain"] == {"total": 6.0, "median": 6.0, "min": 4.0, "paired_min": None}
    t = s["targets"]["repeat_vs_plain"]
    assert (t["value"], t["met"], t["prepared"], t["prepared_met"]) == (3.0, False, 6.0, True)
    assert t["ceiling"] == 30.0 and t["prepared_ceiling"] == 75.0  # 600 / (10 + 10), 600 / (4 + 4)
    assert "prepared" not in s["targets"]["ordinary_vs_hf"]  # HF has no prepared variant
    out = io.StringIO()
    report = build_report(rows, {})
    render_text(report, out, use_rich=False)
    text = out.getvalue()
    assert "target repeat_vs_plain: 3.00 (goal 6.0; cold ceiling 30.00) MISSED; prepared 6.00 (ceiling 75.00) met" in text
    assert "x prep" in text.splitlines()[1] and "8.00x" in text  # a's 400 / 50
    assert markdown_table(report).splitlines()[0].count("|") == 15  # 14 columns


def test_text_table_shows_every_case_and_flags_differences():
    report = build_report(ROWS, {"model": "tiny", "device": "cpu", "repeat": 1, "cases_file": "x"})
    for use_rich in (False, True):
        out = io.StringIO()
        render_text(report, out, use_rich=use_rich)
        text = out.getvalue()
        assert all(name in text for name in "abcde")
        assert "NOT IDENTICAL: d" in text and "MISSED" in text and "unsupported" in text
    md = markdown_table(report)
    assert md.count("\n") == 2 + len(ROWS) and "| d | norepeat |" in md


def test_summary_of_nothing_that_ran():
    s = summarize([{"id": "x", "kind": "ordinary", "status": "error", "error": "boom"}])
    assert s["ok"] == 0 and s["errors"] == ["x"] and s["all_identical"] is False
    out = io.StringIO()
    render_text(build_report([], {}), out, use_rich=False)
    assert "no case ran" in out.getvalue()


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with pytest.raises(PlotUnavailable, match="pip install"):
        plot(build_report(ROWS, {}), str(tmp_path / "p.png"))


def test_plot_writes_a_png_when_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    plot(build_report(ROWS, {"model": "tiny", "device": "cpu"}), str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_a_plot_path_without_a_suffix_is_the_file_written(tmp_path):
    """The CLI reports the path it was given: savefig alone would have written PATH.png."""
    pytest.importorskip("matplotlib")
    path = tmp_path / "speedups"
    plot(build_report(ROWS, {"model": "tiny", "device": "cpu"}), str(path))
    assert path.read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "speedups.png").exists()


def test_plot_of_a_prepared_run_has_a_bar_per_case_for_each_of_three_speedups(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    seen = {}
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: seen.update(
        labels=fig.axes[0].get_legend_handles_labels()[1], bars=len(fig.axes[0].patches)))
    rows = [{**r, "prepared_ms": 50.0, "prepared_plain_ms": 100.0, "speedup_prepared": 2.0} for r in ROWS[:4]]
    plot(build_report(rows, {}), str(tmp_path / "p.png"))
    assert seen["labels"] == ["vs plain", "vs HF prompt lookup", "prepared vs prepared plain"]
    assert seen["bars"] == 3 * 4


def test_changed_lines_counts_each_modified_inserted_or_deleted_line_once():
    assert changed_lines("a\nb\nc\n", "a\nb\nc\n") == 0
    assert changed_lines("a\nb\nc\n", "a\nB\nc\nd\n") == 2
    assert changed_lines("a\nb\nc\n", "a\nc\n") == 1
    assert changed_lines("a\nb\nc\n", "x\ny\n") == 3


def test_changed_lines_breaks_lines_where_an_editor_does():
    """daemon/protocol/lines.py's rule: \\r\\n, \\n or a lone \\r; a form feed or U+2028 is inside a line."""
    assert changed_lines("p\x0cq\n", "P\x0cQ\n") == 1 and changed_lines("p\u2028q\n", "P\u2028Q\n") == 1
    assert changed_lines("a\r\nb\rc", "a\nb\nC") == 1 and changed_lines("a", "a\n") == 0


def test_identical_target_is_not_met_while_cases_failed():
    s = summarize([row("a", "ordinary", 100, 300, 200),
                   {"id": "x", "kind": "ordinary", "status": "error", "error": "boom"}])
    assert s["all_identical"] is True and s["errors"] == ["x"]  # every case that ran was identical ...
    assert s["targets"]["identical"] == {"value": 1, "goal": 2, "met": False}  # ... but one never ran
    every_case_failed = summarize([{"id": "x", "kind": "ordinary", "status": "error", "error": "boom"}])
    assert every_case_failed["targets"]["identical"] == {"value": 0, "goal": 1, "met": False}


def test_edits_that_change_few_lines_have_their_own_target():
    def edit_row(id_, ms, plain, changed, stop="stop_string"):
        return {**row(id_, "ordinary", ms, plain, plain), "mode": "edit", "changed_lines": changed,
                "stop_reason": stop}

    rows = [edit_row("few", 100, 700, 1), edit_row("many", 100, 150, 9), edit_row("same", 100, 1200, 0),
            edit_row("cut", 100, 900, 0, stop="max_tokens"), row("completion", "ordinary", 100, 100, 100)]
    s = summarize(rows)
    few = s["edit_few_lines"]
    assert few["cases"] == 1 and few["vs_plain"]["total"] == 7.0  # not the answer that changed nothing
    assert s["edit_unchanged"]["cases"] == 1 and s["edit_unchanged"]["vs_plain"]["total"] == 12.0
    assert s["edits"]["cases"] == 4 and s["edits"]["vs_plain"]["total"] == 7.375  # 2950 / 400
    # the completion kinds' targets count completions only
    assert s["by_kind"]["ordinary"]["cases"] == 1 and s["targets"]["ordinary_vs_plain"]["value"] == 1.0
    assert s["targets"]["edit_few_lines_vs_plain"] == {"value": 7.0, "goal": 6.0, "met": True, "ceiling": 70.0}
    out = io.StringIO()
    render_text(build_report(rows, {}), out, use_rich=False)
    assert "edits changing 1-3 lines (1)" in out.getvalue() and "edits (4)" in out.getvalue()
    assert "edits answered with the selection unchanged (1)" in out.getvalue()
    assert summarize(ROWS)["targets"]["edit_few_lines_vs_plain"]["met"] is None  # no edit cases
    table = markdown_table(build_report(rows, {}))
    assert "| few | edit |" in table and "| completion | ordinary |" in table


def test_still_compiles_judges_the_file_with_the_answer_in_place():
    text = "class A:\n    def f(self):\n        return 1\n"
    start, end = text.index("def f"), len(text)
    assert still_compiles("a.py", text, start, end, "def f(self) -> int:\n        return 1\n") is True
    # the body back at the function's own column: no longer inside the method
    assert still_compiles("a.py", text, start, end, "def f(self) -> int:\n    return 1\n") is False
    assert still_compiles("a.py", text, start, end, "def f(self:\n") is False
    assert still_compiles("a.txt", text, start, end, "anything") is None  # not Python
    assert still_compiles("a.py", "print 'py2'\n", 0, 0, "") is None  # did not compile before
    assert still_compiles("a.py", "x = '\\d'\n", 0, 0, "") is True  # a SyntaxWarning is still code


def test_edit_groups_count_the_applied_answers_that_still_compile():
    def edit_row(id_, compiles, stop="stop_string"):
        return {**row(id_, "ordinary", 100, 200, 200), "mode": "edit", "changed_lines": 1,
                "stop_reason": stop, "still_compiles": compiles}

    rows = [edit_row("ok", True), edit_row("broken", False), edit_row("not-python", None),
            edit_row("cut", False, stop="max_tokens")]
    s = summarize(rows)
    assert (s["edits"]["still_compiles"], s["edits"]["compile_checked"]) == (1, 2)
    out = io.StringIO()
    render_text(build_report(rows, {}), out, use_rich=False)
    assert "the file still compiles after 1 of 2 finished answers" in out.getvalue()
    assert "compile_checked" not in summarize(ROWS)  # completions: nothing to judge


def test_bench_plot_without_matplotlib_fails_before_running(monkeypatch, capsys):
    from ngramd.daemon.cli import bench_cmd
    from ngramd.daemon.cli.main import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails

    def must_not_run(*args, **kwargs):
        raise AssertionError("the bench ran although its plot cannot be drawn")
    monkeypatch.setattr(bench_cmd, "bench", must_not_run)
    assert main(["bench", "--cases", "bench/cases/smoke.jsonl", "--plot", "/tmp/never.png"]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
