"""A completion's prompt prefilled where the cursor rests (Completer.prepare_complete).

Each test runs on the tiny model twice: with the embedded model's tokenizer (a plain prompt:
the text before the cursor) and with FIM tokens added ("tiny-fim": the suffix after the
cursor follows the prefix, so typing at the cursor leaves the suffix to prefill again)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ngramd.daemon.engine.completer import PREPARE_CHUNK, Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.engine.prompt import build_prompt
from ngramd.daemon.protocol.requests import CompletionRequest

TEXT = (Path(__file__).resolve().parents[2] / "daemon" / "runtime" / "kv_cache.py").read_text()
CURSOR = TEXT.index("        self.tokens.extend")  # a line's start, after its indentation: where a user starts typing
URI = "file:///kv.py"


@pytest.fixture(params=["tiny", "tiny_fim"])
def runtime(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def completer(runtime):
    return Completer(runtime, None, EngineConfig(calibrate=False))


def _complete(completer, text, offset, speculate=True):
    return completer.complete(CompletionRequest(uri=URI, text=text, offset=offset, max_tokens=16,
                                                speculate=speculate), threading.Event())


@pytest.mark.parametrize("speculate", [True, False])
def test_a_completion_asked_where_the_cursor_rested_prefills_one_token_and_answers_as_a_cold_one(
        runtime, completer, speculate):
    cold = _complete(completer, TEXT, CURSOR, speculate)
    completer.drop_cache(URI)
    prepared = completer.prepare_complete(URI, TEXT, CURSOR)
    prompt = build_prompt(runtime, TEXT, CURSOR, completer.cfg.prompt)
    assert prompt.fim == (runtime.name == "tiny-fim")
    prompt_len = len(prompt.ids)
    assert not prepared.cancelled and prepared.tokens == prompt_len
    assert prepared.prefilled == prompt_len - 1 and prepared.reused == 0  # all but the last, as for any prompt
    warm = _complete(completer, TEXT, CURSOR, speculate)
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    assert warm.stats.reused_tokens == prepared.prefilled and warm.stats.prefill_tokens == 0


def test_after_typing_at_the_prepared_cursor_only_the_typed_text_and_the_suffix_are_prefilled(runtime, completer):
    typed = TEXT[:CURSOR] + "self.tok" + TEXT[CURSOR:]
    cold = _complete(completer, typed, CURSOR + 8)
    completer.drop_cache(URI)
    prepared = completer.prepare_complete(URI, TEXT, CURSOR)
    warm = _complete(completer, typed, CURSOR + 8)
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    suffix_start = cold.prompt.find("<fim_suffix>")  # FIM: the suffix after the cursor is prefilled again
    assert (suffix_start > 0) == (runtime.name == "tiny-fim")
    cursor_tokens = len(runtime.encode(cold.prompt[:suffix_start] if suffix_start >= 0 else cold.prompt))
    assert prepared.prefilled >= warm.stats.reused_tokens >= cursor_tokens - 8  # up to the typing (healing may back off)
    assert warm.stats.prefill_tokens <= cold.stats.prefill_tokens - warm.stats.reused_tokens
    assert warm.stats.reused_tokens > 10 * PREPARE_CHUNK // 4  # hundreds of tokens, not a few


def test_preparing_the_same_place_again_prefills_nothing_and_prepares_are_counted_apart(completer):
    first = completer.prepare_complete(URI, TEXT, CURSOR)
    again = completer.prepare_complete(URI, TEXT, CURSOR)
    assert again.reused == first.prefilled and again.prefilled == 0
    assert completer.stats()["prepared"] == {"prepares": 2, "prefill_tokens": first.prefilled}
    assert completer.requests == 0 and completer.totals.prefill_tokens == 0  # no request was served


def test_a_prepare_where_a_completion_was_just_asked_keeps_its_answer_cached(completer):
    """The editor may send a prepare where it just asked for a completion: the cache then holds
    the prompt and the answer after it, which the next keystroke (typing the answer) reuses."""
    asked = _complete(completer, TEXT, CURSOR)
    cached = list(completer.pool.get(URI).tokens)
    assert len(cached) > asked.stats.reused_tokens + asked.stats.prefill_tokens  # the answer is cached too
    prepared = completer.prepare_complete(URI, TEXT, CURSOR)
    assert prepared.prefilled == 0 and prepared.reused == prepared.tokens - 1
    assert completer.pool.get(URI).tokens == cached


def test_a_cancelled_prepare_keeps_the_passes_it_finished(runtime, completer, monkeypatch):
    cancel = threading.Event()
    forward = runtime.forward

    def forward_then_cancel(ids, *a, **k):
        out = forward(ids, *a, **k)
        cancel.set()  # seen before the next pass
        return out
    monkeypatch.setattr(runtime, "forward", forward_then_cancel)
    prepared = completer.prepare_complete(URI, TEXT, CURSOR, cancel)
    assert prepared.cancelled and prepared.prefilled == PREPARE_CHUNK
    assert len(completer.pool.get(URI)) == PREPARE_CHUNK
    assert completer.stats()["prepared"] == {"prepares": 0, "prefill_tokens": PREPARE_CHUNK}  # it did not finish


def test_a_prepare_preempted_during_its_last_pass_is_answered_as_cancelled(runtime, completer, monkeypatch):
    """The worker answers it "preempted": the count of finished prepares must agree (its tokens count)."""
    cancel = threading.Event()
    forward = runtime.forward
    monkeypatch.setattr(runtime, "forward", lambda *a, **k: cancel.set() or forward(*a, **k))
    short = TEXT[:200]
    prepared = completer.prepare_complete(URI, short, len(short), cancel)
    assert prepared.cancelled and 0 < prepared.prefilled < PREPARE_CHUNK  # one pass, all of it
    assert completer.stats()["prepared"] == {"prepares": 0, "prefill_tokens": prepared.prefilled}


@pytest.mark.parametrize("text, offset, message", [
    (TEXT, len(TEXT) + 1, "out of range"),
    (TEXT, -1, "out of range"),
    (TEXT, True, "out of range"),
    (None, 0, "text must be a string"),
])
def test_bad_input_is_a_clear_error(completer, text, offset, message):
    with pytest.raises(ValueError, match=message):
        completer.prepare_complete(URI, text, offset)
