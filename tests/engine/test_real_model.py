"""The real default model: speculative output is identical to plain output on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.runtime.loading import load_runtime
from ngramd.daemon.protocol.requests import CompletionRequest

# Frozen copies of two of the project's files: real code that later refactors cannot move.
DATA = Path(__file__).resolve().parent / "data"

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module", params=["torch", "llamacpp"])
def real(request):
    """The embedded model on each runtime: exactness is per runtime."""
    return load_runtime(None, device="cpu", runtime=request.param)


def _cases():
    out = []
    for rel, anchor in (("kv_cache_sample.py.txt", "        for layer in self._layers():\n            idx"),
                        ("stops_sample.py.txt", "    def push_many(self")):
        text = (DATA / rel).read_text()
        out.append((rel, text, text.index(anchor) + len(anchor) - 3))  # mid-word cursor
    return out


def test_speculative_equals_plain_on_real_files(real):
    from ngramd.index.store import NgramIndex

    index = NgramIndex(real.tokenize_batch)
    # every request decoded: with the answer cache on, the second would be served from the first
    completer = Completer(real, index, EngineConfig(calibrate=False, add_history=False, reuse_kv=False,
                                                    answer_cache=False))
    accepted = 0
    for rel, text, offset in _cases():
        req = dict(uri=f"file:///{rel}", text=text, offset=offset, max_tokens=16)
        plain = completer.complete(CompletionRequest(**req, speculate=False))
        spec = completer.complete(CompletionRequest(**req, speculate=True))
        assert spec.token_ids == plain.token_ids, rel
        assert spec.text == plain.text and spec.stop_reason == plain.stop_reason
        assert plain.text.strip(), "the real model produces code here"
        accepted += spec.stats.accepted
    assert accepted > 0, "real code repeats: some drafts must be accepted"
