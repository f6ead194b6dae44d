"""Edits through the engine: identical with and without speculation, errors, cancellation."""

from __future__ import annotations

import functools
import threading

import pytest

from ngramd.daemon.edit.editor import run_edit
from ngramd.daemon.engine.completer import edit_cache_key
from ngramd.daemon.edit.prompt import EditRangeError
from ngramd.daemon.protocol.requests import EditRequest, SamplingParams

SRC = '''def mean(values):
    """Arithmetic mean."""
    x = 0
    for v in values:
        x += v
    return x / len(values)


def spread(values):
    lo = min(values)
    hi = max(values)
    return hi - lo
'''
START = SRC.index("def mean")
END = SRC.index("\n\n\ndef spread") + 1


@pytest.fixture(scope="module")
def tiny_completer(tiny_runtime):
    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig

    return EditingCompleter(tiny_runtime, None, EngineConfig(calibrate=False))


def _edit(completer, runtime, speculate, start=START, end=END, max_tokens=40, **kw):
    req = EditRequest(uri="file:///w/stats.py", text=SRC, start=start, end=end,
                      instruction="rename variable x to total", max_tokens=max_tokens,
                      speculate=speculate, **kw)
    return run_edit(completer, req, threading.Event())


@pytest.mark.parametrize("start,end", [(START, END), (SRC.index("    lo ="), len(SRC)), (5, 5)])
def test_tiny_identical_with_and_without_speculation(tiny_completer, tiny_runtime, start, end):
    spec = _edit(tiny_completer, tiny_runtime, True, start, end)
    plain = _edit(tiny_completer, tiny_runtime, False, start, end)
    assert spec.token_ids == plain.token_ids
    assert spec.text == plain.text
    assert plain.stats.drafted == 0
    assert spec.stats.drafted > 0  # the original was offered as a draft
    assert spec.stats.forward_passes <= plain.stats.forward_passes
    assert spec.prompt == plain.prompt and spec.prompt.endswith("```python")


def test_tiny_identical_on_a_method_selected_from_its_def(tiny_completer):
    """A method selected from its def is shown dedented; both ways give the same tokens."""
    src = "class Stats:\n" + "".join("    " + line if line.strip() else line for line in SRC.splitlines(True))
    start, end = src.index("def mean"), src.index("\n\n\n    def spread") + 1
    results = [run_edit(tiny_completer, EditRequest(uri="file:///w/cls.py", text=src, start=start, end=end,
                                                    instruction="rename x", max_tokens=40, speculate=speculate),
                        threading.Event()) for speculate in (True, False)]
    spec, plain = results
    assert spec.token_ids == plain.token_ids and spec.text == plain.text
    assert spec.stats.drafted > 0
    assert "Selection:\n```python\ndef mean(values):\n    \"\"\"Arithmetic mean.\"\"\"\n" in spec.prompt


def short_loops(monkeypatch):
    """The loop guard with a 48-token span: on the range from ``lo =`` to the end, the random
    tiny model's answer repeats itself within 300 tokens, but not 96 tokens at a stretch."""
    from ngramd.daemon.engine import stops
    from ngramd.daemon.engine.repetition import RepetitionGuard

    monkeypatch.setattr(stops, "RepetitionGuard", functools.partial(RepetitionGuard, min_span=48))


@pytest.mark.slow
def test_tiny_a_looping_answer_stops_at_the_same_token_both_ways(tiny_completer, tiny_runtime, monkeypatch):
    """The loop guard (daemon/engine/repetition.py) reads only the generated tokens, so speculative
    and plain decoding stop at the same one; ``stop_loops=False`` lets the answer run on."""
    short_loops(monkeypatch)
    start = SRC.index("    lo =")
    spec = _edit(tiny_completer, tiny_runtime, True, start, len(SRC), max_tokens=300)
    plain = _edit(tiny_completer, tiny_runtime, False, start, len(SRC), max_tokens=300)
    assert spec.stop_reason == plain.stop_reason == "repetition"
    assert spec.token_ids == plain.token_ids and len(plain.token_ids) < 300
    assert spec.text == plain.text
    assert spec.stats.forward_passes < plain.stats.forward_passes
    on = _edit(tiny_completer, tiny_runtime, True, start, len(SRC), max_tokens=300, stop_loops=False)
    assert on.stop_reason == "max_tokens" and on.token_ids[:len(plain.token_ids)] == plain.token_ids


