"""scripts/replay_policy.py: a recorded edit's or completion's answer replayed through the real
engine on the stand-in runtime, token for token, priced at a given cost curve; the foresight
bound; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ngramd.daemon.bench.cases import load_cases
from ngramd.daemon.bench.runner import BenchRunner
from ngramd.daemon.edit.prompt import build_edit_prompt
from ngramd.daemon.engine.policy import CostModel

REPO = Path(__file__).resolve().parents[2]
INSTRUCTION = "Rename the function clamp to bound."
# a runtime where a long pass is cheap per token, so that drafting pays and the counts below are sharp
CURVE = ([1, 2, 4, 8, 16, 32, 64], [10.0, 12.0, 14.0, 18.0, 26.0, 42.0, 74.0])


@pytest.fixture(scope="module")
def replay_module(load_script):
    return load_script("replay_policy")


@pytest.fixture()
def edit_case(tmp_path, workspace):
    text = (workspace / "pkg/util.py").read_text()
    end = text.index("\n\n") + 1  # the clamp function
    line = {"id": "tiny-rename", "workspace": str(workspace), "file": "pkg/util.py", "offset": 0, "end": end,
            "instruction": INSTRUCTION, "max_tokens": 96, "mode": "edit"}
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (case,) = load_cases(path)
    return case


def recorded_run(runtime, case, answer_text: str) -> dict:
    """A bench report's row for ``case`` as if the model had answered ``answer_text`` and closed
    its fence (a recorded edit's tokens end with the line that stopped it)."""
    ep = build_edit_prompt(runtime, case.text, case.offset, case.end, INSTRUCTION, case.path.as_uri())
    return {"cases": [{"id": case.id, "status": "ok", "prompt_tokens": len(ep.prompt_ids),
                       "token_ids": runtime.encode(answer_text + "```\n"), "prepared_ms": 50.0, "prepared_plain_ms": 100.0}]}


def test_an_answer_that_repeats_the_original_is_drafted_whole(replay_module, tiny_runtime, edit_case):
    selection = edit_case.text[edit_case.offset:edit_case.end]
    run = recorded_run(tiny_runtime, edit_case, "\n" + selection)
    answer = run["cases"][0]["token_ids"]
    out = replay_module.replay(run, {edit_case.id: edit_case}, tiny_runtime, CURVE)
    (row,) = out["cases"]
    assert row["generated"] == len(answer)
    assert sum(row["pass_sizes"]) >= len(answer) and row["passes"] < len(answer) / 4
    # each pass at the curve, a pass padded to the rows the runtime runs it as (as the policy prices it)
    padded = getattr(tiny_runtime, "padded_pass_rows", lambda: ())()
    curve = CostModel(sizes=list(CURVE[0]), ms=list(CURVE[1]), pad_to=tuple(padded))
    assert row["priced_ms"] == pytest.approx(sum(curve(n) for n in row["pass_sizes"]), abs=0.2)
    assert row["priced_plain_ms"] == pytest.approx(10.0 * len(answer))  # plain decoding: a pass a token
    assert row["priced_speedup"] > 2.0 and row["measured_speedup"] == 2.0
    assert out["total"]["curve"] == {"sizes": CURVE[0], "ms": CURVE[1]}
    foresight = replay_module.replay(run, {edit_case.id: edit_case}, tiny_runtime, CURVE, foresight=True)
    assert foresight["cases"][0]["passes"] <= row["passes"]
    assert foresight["total"]["priced_speedup"] >= out["total"]["priced_speedup"]


def test_a_rename_is_replayed_token_for_token_and_foresight_bounds_it(replay_module, tiny_runtime, edit_case):
    renamed = "\n" + edit_case.text[edit_case.offset:edit_case.end].replace("clamp", "bound")
    run = recorded_run(tiny_runtime, edit_case, renamed)
    cases = {edit_case.id: edit_case}
    adaptive = replay_module.replay(run, cases, tiny_runtime, CURVE)  # raises if the answer were not reproduced
    foresight = replay_module.replay(run, cases, tiny_runtime, CURVE, foresight=True)
    (a,), (f,) = adaptive["cases"], foresight["cases"]
    assert a["generated"] == f["generated"] == len(run["cases"][0]["token_ids"])
    # the first token differs from the draft's: foresight declines it and takes the rest whole
    assert f["passes"] < a["passes"] and f["priced_ms"] < a["priced_ms"]
    assert 1.0 < a["priced_speedup"] < f["priced_speedup"]


def test_a_replay_that_leaves_the_answer_is_an_error(replay_module, tiny_runtime, edit_case):
    # a fence inside the recorded answer: the engine stops there, short of the record
    run = recorded_run(tiny_runtime, edit_case, "\nx = 1\n```\ny = 2\n")
    with pytest.raises(AssertionError, match="not the run's"):
        replay_module.replay(run, {edit_case.id: edit_case}, tiny_runtime, CURVE)


@pytest.mark.parametrize("text", ["1:3", "a:b", "1:10,2:-1", "0:1,2:3"])
def test_a_bad_curve_is_refused(replay_module, text):
    with pytest.raises(ValueError, match="curve"):
        replay_module.parse_curve(text)


def test_the_command_says_what_is_wrong_and_exits_2(replay_module, tmp_path, capsys):
    assert replay_module.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    assert replay_module.main([str(tmp_path / "missing.json"), "--curve", "1:3"]) == 2
    assert "two sizes" in capsys.readouterr().err


def test_a_fixed_length_drafts_no_more_than_it_says(replay_module, tiny_runtime, edit_case):
    run = recorded_run(tiny_runtime, edit_case, "\n" + edit_case.text[edit_case.offset:edit_case.end])
    out = replay_module.replay(run, {edit_case.id: edit_case}, tiny_runtime, CURVE, fixed=2)
    (row,) = out["cases"]
    assert max(row["pass_sizes"]) <= 3 and row["passes"] >= row["generated"] / 3  # 1 + 2 drafted a pass


@pytest.fixture()
def completion_case(tmp_path, workspace):
    """A completion after Rectangle's ``def area(self):``, whose body Square's repeats."""
    text = (workspace / "pkg/shapes.py").read_text()
    offset = text.index("def area(self):", text.index("class Rectangle")) + len("def area(self):\n")
    line = {"id": "tiny-complete", "workspace": str(workspace), "file": "pkg/shapes.py", "offset": offset,
            "max_tokens": 24, "mode": "complete"}
    path = tmp_path / "complete.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (case,) = load_cases(path)
    return case


def _prepared_row(runtime, case) -> dict:
    """``case``'s row in a prepared bench run."""
    runner = BenchRunner(runtime, hf=False, prepared=True)
    try:
        return runner.run_case(case)
    finally:
        runner.close()


def test_a_completion_is_replayed_token_for_token_and_foresight_drafts_only_what_is_taken(
        replay_module, tiny_runtime, completion_case):
    row = _prepared_row(tiny_runtime, completion_case)  # a bench run's row: the prompt as the engine builds it
    assert row["status"] == "ok"
    # the answer a code model would give, which Rectangle's own body (after the cursor) drafts; its
    # first token the newline the prompt's healing takes back
    body = "        result = self.width * self.height\n        return result\n"
    answer = tiny_runtime.encode("\n") + tiny_runtime.encode(body)
    run = {"cases": [dict(row, token_ids=answer)]}
    cases = {completion_case.id: completion_case}
    daemon = replay_module.replay(run, cases, tiny_runtime, CURVE)  # raises if the answer were not reproduced
    foresight = replay_module.replay(run, cases, tiny_runtime, CURVE, foresight=True)
    (d,), (f,) = daemon["cases"], foresight["cases"]
    assert d["mode"] == f["mode"] == "complete"
    assert d["generated"] == f["generated"] == len(answer)
    # plain decoding: a pass a token, and one for the end of text
    assert d["priced_plain_ms"] == pytest.approx(10.0 * (len(answer) + 1))
    assert max(d["pass_sizes"]) > 1 and d["priced_speedup"] > 1.0  # the daemon's policy drafts the body
    # foresight feeds no token the answer does not take: each pass yields what it feeds, the last
    # one the end of text
    assert sum(f["pass_sizes"]) == len(answer) + 1
    assert f["passes"] < d["passes"] and f["priced_speedup"] > d["priced_speedup"]


def test_openings_are_counted_apart_and_a_repeated_text_after_the_cursor_is_one_taken(
        replay_module, tiny_runtime, completion_case):
    """``--openings``: every position's draft, the request's first apart. Here the answer is the
    text after the cursor, so the opening draft (the cursor's own place in the buffer) is right."""
    row = _prepared_row(tiny_runtime, completion_case)
    body = "        result = self.width * self.height\n        return result\n"
    answer = tiny_runtime.encode("\n" + body)  # tokenized as the buffer holds it, after the cursor
    groups = replay_module.first_token_outcomes({"cases": [dict(row, token_ids=answer)]},
                                                {completion_case.id: completion_case}, tiny_runtime)
    openings = [g for g in groups if g["opening"]]
    assert len(openings) == 1 and openings[0]["drafts"] == 1 and openings[0]["source"] == "buffer"
    assert openings[0]["first_right"] == 1 and openings[0]["mean_taken"] >= 2
    later = sum(g["drafts"] for g in groups if not g["opening"])
    assert 0 < later <= len(answer) - 1  # a draft at most at each later position, none verified
    assert all(0 <= g["first_right"] <= g["drafts"] for g in groups)


def test_greedy_answers_are_the_benchs_plain_answers(load_script, tiny_runtime, completion_case, tmp_path, monkeypatch):
    answers = load_script("greedy_answers")
    runner = BenchRunner(tiny_runtime, hf=False)
    try:
        row = runner.run_case(completion_case)
    finally:
        runner.close()
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": completion_case.id, "workspace": str(completion_case.workspace),
                                 "file": "pkg/shapes.py", "offset": completion_case.offset, "max_tokens": 24,
                                 "mode": "complete"}) + "\n")
    out = tmp_path / "answers.json"
    import ngramd.daemon.runtime.loading as loading

    monkeypatch.setattr(loading, "load_runtime", lambda model, runtime="auto": tiny_runtime)
    assert answers.main([str(cases), "--json", str(out), "--model", "tiny"]) == 0
    run = json.loads(out.read_text())
    (mine,) = run["cases"]
    assert (mine["token_ids"], mine["prompt_tokens"]) == (row["token_ids"], row["prompt_tokens"])
    assert run["meta"]["cases_file"] == str(cases) and run["meta"]["model"] == "tiny"
    assert answers.main([str(tmp_path / "missing.jsonl"), "--json", str(out)]) == 2


