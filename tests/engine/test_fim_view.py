"""Drafts for a fill-in-the-middle prompt are looked up from the text before the cursor (daemon/engine/fim_view.py)."""

from __future__ import annotations

import numpy as np

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.engine.fim_view import PrefixView
from ngramd.daemon.engine.prompt import build_prompt
from ngramd.index.draft import NO_DRAFT

TEXT = "def alpha(x):\n    return x + 1\n\ndef beta(y):\n    return alpha(y) * 2\n\n" * 3
CURSOR = TEXT.rindex("return alpha(") + len("return al")
URI = "file:///x.py"


class Recording:
    def __init__(self):
        self.seen, self.accepted = [], []

    def propose(self, context, k, w):
        self.seen.append(list(context))
        return NO_DRAFT

    def feedback(self, n):
        self.accepted.append(n)


def test_the_inner_proposer_sees_the_prefix_then_the_output():
    inner = Recording()
    view = PrefixView(inner, 1, 4, 8)
    view.propose(np.array([90, 1, 2, 3, 91, 7, 8, 92, 4]), 4, 1)  # the module's worked example
    view.feedback(2)
    assert inner.seen == [[1, 2, 3, 4]] and inner.accepted == [2]


def test_a_fim_prompt_drafts_from_the_buffer_as_a_plain_one_does(tiny_fim, tiny):
    """The review's case: keyed on the FIM context's tail (the suffix's end, <fim_middle>) the index
    had no draft at the cursor; seen from the prefix it has the same draft as without FIM."""
    from ngramd.index.store import IndexConfig, NgramIndex

    drafts = {}
    for rt in (tiny_fim, tiny):
        index = NgramIndex(rt.tokenize_batch, IndexConfig())
        index.open_buffer(URI, TEXT)
        completer = Completer(rt, index, EngineConfig(calibrate=False))
        prompt = build_prompt(rt, TEXT, CURSOR, completer.cfg.prompt)
        assert prompt.fim == (rt is tiny_fim)
        draft = completer._proposer(URI, prompt.ids, prompt.fim).propose(np.array(prompt.ids), 8, 1)
        drafts[rt.name] = [list(b.tokens) for b in draft.branches]
        if prompt.fim:
            assert not index.propose(np.array(prompt.ids), 8, 1, current_uri=URI)  # the tail alone: nothing
    assert drafts["tiny-fim"] and drafts["tiny-fim"] == drafts["tiny"]
