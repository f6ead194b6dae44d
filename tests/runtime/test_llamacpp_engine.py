"""The real engine on the llama.cpp runtime and the real model: speculative output is
token-identical to plain decoding on the stdlib bench cases (every other one: `ngramd bench`
checks them all), and drafts are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.protocol.requests import CompletionRequest

pytestmark = pytest.mark.real_model

CASES = Path(__file__).resolve().parents[2] / "bench" / "cases" / "stdlib.jsonl"


@pytest.mark.timeout(1800)  # a loaded 2-core machine runs it ten times slower than a quiet one
def test_speculative_equals_plain_on_the_bench_cases(llama_rt):
    from ngramd.daemon.bench.cases import load_cases
    from ngramd.index.store import NgramIndex

    assert llama_rt.exactness.exact, llama_rt.exactness.detail
    cases = [c for c in load_cases(CASES) if c.mode == "complete"][::2]
    assert len(cases) >= 6 and {c.kind for c in cases} >= {"ordinary", "repeat"}
    index = NgramIndex(llama_rt.tokenize_batch)
    completer = Completer(llama_rt, index, EngineConfig(calibrate=False, add_history=False, answer_cache=False))
    accepted = 0
    for case in cases:
        req = dict(uri=case.path.as_uri(), text=case.text, offset=case.offset, max_tokens=case.max_tokens)
        # the speculative run reuses the plain run's prompt cache (the prefill is paid once)
        plain = completer.complete(CompletionRequest(**req, speculate=False))
        spec = completer.complete(CompletionRequest(**req, speculate=True))
        assert spec.stats.forward_passes > 0 and plain.stats.forward_passes > 0, case.id  # decoded, not remembered
        assert spec.token_ids == plain.token_ids, case.id
        assert spec.text == plain.text and spec.stop_reason == plain.stop_reason, case.id
        accepted += spec.stats.accepted
    assert accepted > 0, "real code repeats: some drafts must be accepted"
