"""A greedy verifier simulated on token ids: the 'model' always emits a fixed target.

Used to drive a proposer without a model: each round the proposer drafts, the
simulated verifier accepts the longest prefix of a branch that matches the
target, then emits the next target token (the correction or the bonus), exactly
as greedy speculative decoding does.
"""

from __future__ import annotations

import numpy as np


def simulate(proposer, prompt: list[int], target: list[int], log: list | None = None) -> int:
    """Run ``proposer`` until ``target`` is generated; return the number of verify passes."""
    context = list(prompt)
    out: list[int] = []
    passes = 0
    while len(out) < len(target):
        draft = proposer.propose(np.asarray(context, dtype=np.int32))
        best_accepted, best_branch = 0, None
        for b in draft.branches:
            toks = b.tokens.tolist()
            a = 0
            while a < len(toks) and len(out) + a < len(target) and toks[a] == target[len(out) + a]:
                a += 1
            if best_branch is None or a > best_accepted:
                best_accepted, best_branch = a, toks
        if log is not None:
            log.append((len(out), best_branch, best_accepted))
        proposer.feedback(best_accepted)
        step = target[len(out): len(out) + best_accepted + 1]
        out += step
        context += step
        passes += 1
    assert out == target
    return passes


class HandVocab:
    """A hand-made vocabulary for proposer tests: token ``i`` (from 10 on) is ``tokens[i - 10]``."""

    FIRST = 10  # ids below are free for prompts

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.id = {t: i + self.FIRST for i, t in enumerate(tokens)}

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokens[token_id - self.FIRST].encode()

    def ids(self, *tokens: str) -> list[int]:
        return [self.id[t] for t in tokens]
