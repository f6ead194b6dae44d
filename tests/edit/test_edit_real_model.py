"""The real default model (SmolLM2-135M-Instruct): an edit is identical with and without speculation."""

from __future__ import annotations

import threading

import pytest

from daemon.requests import EditRequest

SRC = '''import math


def scale(values, x):
    """Multiply every value by x."""
    out = []
    for v in values:
        out.append(v * x)
    return out


def norm(values):
    return math.sqrt(sum(v * v for v in values))
'''


@pytest.mark.real_model
def test_real_model_rename_identical_and_fewer_passes():
    from daemon.completer import Completer
    from daemon.engine import EngineConfig
    from daemon.model import load_runtime

    rt = load_runtime(None, device="cpu")
    completer = Completer(rt, None, EngineConfig(calibrate=False))
    start, end = SRC.index("def scale"), SRC.index("\n\n\ndef norm") + 1
    results = {}
    for speculate in (True, False):
        req = EditRequest(uri="file:///w/vec.py", text=SRC, start=start, end=end,
                          instruction="Rename the variable x to count.", max_tokens=80,
                          speculate=speculate)
        results[speculate] = completer.edit(req, threading.Event())
    spec, plain = results[True], results[False]
    assert spec.token_ids == plain.token_ids
    assert spec.text == plain.text and spec.text.strip()
    assert spec.stats.drafted_by_source.get("edit_original", 0) > 0
    # the answer repeats most of the original: far fewer passes than tokens
    assert spec.stats.forward_passes < plain.stats.forward_passes
    print("\nreal-model edit:", repr(spec.text), spec.stats.to_dict())
