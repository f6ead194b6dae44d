"""The prompt window's fit to the token budget: the same prompt as encoding every grid step,
with fewer encodes on dense text (the real tokenizer; counts, not timings)."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest

import ngramd.daemon.engine.prompt as prompt_mod
from ngramd.daemon.engine.prompt import GRID_CHARS, PromptConfig, build_prompt


def encode_every_step(runtime, text, start, end, ids, budget):
    """The reference: the window re-encoded at every grid step (the rule _fit_window keeps)."""
    while len(ids) > budget:
        nxt = (start // GRID_CHARS + 1) * GRID_CHARS
        if nxt >= end:
            return ids[-budget:]
        nl = text.find("\n", nxt, end)
        start = nl + 1 if nl >= 0 else nxt
        ids = runtime.encode(text[start:end])
    return ids


class CountingRuntime:
    """The tiny runtime's tokenizer, counting encodes."""

    def __init__(self, rt):
        self.rt, self.tokenizer, self.encodes = rt, rt.tokenizer, 0

    def encode(self, text):
        self.encodes += 1
        return self.rt.encode(text)

    def decode(self, ids):
        return self.rt.decode(ids)


def _texts():
    rnd = random.Random(7)
    code = Path(prompt_mod.__file__).read_text(encoding="utf-8")
    return {
        "base64 line": "x = '" + base64.b64encode(rnd.randbytes(24000)).decode() + "'",
        "letters line": "".join(rnd.choice("abcdefghijklmnop") for _ in range(30000)),
        "cjk lines": "\n".join("".join(chr(rnd.randrange(0x4E00, 0x9FFF)) for _ in range(900))
                               for _ in range(8)),
        "minified js": "function(a,b){return a+b*c-d/e;}var x=[1,2,3];" * 600,
        "code": code * 4,
    }


@pytest.mark.parametrize("name", list(_texts()))
@pytest.mark.parametrize("budget", [4096, 1536, 400])
def test_same_prompt_as_encoding_every_step(tiny, monkeypatch, name, budget):
    text = _texts()[name]
    config = PromptConfig(max_prompt_tokens=budget)
    offsets = [len(text), len(text) * 2 // 3, len(text) // 3, 5000, 1500]
    fast = [build_prompt(tiny, text, o, config) for o in offsets]
    monkeypatch.setattr(prompt_mod, "_fit_window", encode_every_step)
    assert fast == [build_prompt(tiny, text, o, config) for o in offsets]
    assert all(len(p.ids) <= budget for p in fast)


def test_dense_text_is_encoded_a_few_times_not_once_per_grid_step(tiny, monkeypatch):
    text = _texts()["base64 line"]
    counted = CountingRuntime(tiny)
    real_starts = getattr(prompt_mod, "_token_starts", None)  # (absent before the skipping existed)

    def counting_starts(*args):
        counted.encodes += 1  # the offsets cost an encode too
        return real_starts(*args)

    monkeypatch.setattr(prompt_mod, "_token_starts", counting_starts, raising=False)
    config = PromptConfig(max_prompt_tokens=4096)  # a window of ~12K characters, ~9.8K tokens
    fast = build_prompt(counted, text, len(text), config)
    fast_encodes, counted.encodes = counted.encodes, 0
    monkeypatch.setattr(prompt_mod, "_fit_window", encode_every_step, raising=False)
    assert build_prompt(counted, text, len(text), config) == fast
    assert counted.encodes >= 7  # the reference: one encode per grid step of excess
    assert fast_encodes <= 3  # the window, its offsets, the chosen step


def test_a_window_slightly_over_budget_asks_no_offsets(tiny, monkeypatch):
    """Offsets (an encode of their own) are asked for only when the excess is large: a window
    a few tokens over the budget is fitted with one more encode, as before the skipping."""
    text = Path(prompt_mod.__file__).read_text(encoding="utf-8") * 2  # ordinary code
    end = len(text)
    ids = tiny.encode(text)
    budget = len(ids) - 50
    counted = CountingRuntime(tiny)
    real_starts = prompt_mod._token_starts

    def counting_starts(*args):
        counted.encodes += 1
        return real_starts(*args)

    monkeypatch.setattr(prompt_mod, "_token_starts", counting_starts)
    fitted = prompt_mod._fit_window(counted, text, 0, end, ids, budget)
    assert counted.encodes == 1  # the first grid step, no offsets
    assert fitted == encode_every_step(tiny, text, 0, end, ids, budget) and len(fitted) <= budget
