"""Fixtures for the engine tests: the tiny random-weight runtime, loaded once per session."""

from __future__ import annotations

import numpy as np
import pytest

from ngramd.daemon.runtime.loading import load_runtime
from ngramd.index.draft import NO_DRAFT, Branch, Draft, Source


@pytest.fixture(scope="session")
def tiny():
    return load_runtime("tiny", device="cpu")


@pytest.fixture(scope="session")
def tiny_fim():
    """The tiny model with fill-in-the-middle tokens: completion prompts take the FIM form."""
    return load_runtime("tiny-fim", device="cpu")


class ScriptedProposer:
    """Hand-written drafts: ``script(context) -> list of token lists`` (branches, best first)."""

    def __init__(self, script):
        self.script = script
        self.calls = 0
        self.accepted: list[int] = []

    def propose(self, context, k, w):
        self.calls += 1
        branches = [list(b)[:k] for b in self.script(np.asarray(context)) if len(b)][:w]
        branches = [b for b in branches if b]
        if not branches:
            return NO_DRAFT
        return Draft(tuple(Branch(tokens=np.array(b, dtype=np.int32), count=1, source=Source.BUFFER,
                                  match_len=4) for b in branches))

    def feedback(self, num_accepted):
        self.accepted.append(num_accepted)


@pytest.fixture
def scripted():
    return ScriptedProposer