def test_greedy_answers_record_the_probability_the_model_gave_each_token(load_script, tiny_runtime, completion_case,
                                                                         tmp_path, monkeypatch):
    answers = load_script("greedy_answers")
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": completion_case.id, "workspace": str(completion_case.workspace),
                                 "file": "pkg/shapes.py", "offset": completion_case.offset, "max_tokens": 12,
                                 "mode": "complete"}) + "\n")
    import ngramd.daemon.runtime.loading as loading

    monkeypatch.setattr(loading, "load_runtime", lambda model, runtime="auto": tiny_runtime)
    plain, probed = tmp_path / "plain.json", tmp_path / "probed.json"
    assert answers.main([str(cases), "--json", str(plain), "--model", "tiny"]) == 0
    assert answers.main([str(cases), "--json", str(probed), "--model", "tiny", "--top-probability"]) == 0
    (row,), (mine,) = json.loads(plain.read_text())["cases"], json.loads(probed.read_text())["cases"]
    assert "top_probability" not in row and mine["token_ids"] == row["token_ids"]  # the same answer
    probs = mine["top_probability"]
    assert len(probs) == len(mine["token_ids"]) > 0 and all(0.0 < p <= 1.0 for p in probs)
    # the first token's, computed apart: the largest softmax probability of the prompt's last row
    runner = BenchRunner(tiny_runtime, hf=False)
    try:
        completer = runner.completer()
        ids = list(completer.prompts.build(completion_case.text, completion_case.offset, completer._prompt_config()).ids)
    finally:
        runner.close()
    assert len(ids) == mine["prompt_tokens"]
    kv = tiny_runtime.new_cache()
    try:
        row = np.asarray(tiny_runtime.forward_pass(ids, kv, keep_last=1)[-1].float().cpu(), dtype=np.float64)
    finally:
        tiny_runtime.release_cache(kv)
    assert probs[0] == pytest.approx(float(np.exp(row - row.max()).sum() ** -1), abs=1e-4)


