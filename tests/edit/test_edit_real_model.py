"""The real default model (SmolLM2-135M-Instruct): an edit is identical with and without speculation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ngramd.daemon.protocol.requests import EditRequest

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


CLASS_SRC = '''import math


class Vector:
    """A vector of floats."""

    def __init__(self, values):
        self.values = list(values)

    def scale(self, x):
        """Multiply every value by x."""
        out = []
        for v in self.values:
            out.append(v * x)
        return Vector(out)

    def norm(self):
        return math.sqrt(sum(v * v for v in self.values))
'''


@pytest.mark.real_model
@pytest.mark.parametrize("src,first,after,instruction", [
    (SRC, "def scale", "\n\n\ndef norm", "Rename the variable x to count."),
    # a method selected from its def: shown dedented, the answer indented back
    (CLASS_SRC, "def scale", "\n    def norm", "Rename the parameter x to factor."),
])
def test_real_model_edit_identical_and_fewer_passes(src, first, after, instruction):
    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.loading import load_runtime

    rt = load_runtime(None, device="cpu")
    completer = EditingCompleter(rt, None, EngineConfig(calibrate=False))
    start, end = src.index(first), src.index(after) + 1
    results = {}
    for speculate in (True, False):
        req = EditRequest(uri="file:///w/vec.py", text=src, start=start, end=end,
                          instruction=instruction, max_tokens=80, speculate=speculate)
        results[speculate] = completer.edit(req, threading.Event())
    spec, plain = results[True], results[False]
    assert spec.token_ids == plain.token_ids
    assert spec.text == plain.text and spec.text.strip()
    assert spec.stats.drafted_by_source.get("edit_original", 0) > 0
    # the answer repeats most of the original: far fewer passes than tokens
    assert spec.stats.forward_passes < plain.stats.forward_passes
    print("\nreal-model edit:", repr(spec.text), spec.stats.to_dict())


@pytest.mark.real_model
def test_real_model_a_looping_answer_is_stopped_early_and_identically():
    """A case of bench/cases/edits_wide.jsonl (edit-wsgiref-hints-02) on which the model writes
    ``# Server.py`` over and over until its length limit: the loop guard ends it once it has
    repeated 96 tokens the prompt does not hold, at the same token with and without speculation."""
    import wsgiref

    from ngramd.daemon.edit.session import EditingCompleter
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.loading import load_runtime

    path = Path(wsgiref.__file__).parent / "simple_server.py"
    text = path.read_text()
    start = text.index("def server_bind(self):")
    end = text.index("\n", text.index("self.setup_environ()", start)) + 1
    rt = load_runtime(None, device="cpu", runtime="torch")  # the loop is this runtime's output
    completer = EditingCompleter(rt, None, EngineConfig(calibrate=False))
    results = {}
    for speculate in (True, False):
        req = EditRequest(uri=path.as_uri(), text=text, start=start, end=end,
                          instruction="Add type hints.", max_tokens=300, speculate=speculate)
        results[speculate] = completer.edit(req, threading.Event())
    spec, plain = results[True], results[False]
    assert spec.token_ids == plain.token_ids
    assert plain.stop_reason == spec.stop_reason == "repetition"
    assert len(plain.token_ids) < 150  # of the 300 it ran to before the guard (98 when written)