def test_tiny_sampling_is_seeded_identically(tiny_completer, tiny_runtime):
    s = SamplingParams(temperature=0.8, seed=3)
    a = _edit(tiny_completer, tiny_runtime, False, sampling=s, max_tokens=12)
    b = _edit(tiny_completer, tiny_runtime, False, sampling=s, max_tokens=12)
    assert a.token_ids == b.token_ids and len(a.token_ids) > 0


def test_bad_ranges_raise_clear_errors(tiny_completer, tiny_runtime):
    with pytest.raises(EditRangeError, match="after end"):
        _edit(tiny_completer, tiny_runtime, True, END, START)
    with pytest.raises(EditRangeError, match="outside"):
        _edit(tiny_completer, tiny_runtime, True, 0, len(SRC) + 5)
    with pytest.raises(ValueError, match="max_tokens"):
        _edit(tiny_completer, tiny_runtime, True, max_tokens=0)


@pytest.mark.parametrize("temperature,top_p,message", [
    (float("nan"), 1.0, "temperature must be >= 0"), (1e-40, 1.0, "temperature must be >= 0"),
    (float("inf"), 1.0, "temperature must be >= 0"), (0.7, float("nan"), "top_p must be in"),
])
def test_unusable_sampling_params_are_a_clear_error(tiny_completer, tiny_runtime, temperature, top_p, message):
    """The same rule as completions and the RPC (daemon/protocol/requests.py), not a failure inside torch."""
    with pytest.raises(ValueError, match=message):
        _edit(tiny_completer, tiny_runtime, True, sampling=SamplingParams(temperature=temperature, top_p=top_p))


def test_a_selection_past_the_models_positions_is_a_clear_error(tiny_completer, tiny_runtime):
    text = "value = 12345\n" * 1500  # ~6000 tokens, twice (prompt and draft), past the tiny model's 4096
    req = EditRequest(uri="file:///w/big.py", text=text, start=0, end=len(text), instruction="x", max_tokens=1)
    with pytest.raises(ValueError, match="too long to rewrite"):
        run_edit(tiny_completer, req, threading.Event())


def test_cancelled_before_start_returns_a_cancelled_result(tiny_completer, tiny_runtime):
    cancel = threading.Event()
    cancel.set()
    req = EditRequest(uri="file:///w/stats.py", text=SRC, start=START, end=END, instruction="x")
    res = run_edit(tiny_completer, req, cancel)
    assert res.cancelled and res.stop_reason == "cancelled" and res.text == ""


def test_completer_edit_delegates_to_run_edit(tiny_completer, tiny_runtime):
    req = EditRequest(uri="file:///w/stats.py", text=SRC, start=START, end=END,
                      instruction="rename variable x to total", max_tokens=10)
    via_completer = tiny_completer.edit(req, threading.Event())
    direct = run_edit(tiny_completer, req, threading.Event())
    assert via_completer.token_ids == direct.token_ids and len(direct.token_ids) > 0
    with pytest.raises(EditRangeError):
        tiny_completer.edit(EditRequest(uri="u", text="abc", start=2, end=1, instruction="x"))


def test_a_huge_instruction_is_not_blamed_on_the_selection(tiny_completer, tiny_runtime):
    req = EditRequest(uri="file:///w/stats.py", text=SRC, start=START, end=START + 3,
                      instruction="rename it " * 3000, max_tokens=1)
    with pytest.raises(ValueError, match="too long to rewrite") as info:
        run_edit(tiny_completer, req, threading.Event())
    assert "shorten the instruction" in str(info.value) and "the selection is too long" not in str(info.value)


def test_closing_a_document_drops_its_edit_cache_too(tiny_completer, tiny_runtime):
    """The daemon drops a closed document's KV caches (drop_cache): the edit prompt's one is
    kept apart from the completions', and must go as well (the pool holds a few per model)."""
    uri = "file:///w/closing.py"
    run_edit(tiny_completer, EditRequest(uri=uri, text=SRC, start=START, end=END, instruction="x",
                                         max_tokens=2), threading.Event())
    assert edit_cache_key(uri) in tiny_completer.pool._caches
    tiny_completer.drop_cache(uri)
    assert edit_cache_key(uri) not in tiny_completer.pool._caches and uri not in tiny_completer.pool._caches


