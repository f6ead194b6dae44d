"""Typing through a suggestion: answers served from a remembered stream, with no forward pass,
are the answers a cold request gives (daemon/engine/answer_cache.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngramd.daemon.engine.answer_cache import AnswerCache, AnswerParams
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.engine.prompt import build_prompt
from ngramd.daemon.engine.stops import StopChecker, StopConfig
from ngramd.daemon.protocol.requests import CompletionRequest, SamplingParams

RUNTIME = Path(__file__).resolve().parents[2] / "daemon" / "runtime"
CACHE, POOL = (RUNTIME / "kv_cache.py").read_text(), (RUNTIME / "cache_pool.py").read_text()
# real code, a short prompt: the KV cache class, then the start of the pool that holds such caches
TEXT = CACHE[CACHE.index("class KVCache:"):] + "\n\n" + POOL[POOL.index("class KVPool:"):][:200]
URI = "file:///kv.py"
CURSORS = [TEXT.index("        self.tokens.extend") + len("        self.tok"),  # mid-word
           TEXT.index("    def crop(") + len("    def "),
           TEXT.index("class KVPool:")]


def _req(text: str, offset: int, **kw) -> CompletionRequest:
    return CompletionRequest(**{"uri": URI, "text": text, "offset": offset, "max_tokens": 12, **kw})


@pytest.fixture
def completers(tiny):
    warm = Completer(tiny, None, EngineConfig(calibrate=False))
    # the reference: every request decoded (KV prefix reuse changes no output: test_completer.py)
    cold = Completer(tiny, None, EngineConfig(calibrate=False, answer_cache=False))
    return warm, cold


@pytest.mark.parametrize("cursor, multiline", [(CURSORS[0], True), (CURSORS[1], False), (CURSORS[2], True)])
def test_typing_through_a_suggestion_answers_as_a_cold_request_at_each_character(tiny, completers, cursor,
                                                                                  multiline):
    warm, cold = completers
    answer = warm.complete(_req(TEXT, cursor, multiline=multiline)).text
    assert answer, "the tiny model answered nothing here: pick another cursor"
    bases = {tuple(build_prompt(tiny, TEXT, cursor).ids)}
    served = 0
    for i in range(1, min(len(answer), 24) + 1):
        text = TEXT[:cursor] + answer[:i] + TEXT[cursor:]
        req = _req(text, cursor + i, multiline=multiline)
        got, want = warm.complete(req), cold.complete(req)
        assert (got.text, got.token_ids, got.stop_reason) == (want.text, want.token_ids, want.stop_reason), i
        base = tuple(build_prompt(tiny, text, cursor + i).ids)
        if base not in bases:  # the prompt base moved (a new word, a new line): a real request
            assert got.answered_from == "" and got.stats.forward_passes > 0, i
        if got.answered_from:
            assert got.stats.forward_passes == 0 and got.stats.prefill_tokens == 0
            served += 1
        bases.add(base)
    assert served >= 1
    assert warm.answers.stats.hits == served


def test_a_changed_request_is_never_served_from_another_requests_stream(completers):
    warm, cold = completers
    cursor = CURSORS[0]
    answer = warm.complete(_req(TEXT, cursor)).text
    text = TEXT[:cursor] + answer[:1] + TEXT[cursor:]
    for changed in (dict(max_tokens=11), dict(stop=("x",)), dict(multiline=False),
                    dict(sampling=SamplingParams(temperature=0.7, seed=1))):
        got = warm.complete(_req(text, cursor + 1, **changed))
        assert got.answered_from == "" and got.stats.forward_passes > 0, changed
        assert got.text == cold.complete(_req(text, cursor + 1, **changed)).text


def test_a_character_that_is_not_the_suggestions_is_decoded(completers):
    warm, cold = completers
    cursor = CURSORS[0]
    answer = warm.complete(_req(TEXT, cursor)).text
    other = "Q" if not answer.startswith("Q") else "Z"
    text = TEXT[:cursor] + other + TEXT[cursor:]
    got = warm.complete(_req(text, cursor + 1))
    assert got.answered_from == "" and got.text == cold.complete(_req(text, cursor + 1)).text


def test_sampling_without_a_seed_is_never_remembered():
    assert AnswerParams.of(16, (), True, 0.8, 0.9, None) is None
    assert AnswerParams.of(16, (), True, 0.8, 0.9, 7) is not None
    assert AnswerParams.of(16, (), True, 0.0, 0.5, 3) == AnswerParams.of(16, (), True, 0.0, 1.0, None)


# --- the cache alone, on hand-made tokens: a multi-byte character split between two tokens ---
TOKENS = {1: b"ab", 2: b"\xc3", 3: b"\xa9x", 4: b"yz", 5: b"", 9: b"<eos>"}
PARAMS = AnswerParams.of(4, (), True, 0.0, 1.0, None)


def _stopper(forced: bytes, max_tokens: int = 4) -> StopChecker:
    return StopChecker(StopConfig(max_tokens=max_tokens, eos_ids=frozenset({9})), TOKENS.__getitem__, skip=forced)


def _cache() -> AnswerCache:
    return AnswerCache(TOKENS.__getitem__, lambda t: t == 9)


@pytest.mark.parametrize("typed, text", [
    (b"", "ab\u00e9xyz"), (b"a", "b\u00e9xyz"), (b"ab", "\u00e9xyz"), ("ab\u00e9".encode(), "xyz"),
    ("ab\u00e9x".encode(), "yz"), ("ab\u00e9xy".encode(), "z"),
])
def test_the_rest_of_a_stream_is_served_across_token_and_character_boundaries(typed, text):
    cache = _cache()
    cache.remember("u", [7, 8], b"", PARAMS, [1, 2, 3, 4], None)
    served = cache.serve("u", [7, 8], typed, PARAMS, lambda: _stopper(typed))
    assert served is not None and served.text == text and served.tokens == [1, 2, 3, 4]
    assert served.stop_reason == "max_tokens"


def test_a_stream_that_ran_out_before_the_new_stop_is_not_served():
    cache = _cache()
    cache.remember("u", [7], b"", PARAMS, [1, 2, 3], None)  # stopped by a rule the new request may not share
    assert cache.serve("u", [7], b"a", PARAMS, lambda: _stopper(b"a")) is None


def test_an_eos_ends_the_served_answer_as_it_ended_the_stream():
    cache = _cache()
    cache.remember("u", [7], b"", PARAMS, [1, 4], 9)
    served = cache.serve("u", [7], b"ab", PARAMS, lambda: _stopper(b"ab"))
    assert served is not None and served.text == "yz" and served.tokens == [1, 4] and served.stop_reason == "eos"


@pytest.mark.parametrize("old, new", [(b"ab", b"a"), (b"a", b"b"), (b"", b"q")])
def test_a_forced_prefix_that_does_not_extend_the_old_one_within_the_stream_is_not_served(old, new):
    cache = _cache()
    cache.remember("u", [7], old, PARAMS, [1, 2, 3, 4], None)
    assert cache.serve("u", [7], new, PARAMS, lambda: _stopper(new)) is None


def test_a_token_no_forced_prefix_allows_keeps_the_stream_from_being_served():
    """An empty token chosen where no prefix was forced would be masked under a forced one."""
    cache = _cache()
    cache.remember("u", [7], b"", PARAMS, [5, 1, 2, 3], None)
    assert cache.serve("u", [7], b"a", PARAMS, lambda: _stopper(b"a")) is None


def test_prefetched_answers_count_hits_and_waste():
    cache = _cache()
    cache.remember("u", [7], b"", PARAMS, [1, 2, 3, 4], None, prefetched=True)
    cache.remember("u", [8], b"", PARAMS, [1, 4], None, prefetched=True)
    assert cache.serve("u", [7], b"", PARAMS, lambda: _stopper(b"")) is not None
    cache.forget("u")
    assert cache.stats.to_dict() == {"hits": 1, "prefetches": 2, "prefetched_tokens": 6, "prefetch_hits": 1,
                                     "wasted_tokens": 2}


# --- an answer cut short by a newer keystroke goes on from where it was ---
class _CancelAfter:
    """A cancel Event that is set once ``passes`` forward passes have run."""

    def __init__(self, runtime, passes: int):
        import threading

        self.event = threading.Event()
        self._runtime, self._left = runtime, passes

    def __enter__(self):
        real = self._runtime.forward_pass

        def counted(*args, **kwargs):
            out = real(*args, **kwargs)
            self._left -= 1
            if self._left <= 0:
                self.event.set()
            return out

        self._real = real
        self._runtime.forward_pass = counted
        return self.event

    def __exit__(self, *exc):
        del self._runtime.forward_pass


@pytest.mark.parametrize("typed", [0, 1, 2, 3])
def test_an_answer_cut_short_is_resumed_and_ends_as_a_cold_one(tiny, completers, typed):
    warm, cold = completers
    cursor = CURSORS[0]
    full = cold.complete(_req(TEXT, cursor)).text
    with _CancelAfter(tiny, passes=4) as cancel:  # the prefill's and three decoding passes
        cut = warm.complete(_req(TEXT, cursor), cancel)
    assert cut.cancelled and 0 < len(cut.token_ids) < 12
    text = TEXT[:cursor] + full[:typed] + TEXT[cursor:]
    resumed = warm.complete(_req(text, cursor + typed))
    want = cold.complete(_req(text, cursor + typed))
    assert (resumed.text, resumed.token_ids, resumed.stop_reason) == (want.text, want.token_ids, want.stop_reason)
    if build_prompt(tiny, text, cursor + typed).ids == build_prompt(tiny, TEXT, cursor).ids:
        # the same prompt base: it decoded only what the cut answer had not
        assert resumed.stats.generated < len(want.token_ids)


def test_a_sampled_answer_is_never_resumed():
    cache = _cache()
    params = AnswerParams.of(4, (), True, 0.7, 0.9, 5)
    cache.remember("u", [7], b"", params, [1, 2], None, finished=False)
    assert cache.resumable("u", [7], b"", params) is None
    assert cache.resumable("u", [7], b"", PARAMS) is None  # other params: not this stream
    cache.remember("u", [7], b"", PARAMS, [1, 2], None, finished=False)
    assert cache.resumable("u", [7], b"a", PARAMS) == [1, 2]
    assert cache.resumable("u", [7], b"q", PARAMS) is None
