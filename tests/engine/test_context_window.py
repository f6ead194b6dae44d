"""A model with a small context window (learned positions, as GPT-2's: a position past the last
is an index error, not just a worse answer): a completion's prompt and answer stay within it."""

from __future__ import annotations

import pytest
import torch

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.runtime.model import _finish
from ngramd.daemon.runtime.gguf_tokenizer import load_tokenizer_only
from ngramd.daemon.engine.prompt import MIN_ANSWER_POSITIONS, PromptConfig, within_positions
from ngramd.daemon.protocol.requests import CompletionRequest

POSITIONS = 256


@pytest.fixture(scope="module")
def small_window():
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = load_tokenizer_only()
    config = GPT2Config(vocab_size=len(tok), n_positions=POSITIONS, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    return _finish(GPT2LMHeadModel(config), tok, torch.device("cpu"), torch.float32, "tiny-gpt2")


# repeats, so that speculation drafts (a draft past the window would reach past it too)
TEXT = "def area(w, h):\n    return w * h\n\n\n" * 60


@pytest.mark.parametrize("offset, max_tokens", [(40, 1000), (len(TEXT), 8), (len(TEXT), 1000)])
def test_prompt_and_answer_fit_the_window_and_speculation_changes_nothing(small_window, offset, max_tokens):
    completer = Completer(small_window, None, EngineConfig(calibrate=False))
    results = [completer.complete(CompletionRequest("file:///w/a.py", TEXT, offset, max_tokens=max_tokens,
                                                    speculate=speculate))
               for speculate in (False, True)]
    plain, fast = results
    assert fast.token_ids == plain.token_ids
    prompt_tokens = len(small_window.encode(plain.prompt))
    assert prompt_tokens + len(plain.token_ids) <= POSITIONS
    assert len(plain.token_ids) >= min(max_tokens, MIN_ANSWER_POSITIONS) or plain.stop_reason != "max_tokens"


def test_the_budget_is_cut_only_where_the_window_is_smaller():
    config = PromptConfig(max_prompt_tokens=1536, suffix_tokens=256)
    assert within_positions(config, 8192) is config and within_positions(config, None) is config
    cut = within_positions(config, 300)
    assert (cut.max_prompt_tokens, cut.suffix_tokens) == (300 - MIN_ANSWER_POSITIONS, (300 - MIN_ANSWER_POSITIONS) // 4)