@pytest.mark.parametrize("answer", ["\ntotal = 0", "\ntotal = 0\n", "\ntotal = 0\r\n"])
def test_an_answer_ended_by_eos_without_its_fence_keeps_the_original_trailing_newline(
        tiny_completer, monkeypatch, answer):
    """The model may end at eos without the closing fence: the answer is complete, and the
    selection's final line break must stay (else the next line is glued onto the last one).
    The answer is in the shown frame (the selection dedented), and indented back; the line
    break after it is the file's (its layout), whatever the answer's own was."""
    from ngramd.daemon.engine.loop import GenerationOutput
    from ngramd.daemon.protocol.requests import GenerationStats

    monkeypatch.setattr(tiny_completer, "decode",
                        lambda *a, **k: (GenerationOutput([1], answer, "eos"), GenerationStats()))
    start = SRC.index("    x = 0")
    req = EditRequest(uri="file:///w/eos.py", text=SRC, start=start, end=SRC.index("    for v"),
                      instruction="rename x to total", speculate=False)
    text = run_edit(tiny_completer, req, threading.Event()).text
    assert text == "    total = 0\n"


def test_the_length_bound_refuses_only_edits_that_cannot_fit(tiny_runtime):
    """LengthBound (checked before queueing, from characters) is a lower bound: what it refuses
    the exact check refuses too, even for text made of the vocabulary's longest tokens."""
    from ngramd.daemon.edit.editor import LengthBound, fit_positions
    from ngramd.daemon.edit.prompt import build_edit_prompt

    bound = LengthBound.of(tiny_runtime)
    assert bound.positions == 4096 and bound.longest_token == max(
        len(tiny_runtime.token_bytes(i)) for i in range(tiny_runtime.vocab_size))
    bound.check(SRC, START, END, "rename x")  # an ordinary edit passes
    refused = 0
    for lines in (500, 1500, 2100, 3000):
        text = ("\nx" + " " * 80) * lines  # long runs of spaces, not all layout (which is not shown)
        try:
            bound.check(text, 0, len(text), "indent")
        except ValueError as exc:
            assert "too long to rewrite" in str(exc)
            refused += 1
            with pytest.raises(ValueError, match="too long to rewrite"):
                fit_positions(tiny_runtime, build_edit_prompt(tiny_runtime, text, 0, len(text), "indent"), 1)
    assert refused == 2  # 2100 and 3000 lines


def test_the_length_bound_judges_the_selection_as_shown_dedented():
    """A deeply indented selection that fits only once its indentation is taken off passes;
    the same characters without indentation to take off are refused."""
    from ngramd.daemon.edit.editor import LengthBound

    body = "".join(" " * 40 + f"x{i} = {i}\n" for i in range(100))  # 100 lines of 40 + 8ish chars
    text = "if a:\n" + body
    start = len("if a:\n")
    dedented = len(body) - 40 * 100
    bound = LengthBound(positions=2 * dedented + 20, longest_token=1)
    bound.check(text, start, len(text), "x")  # fits as the model sees it
    flat = "if a:\n" + "".join("#" * 40 + f"x{i} = {i}\n" for i in range(100))
    with pytest.raises(ValueError, match="too long"):
        bound.check(flat, start, len(flat), "x")


def test_a_huge_instruction_is_refused_before_it_is_tokenized(tiny_completer):
    req = EditRequest(uri="file:///w/stats.py", text=SRC, start=START, end=END, instruction="x" * 10_001)
    with pytest.raises(ValueError, match="the instruction has 10001 characters.*shorten the instruction"):
        run_edit(tiny_completer, req, threading.Event())


def test_a_document_named_like_an_edit_key_keeps_its_own_kv_cache(tiny_completer):
    """Edit prompts' KV caches are keyed apart from every document's, whatever its name."""
    from ngramd.daemon.protocol.requests import CompletionRequest

    uri = "file:///w/named.py"
    tiny_completer.complete(CompletionRequest(uri=uri + "#edit", text=SRC, offset=START + 4, max_tokens=2))
    run_edit(tiny_completer, EditRequest(uri=uri, text=SRC, start=START, end=END, instruction="x",
                                         max_tokens=2), threading.Event())
    assert uri + "#edit" in tiny_completer.pool._caches and edit_cache_key(uri) != uri + "#edit"
    tiny_completer.drop_cache(uri)  # closing uri drops its edits' cache, not the other document's
    assert uri + "#edit" in tiny_completer.pool._caches and edit_cache_key(uri) not in tiny_completer.pool._caches


def test_an_instruction_that_is_not_valid_text_is_a_clear_error(tiny_completer):
    """Bytes that were not UTF-8 on a command line come as lone surrogates, which have no tokens."""
    text = "def f(x):\n    return x\n"
    with pytest.raises(ValueError, match="instruction is not valid text"):
        tiny_completer.edit(EditRequest(uri="file:///w/a.py", text=text, start=0, end=len(text),
                                        instruction="rename \udcff"))
