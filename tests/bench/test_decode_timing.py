"""The decode timers of the measurement scripts (daemon/bench/decode_timing.py): what they feed,
and that a failed pass still hands the cache back."""

from __future__ import annotations

import pytest

from ngramd.daemon.bench.decode_timing import llama_ms_per_token, runtime_ms_per_token


class Cache:
    def __init__(self) -> None:
        self.tokens: list[int] = []

    def extended(self, ids) -> None:
        self.tokens.extend(ids)


class Runtime:
    def __init__(self, fail_at: int | None = None) -> None:
        self.passes: list[tuple[list[int], int]] = []
        self.released: list[Cache] = []
        self.fail_at = fail_at

    def new_cache(self) -> Cache:
        return Cache()

    def release_cache(self, cache: Cache) -> None:
        self.released.append(cache)

    def forward_pass(self, ids, cache, keep_last=None):
        if self.fail_at is not None and len(self.passes) == self.fail_at:
            raise RuntimeError("decode failed")
        self.passes.append((list(ids), len(cache.tokens)))


def test_the_prompt_then_one_token_passes_after_it():
    rt = Runtime()
    assert runtime_ms_per_token(rt, [5, 6, 7], tokens=3) >= 0
    assert rt.passes == [([5, 6], 0), ([7], 2), ([7], 3), ([7], 4)]
    assert len(rt.released) == 1


def test_a_failed_pass_hands_the_cache_back():
    rt = Runtime(fail_at=2)
    with pytest.raises(RuntimeError):
        runtime_ms_per_token(rt, [5, 6, 7], tokens=3)
    assert len(rt.released) == 1


def test_llama_is_reset_and_given_the_prompt_first():
    calls = []

    class Llama:
        def reset(self):
            calls.append("reset")

        def eval(self, ids):
            calls.append(list(ids))

    assert llama_ms_per_token(Llama(), [5, 6, 7], tokens=2) >= 0
    assert calls == ["reset", [5, 6], [7], [7]]
