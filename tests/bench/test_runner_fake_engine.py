"""The runner's mechanics with a stand-in engine (greedy decoding of the tiny model
written out here), so that prompt recovery, the HF baseline, the identical flag and
the index handling are checked independently of the real engine."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from ngramd.daemon.bench.cases import load_cases
from ngramd.daemon.bench.runner import BenchRunner, Pass, decode_trace, prompt_ids_from_plain
from ngramd.daemon.protocol.requests import CompletionResult, GenerationStats


class FakeIndex:
    def __init__(self, files=()):
        self.calls = []
        self.history = []
        self._files = {str(f) for f in files}  # what the index holds

    def has_file(self, path):
        return str(path) in self._files

    def remove_file(self, path):
        self.calls.append(("remove_file", path))
        self._files.discard(path)

    def index_file(self, path):
        self.calls.append(("index_file", path))
        self._files.add(path)
        return True

    def open_buffer(self, uri, text):
        self.calls.append(("open_buffer", uri))

    def close_buffer(self, uri):
        self.calls.append(("close_buffer", uri))

    def add_history(self, ids):
        self.history.append(ids)


def make_fake_completer(diverge: bool):
    class FakeCompleter:
        """Greedy decoding, one token per pass; with ``diverge`` the speculative
        output's last token is changed, as a broken engine would."""

        def __init__(self, runtime, index, config=None):
            self.rt, self.index = runtime, index

        @torch.inference_mode()
        def complete(self, req, cancel=None):
            from transformers import DynamicCache

            prompt = req.text[:req.offset][-300:]
            ids = self.rt.encode(prompt)
            cache = DynamicCache()
            logits = self.rt.model(input_ids=torch.tensor([ids]), **{self.rt.cache_kwarg: cache}).logits[0, -1]
            out = []
            for _ in range(req.max_tokens):
                tok = int(logits.argmax())
                out.append(tok)
                if len(out) == req.max_tokens:
                    break
                logits = self.rt.model(input_ids=torch.tensor([[tok]]), **{self.rt.cache_kwarg: cache}).logits[0, -1]
            if diverge and req.speculate:
                out[-1] = (out[-1] + 1) % 1000
            self.index.add_history(out)  # the bench must not let this reach the index
            stats = GenerationStats(forward_passes=len(out), generated=len(out), drafted=4, accepted=2,
                                    drafted_by_source={"buffer": 4}, accepted_by_source={"buffer": 2})
            return CompletionResult(text=self.rt.decode(out), token_ids=out, prompt=prompt, stats=stats,
                                    stop_reason="max_tokens")

        def edit(self, req, cancel=None):
            raise NotImplementedError("speculative edits are not in yet")

    return FakeCompleter


@pytest.fixture()
def two_cases(tmp_path, workspace):
    lines = [
        {"id": "t-ordinary", "workspace": str(workspace), "file": "pkg/shapes.py", "offset": 125,
         "max_tokens": 6, "mode": "complete", "kind": "ordinary", "cut": 53},
        {"id": "t-edit", "workspace": str(workspace), "file": "pkg/util.py", "offset": 0, "end": 20,
         "instruction": "rename", "max_tokens": 6, "mode": "edit"},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in lines))
    return load_cases(path)


@pytest.mark.parametrize("diverge", [False, True])
def test_runner_reports_every_field_and_the_identical_flag(monkeypatch, tiny_runtime, two_cases, diverge):
    monkeypatch.setitem(sys.modules, "ngramd.daemon.edit.session",
                        types.SimpleNamespace(EditingCompleter=make_fake_completer(diverge)))
    runner = BenchRunner(tiny_runtime)
    index = FakeIndex(files=[two_cases[0].path])
    runner._indexes[two_cases[0].workspace] = index
    row = runner.run_case(two_cases[0], repeat=2)
    assert row["status"] == "ok"
    assert row["identical"] is (not diverge)  # a difference is reported, not hidden
    if diverge:
        assert row["first_difference"] == 5 and row["plain_token_ids"] != row["token_ids"]
        differing = row["differing_token_ids"]
        assert differing[:5] == row["plain_token_ids"][:5] and differing[5] != row["plain_token_ids"][5]
    # hf got exactly the engine's prompt ids: its greedy output equals plain decoding
    assert row["hf_identical"] is True and row["hf_generated"] == 6
    assert row["prompt_tokens"] == len(tiny_runtime.encode(row["prompt"]))
    assert len(row["runs_ms"]["spec"]) == len(row["runs_ms"]["plain"]) == len(row["runs_ms"]["hf"]) == 2
    assert row["acceptance_by_source"] == {"buffer": {"drafted": 4, "accepted": 2, "rate": 0.5}}
    assert [t["n"] for t in row["trace"]] == [1] * 5  # the five decode passes after prefill
    assert index.history == []  # completions never reached the index
    path = str(two_cases[0].path)
    assert index.calls[0] == ("remove_file", path) and index.calls[-1] == ("index_file", path)
    # the edit case: the stand-in engine has no edit mode -> "unsupported", cleanly
    runner._indexes[two_cases[1].workspace] = index
    row = runner.run_case(two_cases[1])
    assert row["status"] == "unsupported" and "not in yet" in row["error"]