def test_openings_group_later_drafts_by_the_pending_tokens_probability(replay_module, tiny_runtime, completion_case):
    row = _prepared_row(tiny_runtime, completion_case)
    body = "        result = self.width * self.height\n        return result\n"
    answer = tiny_runtime.encode("\n" + body)
    probs = [0.3 if i % 2 else 0.995 for i in range(len(answer))]
    groups = replay_module.first_token_outcomes({"cases": [dict(row, token_ids=answer, top_probability=probs)]},
                                                {completion_case.id: completion_case}, tiny_runtime)
    assert all("pending_probability" not in g for g in groups if g["opening"])  # nothing written yet
    later = [g for g in groups if not g["opening"]]
    assert later and all(g["pending_probability"] in ("<0.5", ">=0.99") for g in later)
    assert {g["pending_probability"] for g in later} == {"<0.5", ">=0.99"}
    # without the probabilities, the same drafts in groups without the band
    plain = replay_module.first_token_outcomes({"cases": [dict(row, token_ids=answer)]},
                                               {completion_case.id: completion_case}, tiny_runtime)
    assert sum(g["drafts"] for g in plain) == sum(g["drafts"] for g in groups)
    assert all("pending_probability" not in g for g in plain)
    assert [replay_module.probability_band(p) for p in (0.1, 0.5, 0.95, 0.99, 1.0)] == \
           ["<0.5", "0.5-0.9", "0.9-0.99", ">=0.99", ">=0.99"]
