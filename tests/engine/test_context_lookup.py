"""The context as a draft source: pure matching, the wrapper, prompt lookup, and the engine."""

from __future__ import annotations

import numpy as np
import pytest

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.engine.context_lookup import ContextLookup, longest_recent_match, prompt_lookup
from ngramd.daemon.protocol.requests import CompletionRequest
from ngramd.index.draft import NO_DRAFT, Branch, Draft, Source

A = lambda *xs: np.asarray(xs, dtype=np.int32)  # noqa: E731


class _Fixed:
    """An inner proposer with one fixed branch (or none)."""

    def __init__(self, tokens=(), match_len=0):
        self.draft = Draft((Branch(A(*tokens), 3, Source.WORKSPACE, match_len),)) if tokens else NO_DRAFT
        self.fed: list[int] = []

    def propose(self, context, k, w):
        return self.draft

    def feedback(self, n):
        self.fed.append(n)


def test_longest_recent_match_examples():
    assert longest_recent_match(A(5, 1, 2, 7, 1, 2), 0, 2, 8) == (3, 2)
    assert longest_recent_match(A(9, 1, 2, 3, 1, 2, 3, 1, 2), 1, 2, 16) == (6, 5)
    assert longest_recent_match(A(9, 1, 2, 3, 1, 2, 3, 1, 2), 1, 2, 3) == (6, 3)  # capped at max_n
    assert longest_recent_match(A(1, 2, 3, 4), 0, 1, 8) == (-1, 0)  # nothing recurs
    assert longest_recent_match(A(1, 2, 7, 1, 2), 0, 3, 8) == (-1, 0)  # too short
    # the occurrence must end at or after ``start`` + 1 (inside the generated tokens)
    assert longest_recent_match(A(1, 2, 7, 1, 2), 1, 2, 8) == (2, 2)
    assert longest_recent_match(A(1, 2, 7, 1, 2), 2, 2, 8) == (-1, 0)


def test_longest_recent_match_takes_the_latest_of_equal_lengths():
    ctx = A(4, 8, 0, 4, 8, 1, 4, 8)
    assert longest_recent_match(ctx, 0, 2, 8) == (5, 2)


def test_worked_example_continues_the_period():
    p = ContextLookup(_Fixed(), search_from=1, min_n=2, max_n=16)
    d = p.propose(A(9, 1, 2, 3, 1, 2, 3, 1, 2), k=5, w=1)
    assert d.best.tokens.tolist() == [3, 1, 2, 3, 1]
    assert d.best.source == Source.OUTPUT and d.best.match_len == 5


def test_the_longer_match_goes_first_and_the_index_wins_a_tie():
    ctx = A(9, 1, 2, 3, 1, 2, 3, 1, 2)
    tied_inner = _Fixed((7, 7), match_len=5)
    p = ContextLookup(tied_inner, search_from=1, min_n=2)
    assert p.propose(ctx, k=5, w=1) is tied_inner.draft
    p.feedback(2)
    assert tied_inner.fed == [2]  # the inner proposer hears about its own draft
    shorter_inner = _Fixed((7, 7), match_len=4)
    p = ContextLookup(shorter_inner, search_from=1, min_n=2)
    d = p.propose(ctx, k=5, w=2)
    assert [b.source for b in d.branches] == [Source.OUTPUT, Source.WORKSPACE]
    p.feedback(3)
    assert shorter_inner.fed == []
    # a second branch that starts with the same token would not diverge: dropped
    same_first = _Fixed((3, 9), match_len=1)
    d = ContextLookup(same_first, search_from=1, min_n=2).propose(ctx, k=5, w=2)
    assert [b.source for b in d.branches] == [Source.OUTPUT]


def test_prompt_lookup_searches_the_whole_context():
    p = prompt_lookup()
    d = p.propose(A(5, 6, 7, 8, 5, 6), k=3, w=1)
    assert d.best.tokens.tolist() == [7, 8, 5] and d.best.source == Source.BUFFER and d.best.match_len == 2
    assert p.propose(A(1, 2, 3), k=3, w=1) is NO_DRAFT


def test_prompt_repeats_are_left_to_the_inner_proposer():
    # the suffix [1, 2] occurs only inside the prompt (first 5 tokens)
    inner = _Fixed()
    p = ContextLookup(inner, search_from=5, min_n=2)
    assert p.propose(A(1, 2, 3, 4, 5, 1, 2), k=4, w=1) is NO_DRAFT
    assert p.propose(A(1, 2, 3), k=4, w=1) is NO_DRAFT  # nothing generated yet


@pytest.mark.parametrize("max_tokens", [44, 60])
def test_engine_drafts_from_the_output_and_stays_exact(tiny, max_tokens):
    """A random-weight model falls into loops: the output source drafts them, tokens unchanged."""
    from ngramd.index.store import NgramIndex

    index = NgramIndex(tiny.tokenize_batch)
    completer = Completer(tiny, index, EngineConfig(calibrate=False, add_history=False, reuse_kv=False, answer_cache=False))
    text = "x = 1\n" * 3 + "x "  # greedy output here loops with periods of 5 and then 4 tokens
    req = dict(uri="file:///loop.py", text=text, offset=len(text), max_tokens=max_tokens, multiline=True)
    plain = completer.complete(CompletionRequest(**req, speculate=False))
    spec = completer.complete(CompletionRequest(**req, speculate=True))
    assert spec.token_ids == plain.token_ids and spec.text == plain.text
    assert spec.stats.drafted_by_source.get("output", 0) > 0
    assert spec.stats.accepted_by_source.get("output", 0) > 0
    assert spec.stats.forward_passes < plain.stats.forward_passes
