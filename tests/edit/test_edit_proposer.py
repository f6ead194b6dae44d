"""The aligned-pointer proposer on hand-made token arrays (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from ngramd.daemon.edit.proposer import (EditProposer, EditProposerConfig, adapt_k, follow,
                                  occurrences, resync)
from ngramd.index.draft import NO_DRAFT, Branch, Draft, Source

from edit_sim import simulate

A = lambda *xs: np.asarray(xs, dtype=np.int32)  # noqa: E731
PROMPT = [1, 2, 3]


# ------------------------------------------------------------ pure functions

def test_follow_counts_the_repeated_prefix():
    assert follow(A(5, 6, 7), 1, A(6, 7, 9)) == 2
    assert follow(A(5, 6, 7), 0, A(9)) == 0
    assert follow(A(5, 6, 7), 3, A(5)) == 0  # past the end nothing repeats
    assert follow(A(5, 6, 7), 1, A(6, 7)) == 2


def test_occurrences_gives_end_positions():
    assert occurrences(A(1, 2, 1, 2), A(1, 2)).tolist() == [2, 4]
    assert occurrences(A(1, 2, 1, 2), A(2, 2)).tolist() == []
    assert occurrences(A(1), A(1, 2)).tolist() == []


def test_resync_prefers_longest_suffix_then_nearest_occurrence():
    original = A(10, 11, 12, 13, 10, 11, 14)
    # [10, 11] occurs twice; the end nearest the anchor wins
    assert resync(original, A(99, 10, 11), anchor=6) == (6, 2)
    assert resync(original, A(99, 10, 11), anchor=1) == (2, 2)
    # a longer suffix beats a nearer shorter one
    assert resync(original, A(13, 10, 11), anchor=1) == (6, 3)
    # deletion of 11: [10, 12] is absent, [12] ends at 3
    assert resync(A(10, 11, 12, 13), A(10, 12), anchor=1) == (3, 1)


def test_resync_trusts_one_token_only_near_the_anchor():
    original = A(*range(100, 200))
    assert resync(original, A(7, 150), anchor=50, near=4) == (51, 1)
    assert resync(original, A(7, 150), anchor=10, near=4) is None
    # two tokens are trusted anywhere
    assert resync(original, A(150, 151), anchor=10, near=4) == (52, 2)


def test_adapt_k_grows_on_full_acceptance_and_shrinks_on_rejection():
    assert adapt_k(8, 8, 8, 4, 32) == 16
    assert adapt_k(32, 32, 32, 4, 32) == 32
    assert adapt_k(32, 32, 0, 4, 32) == 16
    assert adapt_k(8, 8, 0, 4, 32) == 4
    assert adapt_k(16, 16, 12, 4, 32) == 24  # keeps twice the accepted run


# ------------------------------------------------------------ the proposer

def test_exact_copy_drafts_the_whole_original_in_one_pass():
    original = list(range(100, 140))
    p = EditProposer(A(*original), len(PROMPT), EditProposerConfig(k_max=64))
    first = p.propose(A(*PROMPT))
    assert first.best.tokens.tolist() == original
    assert first.best.source == Source.EDIT_ORIGINAL
    p2 = EditProposer(A(*original), len(PROMPT), EditProposerConfig(k_max=64))
    # 40 tokens drafted and accepted, the bonus comes from the model: 1 pass + 1 for the eos
    assert simulate(p2, PROMPT, original + [2]) == 1


def test_worked_example_from_the_docstring():
    original = [10, 11, 12, 13, 14, 15]
    target = [10, 11, 99, 13, 15]
    p = EditProposer(A(*original), len(PROMPT))
    log: list = []
    passes = simulate(p, PROMPT, target, log)
    assert [branch for _, branch, _ in log] == [[10, 11, 12, 13, 14, 15], [13, 14, 15]]
    assert passes == 2


def test_resyncs_after_an_insertion():
    original = list(range(100, 160))
    # three new tokens inserted after position 20
    target = original[:20] + [7, 8, 9] + original[20:]
    p = EditProposer(A(*original), len(PROMPT))
    log: list = []
    passes = simulate(p, PROMPT, target, log)
    # pass 1: 20 accepted + 7; 2: guess (21..) rejected, 8; 3: lost, no draft, 9;
    # 4: lost, 120; then [120] re-syncs by one token near the anchor and the
    # rest of the original is drafted
    at_24 = [branch for out_len, branch, _ in log if out_len == 24]
    assert at_24 and at_24[0][:3] == original[21:24], log
    assert passes <= 7, log
    # after the insertion the proposer is aligned on the original again
    assert p.propose(A(*PROMPT, *target)) is NO_DRAFT
    assert p.pointer == len(original) and p.mode == "aligned"


def test_resyncs_after_a_deletion():
    original = list(range(100, 160))
    target = original[:30] + original[35:]  # five tokens deleted
    p = EditProposer(A(*original), len(PROMPT))
    log: list = []
    passes = simulate(p, PROMPT, target, log)
    # pass 1: 30 accepted, the model emits original[35]; re-sync by one token
    # finds it 5 tokens ahead and drafts the rest
    assert log[1][1][:3] == original[36:39]
    assert passes == 3, log  # one pass to the deletion, then the re-synced pointer drafts the rest
    assert p.propose(A(*PROMPT, *target)) is NO_DRAFT
    assert p.pointer == len(original) and p.mode == "aligned"


def test_rename_every_few_tokens_costs_one_pass_per_change():
    # a renamed token (x=50 -> 99) in a long original: the replacement guess
    # continues right after each change
    original = [10, 11, 50, 12, 13, 14, 15, 50, 16, 17, 18, 19, 20, 50, 21, 22]
    target = [99 if t == 50 else t for t in original]
    p = EditProposer(A(*original), len(PROMPT))
    passes = simulate(p, PROMPT, target)
    assert passes == 4  # three changes + the tail


def test_empty_original_gives_no_draft():
    p = EditProposer(A(), len(PROMPT))
    assert p.propose(A(*PROMPT)) is NO_DRAFT
    p.feedback(0)
    assert p.propose(A(*PROMPT, 5)) is NO_DRAFT


class _Fallback:
    def __init__(self):
        self.proposed = 0
        self.fed: list[int] = []

    def propose(self, context, k=None, w=None):
        self.proposed += 1
        return Draft((Branch(A(42), 1, Source.WORKSPACE, 1),))

    def feedback(self, n):
        self.fed.append(n)


def test_falls_back_to_the_secondary_proposer_when_lost():
    fb = _Fallback()
    p = EditProposer(A(), len(PROMPT), fallback=fb)
    d = p.propose(A(*PROMPT))
    assert d.best.source == Source.WORKSPACE
    p.feedback(1)
    assert fb.fed == [1]
    # aligned again: the original drafts and the fallback is not asked
    fb2 = _Fallback()
    p2 = EditProposer(A(10, 11), len(PROMPT), fallback=fb2)
    assert p2.propose(A(*PROMPT)).best.source == Source.EDIT_ORIGINAL
    p2.feedback(2)
    assert fb2.proposed == 0 and fb2.fed == []


class _MatchFallback(_Fallback):
    def __init__(self, match_len):
        super().__init__()
        self.match_len = match_len

    def propose(self, context, k=None, w=None):
        self.proposed += 1
        return Draft((Branch(A(42), 1, Source.OUTPUT, self.match_len),))


@pytest.mark.parametrize("fallback_match, wins", [(2, False), (3, True)])
def test_after_a_guess_a_fallback_needs_a_real_match_to_go_first(fallback_match, wins):
    # fallback_min_match=3: a 2-token match anywhere in the workspace does not beat
    # the guess that the model replaced one token
    fb = _MatchFallback(fallback_match)
    p = EditProposer(A(10, 11, 12, 13), len(PROMPT), fallback=fb)
    p.propose(A(*PROMPT))
    p.feedback(1)
    d = p.propose(A(*PROMPT, 10, 77))
    assert p.mode == "guess"
    assert (d.best.source == Source.OUTPUT) is wins


@pytest.mark.parametrize("fallback_match, wins", [(2, False), (3, True)])
def test_after_a_resync_the_longer_match_goes_first(fallback_match, wins):
    original = A(10, 11, 12, 13, 14, 15, 16)
    fb = _MatchFallback(fallback_match)
    p = EditProposer(original, len(PROMPT), fallback=fb)
    p.propose(A(*PROMPT))
    p.feedback(1)
    d = p.propose(A(*PROMPT, 10, 77, 13, 14))  # [13, 14] re-syncs: a 2-token match
    assert p.mode == "resync" and p.pointer == 5
    assert (d.best.source == Source.OUTPUT) is wins
    p.feedback(1)
    assert fb.fed == ([1] if wins else [])


def test_insertion_branch_when_the_verifier_takes_trees():
    original = [10, 11, 12, 13]
    p = EditProposer(A(*original), len(PROMPT), EditProposerConfig(branches=2))
    p.propose(A(*PROMPT))
    p.feedback(1)
    d = p.propose(A(*PROMPT, 10, 77))  # 77 replaced or was inserted before 11
    assert [b.tokens.tolist() for b in d.branches] == [[12, 13], [11, 12, 13]]
    assert p.mode == "guess"


@pytest.mark.parametrize("seed", range(20))
def test_random_edits_always_reconstruct_and_rarely_get_lost(seed):
    # the simulated verifier asserts the output; here we check the drafts help:
    # far fewer passes than tokens for small edits
    rng = np.random.default_rng(seed)
    original = rng.integers(100, 400, size=200).tolist()
    target = list(original)
    for _ in range(3):
        i = int(rng.integers(0, len(target)))
        kind = rng.integers(0, 3)
        if kind == 0:
            target[i] = 7
        elif kind == 1:
            target.insert(i, 8)
        else:
            del target[i]
    p = EditProposer(A(*original), len(PROMPT))
    passes = simulate(p, PROMPT, target)
    assert passes <= 20, passes
