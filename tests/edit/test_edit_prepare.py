"""An edit's prompt prefilled while the user types its instruction: up to it, or through the part typed (prepare_edit)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from ngramd.daemon.edit.editor import instruction_free_prefix, prepare_edit, run_edit
from ngramd.daemon.engine.completer import edit_cache_key
from ngramd.daemon.edit.prompt import EditRangeError, build_edit_prompt
from ngramd.daemon.protocol.requests import EditRequest

SRC = '''import math


def norm(values):
    """Euclidean norm."""
    s = 0
    for v in values:
        s += v * v
    return math.sqrt(s)
'''
START = SRC.index("def norm")
END = len(SRC)
URI = "file:///w/norm.py"
INSTRUCTIONS = ["rename s to total", "Add type hints.", "x", "  use sum() ", "'quote' first", "42 things", "(paren)"]


@pytest.fixture
def completer(tiny_runtime):
    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig

    return EditingCompleter(tiny_runtime, None, EngineConfig(calibrate=False))


@pytest.mark.parametrize("chat", [True, False])
def test_every_instructions_prompt_starts_with_the_prepared_prefix(tok_runtime, chat):
    runtime = tok_runtime if chat else SimpleNamespace(
        tokenizer=SimpleNamespace(chat_template=None), eos_token_id=tok_runtime.eos_token_id,
        encode=tok_runtime.encode)
    prefix = instruction_free_prefix(runtime, SRC, START, END, URI)
    assert len(prefix) > 40  # the file around the range and the selection, not a few tokens
    for instruction in INSTRUCTIONS:
        ids = build_edit_prompt(runtime, SRC, START, END, instruction, URI).prompt_ids
        assert ids[:len(prefix)] == prefix, instruction
        assert len(ids) > len(prefix)  # the instruction itself is not in it
    assert tok_runtime.decode(prefix).endswith("Instruction:")


def _edit(completer, instruction, speculate=True):
    req = EditRequest(uri=URI, text=SRC, start=START, end=END, instruction=instruction, max_tokens=24,
                      speculate=speculate)
    return run_edit(completer, req, threading.Event())


@pytest.mark.parametrize("speculate", [True, False])
def test_a_prepared_edit_prefills_only_its_instruction_and_answers_as_a_cold_one(
        tiny_runtime, completer, speculate):
    cold = _edit(completer, "rename s to total", speculate)
    completer.drop_cache(URI)
    prepared = completer.prepare_edit(URI, SRC, START, END, threading.Event())
    assert not prepared.cancelled and prepared.reused == 0
    assert prepared.prefilled == prepared.tokens - 1  # all but the last token, as for any prompt
    warm = _edit(completer, "rename s to total", speculate)
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    assert warm.stats.reused_tokens == prepared.prefilled
    prompt_len = len(build_edit_prompt(tiny_runtime, SRC, START, END, "rename s to total", URI).prompt_ids)
    assert warm.stats.prefill_tokens == prompt_len - 1 - prepared.prefilled < 25  # the instruction's tail
    assert cold.stats.prefill_tokens == prompt_len - 1


@pytest.mark.parametrize("speculate", [True, False])
def test_an_edit_prepared_through_its_instruction_prefills_one_token_and_answers_as_a_cold_one(
        tiny_runtime, completer, speculate):
    """The editor prepares again with the instruction typed so far when the typing pauses:
    the whole prompt is cached but its last token (which rides with the first pass)."""
    cold = _edit(completer, "rename s to total", speculate)
    completer.drop_cache(URI)
    prepared = completer.prepare_edit(URI, SRC, START, END, threading.Event(), "rename s to total")
    prompt_len = len(build_edit_prompt(tiny_runtime, SRC, START, END, "rename s to total", URI).prompt_ids)
    assert prepared.tokens == prompt_len and prepared.prefilled == prompt_len - 1 and prepared.reused == 0
    warm = _edit(completer, "rename s to total", speculate)
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    assert warm.stats.reused_tokens == prompt_len - 1 and warm.stats.prefill_tokens == 0


def test_a_prepare_with_part_of_the_instruction_leaves_the_edit_the_rest(tiny_runtime, completer):
    cold = _edit(completer, "rename s to total")
    completer.drop_cache(URI)
    completer.prepare_edit(URI, SRC, START, END, None, "")  # nothing typed yet: up to the instruction
    partial = completer.prepare_edit(URI, SRC, START, END, None, "rename s to to")
    prefix = instruction_free_prefix(tiny_runtime, SRC, START, END, URI)
    # all but the last token were prefilled by the first prepare
    assert partial.reused == len(prefix) - 1 and 0 < partial.prefilled < 20  # the words typed, the template's tail
    warm = _edit(completer, "rename s to total")
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    prompt_len = len(build_edit_prompt(tiny_runtime, SRC, START, END, "rename s to total", URI).prompt_ids)
    assert len(prefix) < warm.stats.reused_tokens < prompt_len - 1  # up to where the words part
    assert warm.stats.prefill_tokens == prompt_len - 1 - warm.stats.reused_tokens < 10


@pytest.mark.parametrize("instruction, error", [
    (42, "must be a string"), ("x" * 10_001, "at most 10000 are taken")])
def test_a_bad_typed_instruction_is_a_clear_error(completer, instruction, error):
    with pytest.raises(ValueError, match=error):
        completer.prepare_edit(URI, SRC, START, END, None, instruction)


def test_preparing_the_same_range_again_reuses_the_cached_prefix(completer):
    first = completer.prepare_edit(URI, SRC, START, END)
    again = completer.prepare_edit(URI, SRC, START, END)
    assert again.tokens == first.tokens and again.reused == first.tokens - 1 and again.prefilled == 0
    other = completer.prepare_edit(URI, SRC, SRC.index("    s = 0"), END)  # another selection: a new prefix
    assert 0 < other.reused < other.tokens - 1 and other.prefilled > 0


def test_a_prepare_cancelled_before_it_starts_says_so(completer):
    cancel = threading.Event()
    cancel.set()
    prepared = prepare_edit(completer, URI, SRC, START, END, cancel)
    assert prepared.cancelled and prepared.prefilled == 0 and len(completer.pool.get(edit_cache_key(URI))) == 0


def test_bad_ranges_and_prompts_too_long_are_clear_errors(completer, tiny_runtime, monkeypatch):
    with pytest.raises(EditRangeError, match="after end"):
        completer.prepare_edit(URI, SRC, 10, 5)
    with pytest.raises(EditRangeError, match="outside the document"):
        completer.prepare_edit(URI, SRC, 0, len(SRC) + 1)
    with pytest.raises(ValueError, match="text must be a string"):
        completer.prepare_edit(URI, None, 0, 0)
    monkeypatch.setattr(tiny_runtime.model.config, "max_position_embeddings", 50)
    with pytest.raises(ValueError, match="too long to rewrite.*before the instruction"):
        completer.prepare_edit(URI, SRC, START, END)
    # the prompt fits, but not with the answer the edit must have room for (the unchanged
    # selection): the edit itself would be refused, so the prepare is, before any prefill
    prefix = instruction_free_prefix(tiny_runtime, SRC, START, END, URI)
    monkeypatch.setattr(tiny_runtime.model.config, "max_position_embeddings", len(prefix) + 2)
    with pytest.raises(ValueError, match="too long to rewrite.*unchanged selection"):
        completer.prepare_edit(URI, SRC, START, END)
    assert len(completer.pool.get(edit_cache_key(URI))) == 0


def test_a_prepare_runs_in_short_passes_so_that_a_request_waits_behind_one_at_most(
        tiny_runtime, completer, monkeypatch):
    """It is cancelled between passes when a request comes: the pass bounds the wait."""
    from ngramd.daemon.engine.completer import PREPARE_CHUNK

    rows = []
    forward = tiny_runtime.forward
    monkeypatch.setattr(tiny_runtime, "forward", lambda ids, *a, **k: rows.append(ids.shape[1]) or forward(ids, *a, **k))
    text = SRC * 12
    prepared = completer.prepare_edit(URI, text, 0, len(text))  # a long selection: several passes
    assert prepared.prefilled > 2 * PREPARE_CHUNK
    assert max(rows) == PREPARE_CHUNK and sum(rows) == prepared.prefilled


def test_the_default_room_for_an_answer_lets_an_empty_selection_get_new_code():
    """Twice an empty selection's few draft tokens would cut a new function off in its docstring."""
    from ngramd.daemon.edit.editor import MAX_TOKENS_CAP, MIN_DEFAULT_MAX_TOKENS, default_max_tokens

    assert default_max_tokens(5) == MIN_DEFAULT_MAX_TOKENS
    assert default_max_tokens(500) == 2 * 500 + 32
    assert default_max_tokens(10 ** 6) == MAX_TOKENS_CAP
