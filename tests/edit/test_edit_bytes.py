"""Re-synchronising an edit by bytes (daemon/edit/byte_sync.py) on hand-made tokens (no model)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.edit.byte_sync import ByteMatchConfig, byte_resync, placement_cost, token_starts
from ngramd.daemon.edit.proposer import EditProposer, EditProposerConfig

from edit_sim import HandVocab, simulate

# A hand-made vocabulary: id -> the token's bytes. ")" and ":" exist apart and as "):".
VOCAB = ["def", " f", "(", "x", "):", "\n   ", " return", " x", ":", " int", ")", " ->", " bool",
         " is", " name", " str"]
HAND = HandVocab(VOCAB)
ID = HAND.id
PROMPT = [1, 2, 3]
token_bytes, ids = HAND.token_bytes, HAND.ids


def test_token_starts_gives_the_bytes_and_every_token_start():
    data, starts = token_starts(np.asarray(ids("def", " f", "("), dtype=np.int32), token_bytes)
    assert data == b"def f("
    assert starts.tolist() == [0, 3, 5, 6]


def test_a_match_ends_at_the_end_of_a_split_token():
    # original "f(x):" as f ( x "):"; the output wrote ": int)" and then ":"
    m = byte_resync(b"f(x):", b"f(x: int):", a=3, g=3, original_bounds=frozenset({0, 1, 2, 3, 5}),
                    generated_starts=[0, 1, 2, 3, 4, 8, 9])
    assert (m.end, m.length, m.cost) == (5, 2, 5)  # "):" matched, ": int" inserted, nothing deleted


def test_a_match_must_end_where_a_token_of_the_original_ends():
    # ")" alone ends inside "):": drafting there would start mid-token
    m = byte_resync(b"f(x):", b"f(x: int)", a=3, g=3, original_bounds=frozenset({0, 1, 2, 3, 5}),
                    generated_starts=[0, 1, 2, 3, 4, 8])
    assert m is None


def test_a_short_match_must_begin_at_a_token():
    # "tr" ends " str" (output) and begins inside " true" (original): no evidence
    original = b" true if"
    orig_bounds = frozenset({0, 5, 8})
    assert byte_resync(original, b" str", a=0, g=0, original_bounds=orig_bounds | {3},
                       generated_starts=[0]) is None
    # a match as long as far_min needs no token start
    cfg = ByteMatchConfig(far_min=2)
    m = byte_resync(original, b" str", a=0, g=0, original_bounds=orig_bounds | {3},
                    generated_starts=[0], cfg=cfg)
    assert m is not None and m.end == 3


def test_the_cheapest_placement_wins_near_beats_longer_far():
    # the output dropped a quote: " 'name' is ... name here" <- " name"
    original = b" 'name' is a name here"
    orig_bounds = frozenset({0, 2, 6, 7, 10, 12, 17, 22})
    m = byte_resync(original, b" name", a=0, g=0, original_bounds=orig_bounds, generated_starts=[0])
    # " name" (5 bytes) at 12 costs 12 deleted; "name" (4) at 2 costs 1 inserted + 2 deleted
    assert (m.end, m.length, m.cost) == (6, 4, 3)


def test_deleting_backwards_counts_double():
    original = b"ab cd ab"
    orig_bounds = frozenset({0, 2, 3, 5, 6, 8})
    # " ab" matches 1 byte ahead of the divergence at 4, "ab" also 4 bytes back: ahead wins
    m = byte_resync(original, b"xx ab", a=4, g=3, original_bounds=orig_bounds, generated_starts=[0, 2, 3])
    assert m.end == 8
    # 2 bytes back (cost 2 * 2) loses to 2 bytes ahead (cost 2)
    original = b"ab  ab"
    m = byte_resync(original, b"ab", a=2, g=0, original_bounds=frozenset({0, 2, 4, 6}),
                    generated_starts=[0])
    assert m.end == 6


def test_no_suffix_in_the_original_gives_none():
    assert byte_resync(b"abc", b"xyz", a=0, g=0, original_bounds=frozenset({0, 3}),
                       generated_starts=[0]) is None


# ------------------------------------------------------------ in the proposer

HINTED = ids("def", " f", "(", "x", ":", " int", ")", " ->", " bool", ":", "\n   ", " return", " x")
ORIGINAL = ids("def", " f", "(", "x", "):", "\n   ", " return", " x")


def test_after_type_hints_the_output_is_found_again_by_bytes():
    p = EditProposer(np.asarray(ORIGINAL, dtype=np.int32), len(PROMPT), token_bytes=token_bytes)
    log: list = []
    simulate(p, PROMPT, HINTED, log)
    # after "... -> bool:" no token suffix occurs in the original ("):" is one token);
    # the bytes ":" end "):", so the rest of the original is drafted
    after_colon = [branch for out_len, branch, _ in log if out_len == HINTED.index(ID["\n   "])]
    assert after_colon and after_colon[0][:3] == ids("\n   ", " return", " x"), log


def test_by_tokens_alone_the_same_edit_is_lost_there():
    p = EditProposer(np.asarray(ORIGINAL, dtype=np.int32), len(PROMPT))
    log: list = []
    simulate(p, PROMPT, HINTED, log)
    at = HINTED.index(ID["\n   "])
    assert not [branch for out_len, branch, _ in log if out_len == at and branch], log


def test_bytes_save_passes_where_tokens_are_lost():
    # ": str" then ")" ":" where the original has "):": by bytes "):" ends that token and the
    # next line is drafted; by tokens nothing there occurs in the original. (The simulated
    # verifier asserts the output is the target whatever is drafted.)
    target = ids("def", " f", "(", "x", ":", " str", ")", ":", "\n   ", " return", " name", " is", " x")
    passes, logs = {}, {}
    for with_bytes in (False, True):
        p = EditProposer(np.asarray(ORIGINAL, dtype=np.int32), len(PROMPT),
                         token_bytes=token_bytes if with_bytes else None)
        logs[with_bytes] = []
        passes[with_bytes] = simulate(p, PROMPT, target, logs[with_bytes])
    at = target.index(ID["\n   "])
    assert [b for n, b, _ in logs[True] if n == at][0][:2] == ids("\n   ", " return")
    assert passes[True] < passes[False]


def test_a_long_match_of_one_output_token_is_looked_for_only_near():
    # an 8-space indent matches 320 bytes on, where the original's only indent is; one token
    # says little about where the output is, so it is looked for only near the divergence
    original = b"x=1\n" + b"y=1\n" * 80 + b"        pass\n"
    every_byte = frozenset(range(len(original) + 1))
    assert byte_resync(original, b"x        ", a=1, g=1, original_bounds=every_byte,
                       generated_starts=[0, 1]) is None
    # the same bytes as two of the output's tokens are looked for anywhere
    m = byte_resync(original, b"x        ", a=1, g=1, original_bounds=every_byte, generated_starts=[0, 1, 5])
    assert m.end == original.index(b"pass")


def test_an_empty_original_drafts_nothing_by_bytes_either():
    p = EditProposer(np.zeros(0, dtype=np.int32), len(PROMPT), token_bytes=token_bytes)
    assert not p.propose(np.asarray(PROMPT, dtype=np.int32))
    p.feedback(0)
    assert not p.propose(np.asarray(PROMPT + ids("def", " f"), dtype=np.int32))
    assert p.mode == "lost"


def test_a_cheaper_byte_match_beats_a_far_token_match():
    """``self, `` deleted: the output's ``(`` ``value`` occurs as tokens only far down the body
    (``g(value``); as bytes, ``value`` ends the original's `` value`` six bytes on. The token
    match would imply deleting ~25 bytes, the byte match 6: the byte match wins, and the rest of
    the def line is drafted."""
    hand = HandVocab(["def", " f", "(", "self", ",", " value", "):", "\n   ", " if", " g", "value",
                      "\n       ", " return"])
    original = hand.ids("def", " f", "(", "self", ",", " value", "):", "\n   ", " if", " g", "(", "value", "):",
                        "\n       ", " return", " value")
    target = hand.ids("def", " f", "(", "value", "):", "\n   ", " if", " g", "(", "value", "):",
                      "\n       ", " return", " value")
    passes, logs = {}, {}
    for cheaper_bytes in (False, True):
        p = EditProposer(np.asarray(original, dtype=np.int32), len(PROMPT),
                         EditProposerConfig(cheaper_bytes=cheaper_bytes), token_bytes=hand.token_bytes)
        logs[cheaper_bytes] = []
        passes[cheaper_bytes] = simulate(p, PROMPT, target, logs[cheaper_bytes])
    (near, near_accepted), = [(branch, a) for out_len, branch, a in logs[True] if out_len == 4]
    assert near[:3] == hand.ids("):", "\n   ", " if") and near_accepted == len(near), logs[True]
    (far, far_accepted), = [(branch, a) for out_len, branch, a in logs[False] if out_len == 4]
    assert far[:2] == hand.ids("):", "\n       ") and far_accepted == 1, logs[False]  # the draft after g(value
    assert passes[True] <= passes[False]


def test_placement_cost_counts_inserted_and_deleted_bytes_backwards_double():
    assert placement_cost(start=10, length=4, since=4, a=10) == 0  # the output resumes where it left
    assert placement_cost(start=16, length=5, since=5, a=10) == 6  # six bytes deleted
    assert placement_cost(start=10, length=2, since=5, a=10) == 3  # three bytes inserted before the match
    assert placement_cost(start=4, length=3, since=3, a=10) == 12  # six bytes back: repeated text


@settings(max_examples=300, deadline=None)
@given(original=st.binary(min_size=1, max_size=40).map(lambda b: bytes(c % 4 + 97 for c in b)),
       tail=st.binary(min_size=1, max_size=12).map(lambda b: bytes(c % 4 + 97 for c in b)),
       a=st.integers(0, 40), below=st.integers(0, 40))
def test_below_keeps_only_the_placements_cheaper_than_it(original, tail, a, below):
    """``below`` prunes the search: the same match as the unpruned search when that one costs
    less than ``below``, else none."""
    a = min(a, len(original))
    bounds = frozenset(range(len(original) + 1))
    generated = original[:a] + tail
    starts = list(range(len(generated)))  # one byte per token
    best = byte_resync(original, generated, a, a, bounds, starts)
    pruned = byte_resync(original, generated, a, a, bounds, starts, below=below)
    assert pruned == (best if best is not None and best.cost < below else None)