def test_prompt_recovery_and_trace_on_hand_written_passes():
    prompt, gen = [5, 6, 7, 8], [9, 10, 11]
    # prefill in two chunks, then one token a pass (the last generated token is not fed)
    passes = [Pass(0, [5, 6]), Pass(2, [7, 8]), Pass(4, [9]), Pass(5, [10])]
    assert prompt_ids_from_plain(passes, gen) == prompt
    # a speculative run: pass at 4 verifies [9, 10, 12] and commits 2 (9, 10, bonus 11)
    spec = [Pass(0, prompt), Pass(4, [9, 10, 12]), Pass(6, [11, 13])]
    assert decode_trace(spec, len(prompt)) == [{"ctx": 4, "n": 3, "committed": 2},
                                                {"ctx": 6, "n": 2, "committed": -1}]
    assert prompt_ids_from_plain([Pass(3, [1])], gen) is None  # a gap: not a cold plain run
    # the prompt's last piece in the first decode pass (fused): [7, 8] then drafts [9, 12]; 9 is
    # accepted, 12 not (10 instead): 2 generated, 1 accepted, not the prompt tokens it fed
    fused = [Pass(0, [5, 6]), Pass(2, [7, 8, 9, 12]), Pass(5, [10, 11])]
    assert decode_trace(fused, len(prompt)) == [{"ctx": 2, "n": 4, "committed": 2},
                                                 {"ctx": 5, "n": 2, "committed": -1}]


def test_a_failed_warm_up_is_tried_again_on_the_next_case(tmp_path):
    from ngramd.daemon.bench.cases import BenchCase

    runner = BenchRunner(runtime=None, hf=False)
    index = FakeIndex()
    runner.index_for = lambda workspace: index
    runs = []

    def engine_run(case, index, speculate, max_tokens):
        runs.append(case.id)
        if case.id == "too-long":
            raise ValueError("the selection is too long to rewrite")
        return types.SimpleNamespace(result=None)
    runner._engine_run = engine_run

    def case(id_):
        return BenchCase(id=id_, workspace=tmp_path, workspace_ref=str(tmp_path), file="m.py", offset=0,
                         max_tokens=8, mode="complete", text="x = 1\n")
    with pytest.raises(ValueError):
        runner.warm_up(case("too-long"))
    runner.warm_up(case("next"))
    runner.warm_up(case("third"))
    assert runs == ["too-long", "next", "next"]  # warmed by "next", once


def test_a_case_on_a_file_the_index_ignores_leaves_it_out_of_the_index(tmp_path):
    """case_document puts back only what the index held: a .gitignored file stays out
    (else later cases would draft from it, and results would depend on case order)."""
    from ngramd.daemon.bench.cases import parse_case
    from ngramd.daemon.bench.runner import case_document
    from ngramd.index.store import NgramIndex

    (tmp_path / ".gitignore").write_text("ignored.py\n")
    (tmp_path / "a.py").write_text("def a():\n    return 1\n")
    (tmp_path / "ignored.py").write_text("def b():\n    return 2\n")
    index = NgramIndex(lambda texts: [[ord(ch) for ch in t] for t in texts])
    index.index_workspace(str(tmp_path))
    held = set(index._files)
    assert str(tmp_path / "a.py") in held and str(tmp_path / "ignored.py") not in held
    for name in ("ignored.py", "a.py"):
        case = parse_case({"id": name, "workspace": str(tmp_path), "file": name, "offset": 0, "max_tokens": 4,
                           "mode": "complete"})
        with case_document(index, case):
            assert str(case.path) not in index._files  # the case's text is the open buffer, not the file
        assert set(index._files) == held


def test_hf_is_not_timed_on_a_case_where_plain_decoding_made_no_token(monkeypatch, tiny_runtime, two_cases):
    """HF's generate makes at least one token: against a 0-token run it would time unequal work."""
    class EmptyCompleter:
        def __init__(self, runtime, index, config=None):
            pass

        def complete(self, req, cancel=None):  # eos at once
            return CompletionResult(text="", token_ids=[], prompt=req.text[:req.offset], stats=GenerationStats(),
                                    stop_reason="eos")

    monkeypatch.setitem(sys.modules, "ngramd.daemon.edit.session", types.SimpleNamespace(EditingCompleter=EmptyCompleter))
    hf_lengths = []

    def fake_hf(model, prompt_ids, max_new_tokens, eos_token_id, device="cpu"):
        hf_lengths.append(max_new_tokens)
        return [1] * max(1, max_new_tokens), 1.0, 1.0
    monkeypatch.setattr("ngramd.daemon.bench.runner.hf_prompt_lookup", fake_hf)
    runner = BenchRunner(tiny_runtime)
    runner._indexes[two_cases[0].workspace] = FakeIndex(files=[two_cases[0].path])
    row = runner.run_case(two_cases[0], repeat=2)
    assert row["status"] == "ok" and row["generated"] == 0
    assert hf_lengths == [8]  # the warm-up's only
    assert row["hf_prompt_lookup_ms"] is None and row["hf_identical"] is None and row["speedup_hf"] is None


def test_at_repeat_1_the_variants_take_turns_across_cases(monkeypatch, tiny_runtime, two_cases):
    """Each case's round runs the variants in the next of the orders: none always goes first."""
    import ngramd.daemon.bench.runner as bench_runner

    monkeypatch.setitem(sys.modules, "ngramd.daemon.edit.session",
                        types.SimpleNamespace(EditingCompleter=make_fake_completer(False)))
    runner = BenchRunner(tiny_runtime)
    runner._indexes[two_cases[0].workspace] = FakeIndex(files=[two_cases[0].path])
    ran: list[str] = []
    engine_run = runner._engine_run

    def recording_engine_run(case, index, speculate, *args, **kwargs):
        if args or kwargs.get("max_tokens"):  # the warm-up's own runs
            return engine_run(case, index, speculate, *args, **kwargs)
        ran.append("spec" if speculate else "plain")
        return engine_run(case, index, speculate, *args, **kwargs)

    hf = bench_runner.hf_prompt_lookup

    def recording_hf(*args, **kwargs):
        ran.append("hf")
        return hf(*args, **kwargs)

    monkeypatch.setattr(runner, "_engine_run", recording_engine_run)
    monkeypatch.setattr(bench_runner, "hf_prompt_lookup", recording_hf)
    runner.warm_up(two_cases[0])  # not counted: its runs come before any case's
    ran.clear()
    orders = []
    for _ in range(3):
        assert runner.run_case(two_cases[0], repeat=1)["status"] == "ok"
        orders.append(tuple(ran))
        ran.clear()
    assert orders == list(bench_runner.VARIANTS_ORDERS)


def test_a_pass_recorder_leaves_a_wrapper_it_found_on_the_runtime():
    """The llama.cpp runtime's recorder wraps ``forward_pass`` on the instance; a wrapper already
    there (a script's, around a whole run) is still there, and still called, after it."""
    from ngramd.daemon.bench.runner import RuntimePassRecorder

    class Runtime:
        def forward_pass(self, ids, cache, keep_last=None):
            return list(ids)

    rt, outer_calls = Runtime(), []
    inner = rt.forward_pass

    def outer(ids, cache, **kwargs):
        outer_calls.append(list(ids))
        return inner(ids, cache, **kwargs)

    rt.forward_pass = outer
    with RuntimePassRecorder(rt) as recorder:
        assert rt.forward_pass([1, 2], [9]) == [1, 2]
    assert [(p.start, p.ids) for p in recorder.passes] == [(1, [1, 2])]
    assert rt.forward_pass is outer and outer_calls == [[1, 2]]
    with RuntimePassRecorder(Runtime()) as bare:  # none found: none left
        pass
    assert "forward_pass" not in bare.runtime.__dict__
