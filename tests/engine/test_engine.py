"""The loop with the tiny model: speculative greedy == plain greedy for any draft."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy
from ngramd.daemon.engine import loop as engine
from ngramd.daemon.engine.loop import generate, prefill
from ngramd.daemon.runtime.kv_cache import KVCache
from ngramd.daemon.engine.proposer import NullProposer
from ngramd.daemon.protocol.requests import GenerationStats, SamplingParams
from ngramd.daemon.engine.stops import StopChecker, StopConfig

SOURCE = Path(__file__).resolve().parents[2] / "daemon" / "engine" / "acceptance.py"
MAX = 24


def _prompt(tiny, n=300):
    return tiny.encode(SOURCE.read_text())[:n]


def _run(tiny, prompt, proposer, max_tokens=MAX, width=3, sampling=SamplingParams(), cancel=None, kv=None,
         stats=None, forced=None):
    kv = kv if kv is not None else KVCache()
    stats = stats if stats is not None else GenerationStats()
    prefill(tiny, kv, prompt, stats, None, 128)
    policy = None if isinstance(proposer, NullProposer) else DraftPolicy(
        CostModel(), AdaptiveConfig(fixed_k=64, max_width=width))
    stopper = StopChecker(StopConfig(max_tokens=max_tokens), tiny.token_bytes)
    out = generate(tiny, kv, prompt, proposer, policy, stopper, sampling, forced, stats, cancel)
    return out, stats, kv


@pytest.fixture(scope="module")
def reference(tiny):
    prompt = _prompt(tiny)
    out, stats, _ = _run(tiny, prompt, NullProposer(), max_tokens=MAX + 8)
    assert stats.forward_passes == MAX + 8 and len(out.tokens) == MAX + 8
    return prompt, out.tokens


def _truth(prompt, ref, ctx):
    """The plain continuation after context ``ctx`` (which extends prompt + a prefix of ref)."""
    done = len(ctx) - len(prompt)
    return list(ref[done:])


def _wrong(tokens):
    return [(t + 1) % 1000 + 5 for t in tokens]


CASES = {
    "all_right": lambda tr, rng: [tr[:8]],
    "all_wrong": lambda tr, rng: [_wrong(tr[:8])],
    "partly_right": lambda tr, rng: [tr[:3] + _wrong(tr[3:8])],
    "empty": lambda tr, rng: [],
    "longer_than_max": lambda tr, rng: [tr + _wrong(tr[:40])],
    "random": lambda tr, rng: [list(rng.integers(0, 49152, size=int(rng.integers(1, 9))))],
    "tree_second_branch_right": lambda tr, rng: [_wrong(tr[:5]), tr[:6]],
    "tree_shared_prefix": lambda tr, rng: [tr[:2] + _wrong(tr[2:6]), tr[:5]],
    "tree_mixed": lambda tr, rng: [_wrong(tr[:3]), tr[:1] + _wrong(tr[1:3]), tr[:7]],
}


@pytest.mark.parametrize("rows_at_once", [False, True], ids=["rows_as_walked", "rows_at_once"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_speculative_greedy_equals_plain(tiny, reference, scripted, case, rows_at_once, monkeypatch):
    """``rows_at_once``: the tokens of a pass read before the walk, as on a GPU (here on the CPU)."""
    monkeypatch.setattr(engine, "_reads_all_rows", lambda device: rows_at_once)
    prompt, ref = reference
    rng = np.random.default_rng(0)
    proposer = scripted(lambda ctx: CASES[case](_truth(prompt, ref, ctx), rng))
    out, stats, kv = _run(tiny, prompt, proposer)
    assert out.tokens == ref[:MAX]
    assert out.stop_reason == "max_tokens"
    assert len(kv) >= len(prompt) + MAX - 1  # the cache covers the context but the pending token
    assert kv.tokens[: len(prompt) + MAX - 1] == prompt + ref[: MAX - 1]
    if case in ("all_right", "longer_than_max", "tree_second_branch_right"):
        assert stats.forward_passes < MAX // 2 and stats.accepted > 0
    if case == "all_wrong":
        assert stats.accepted == 0 and stats.forward_passes == MAX


def test_the_proposer_reads_the_whole_context_as_it_grows_past_its_room(tiny, reference, scripted, monkeypatch):
    """The loop fills one int32 array as the context grows; room for one token forces it to grow."""
    monkeypatch.setattr(engine, "CONTEXT_ROOM", 1)
    prompt, ref = reference
    seen = []

    def draft(ctx):
        seen.append(list(ctx))
        return [_truth(prompt, ref, ctx)[:3]]

    out, stats, _ = _run(tiny, prompt, scripted(draft))
    assert out.tokens == ref[:MAX] and stats.accepted > 0
    assert len(seen) > 2
    for ctx in seen:
        assert ctx == prompt + ref[:len(ctx) - len(prompt)]


@pytest.mark.parametrize("rows_at_once", [False, True], ids=["rows_as_walked", "rows_at_once"])
@pytest.mark.parametrize("case", ["all_right", "partly_right", "tree_mixed"])
def test_speculative_greedy_equals_plain_under_a_forced_prefix(tiny, scripted, case, rows_at_once, monkeypatch):
    """The characters before the cursor the prompt backed off (a forced prefix) mask the rows
    that write them: their token is the masked row's, never the row's own argmax read at once."""
    from ngramd.daemon.engine.prompt import ForcedPrefix

    prompt = _prompt(tiny)
    forced = ForcedPrefix(tiny, " self.tokens.ext")
    plain, _, _ = _run(tiny, prompt, NullProposer(), forced=forced)
    monkeypatch.setattr(engine, "_reads_all_rows", lambda device: rows_at_once)
    rng = np.random.default_rng(0)
    proposer = scripted(lambda ctx: CASES[case](_truth(prompt, plain.tokens, ctx), rng))
    out, stats, _ = _run(tiny, prompt, proposer, forced=ForcedPrefix(tiny, " self.tokens.ext"))
    assert out.tokens == plain.tokens
    assert tiny.decode(plain.tokens).startswith(" self.tokens.ext")
    if case == "all_right":
        assert stats.accepted > 0


def test_cache_matches_cold_prefill_after_tree_passes(tiny, reference, scripted):
    """Invariant of KVCache: after speculative passes its entries equal a cold prefill's."""
    prompt, ref = reference
    proposer = scripted(lambda ctx: CASES["tree_mixed"](_truth(prompt, ref, ctx), None))
    _, _, kv = _run(tiny, prompt, proposer)
    cold = KVCache()
    tiny.forward(torch.tensor([kv.tokens]), cold.cache)
    for a, b in zip(kv.cache.layers, cold.cache.layers):
        assert torch.allclose(a.keys, b.keys, atol=1e-4) and torch.allclose(a.values, b.values, atol=1e-4)


def test_tree_logits_match_chain_logits(tiny, reference):
    from ngramd.daemon.runtime.tree import build_tree
    from ngramd.daemon.runtime.model import tree_inputs

    prompt, ref = reference
    branches = [[11, 12, 13], [11, 14], [15, 16]]
    tree = build_tree(branches)
    kv = KVCache()
    prefill(tiny, kv, prompt, GenerationStats(), None, 512)
    past = len(kv)
    mask, pos = tree_inputs(tree, past, torch.float32, tiny.device)
    pending = prompt[-1]
    tree_logits = tiny.forward(torch.tensor([[pending] + tree.tokens.tolist()]), kv.cache,
                               position_ids=pos, attention_mask=mask)
    kv.extended([pending] + tree.tokens.tolist())
    for b in branches:
        kv.crop(past)
        chain = tiny.forward(torch.tensor([[pending] + b]), kv.cache)
        kv.extended([pending] + b)
        rows = [0]
        node = -1
        for t in b:
            node = next(c for c in tree.children(node) if tree.tokens[c] == t)
            rows.append(node + 1)
        assert torch.allclose(tree_logits[rows], chain, atol=1e-4)


def test_sampling_runs_and_is_seeded(tiny, reference, scripted):
    prompt, ref = reference
    params = SamplingParams(temperature=0.8, top_p=0.95, seed=7)
    prop = lambda: scripted(lambda ctx: [_truth(prompt, ref, ctx)[:6]])
    a, _, _ = _run(tiny, prompt, prop(), sampling=params)
    b, _, _ = _run(tiny, prompt, prop(), sampling=params)
    assert a.tokens == b.tokens and len(a.tokens) == MAX


def test_an_error_after_the_forward_resets_the_cache(tiny, reference, scripted, monkeypatch):
    # the pass has written every draft row (a tree: siblings at shifted positions) when
    # acceptance fails: a cache that kept them would look reusable to the next request
    prompt, ref = reference
    proposer = scripted(lambda ctx: [_wrong(_truth(prompt, ref, ctx)[:3]), _truth(prompt, ref, ctx)[:4]])

    def failing_probs(*args, **kwargs):
        raise RuntimeError("acceptance failed")

    monkeypatch.setattr(engine, "target_probs", failing_probs)
    kv = KVCache()
    with pytest.raises(RuntimeError, match="acceptance failed"):
        _run(tiny, prompt, proposer, sampling=SamplingParams(temperature=0.8, seed=7), kv=kv)
    assert len(kv) == 0 and list(kv.tokens) == []


def test_cancellation_between_passes(tiny, reference, scripted):
    prompt, ref = reference
    cancel = threading.Event()

    def script(ctx):
        if len(ctx) - len(prompt) >= 5:
            cancel.set()
        return []

    out, stats, _ = _run(tiny, prompt, scripted(script), cancel=cancel)
    assert out.cancelled and out.stop_reason == "cancelled"
    assert 5 <= len(out.tokens) < MAX and out.tokens == ref[: len(out.tokens)]


@pytest.mark.parametrize("stop", ["eos", "stop_string"])
def test_a_draft_is_cut_before_the_token_that_ends_the_answer(tiny, reference, scripted, stop):
    """A draft running past where the answer stops verifies only the tokens before the stop:
    the rows after it would never be emitted. The output is plain decoding's."""
    prompt, ref = reference
    j = next(i for i in range(4, len(ref)) if ref[i] not in ref[:i] and tiny.token_bytes(ref[i]).strip())
    if stop == "eos":
        cfg = StopConfig(max_tokens=MAX, eos_ids=frozenset({ref[j]}))
    else:  # the stop string is the stop token's text: every character of it comes in that token
        text = tiny.token_bytes(ref[j]).decode("utf-8", "replace")
        before = tiny.decode(ref[:j])
        assert text not in before + text[:-1], "the stop string must first complete at token j"
        cfg = StopConfig(max_tokens=MAX, stop_strings=(text,))

    def run(proposer):
        kv, stats = KVCache(), GenerationStats()
        prefill(tiny, kv, prompt, stats, None, 128)
        policy = DraftPolicy(CostModel(), AdaptiveConfig(fixed_k=64)) if proposer is not None else None
        out = generate(tiny, kv, prompt, proposer or NullProposer(), policy, StopChecker(cfg, tiny.token_bytes),
                       SamplingParams(), None, stats)
        return out, stats

    plain, _ = run(None)
    assert plain.stop_reason == stop and len(plain.tokens) == j + (stop == "stop_string")  # eos is not emitted
    out, stats = run(scripted(lambda ctx: [_truth(prompt, ref, ctx)[:20]]))
    assert (out.tokens, out.text, out.stop_reason) == (plain.tokens, plain.text, plain.stop_reason)
    # one pass of the pending token and the j tokens before the stop: its row j gives the stop token
    assert (stats.forward_passes, stats.drafted, stats.accepted) == (1, j, j)


def test_a_draft_cut_short_by_the_stop_is_priced_again(tiny, reference):
    from ngramd.index.draft import Branch, Draft, Source

    """On a near-linear cost curve (llama.cpp's on the CPU) a long draft pays and a 1-token one
    does not: cut to one token by the stop, the draft is declined and the pass is plain."""
    prompt, ref = reference
    assert ref[1] != ref[0]
    curve = CostModel(sizes=[1, 2, 16, 64], ms=[10.0, 18.0, 40.0, 160.0], online=False)

    class LongMatch:  # the truth, as a 16-token match of the index would draft it (prior rate 0.82)
        def propose(self, context, k, w):
            tokens = np.array(_truth(prompt, ref, list(context))[:min(k, 20)], dtype=np.int32)
            return Draft((Branch(tokens=tokens, count=1, source=Source.BUFFER, match_len=16),))

        def feedback(self, num_accepted):
            pass

    def run(cfg):
        kv, stats = KVCache(), GenerationStats()
        prefill(tiny, kv, prompt, stats, None, 128)
        out = generate(tiny, kv, prompt, LongMatch(), DraftPolicy(curve, AdaptiveConfig()),
                       StopChecker(cfg, tiny.token_bytes), SamplingParams(), None, stats)
        return out, stats

    _, long_run = run(StopConfig(max_tokens=MAX))
    assert long_run.drafted > 1  # the policy takes the long draft
    out, stats = run(StopConfig(max_tokens=MAX, eos_ids=frozenset({ref[1]})))
    assert (out.tokens, out.stop_reason) == (ref[:1], "eos")
    assert (stats.drafted, stats.forward_passes) == (0, 2)  # the 1-token draft left is declined


@pytest.mark.parametrize("resumed", [False, True])
def test_only_a_requests_first_proposal_is_its_opening(tiny, reference, scripted, resumed):
    """The policy learns a request's first draft apart (daemon/engine/policy.py): the loop says
    which one that is, and a resumed answer, whose prompt ends in the model's own output, has none."""
    prompt, ref = reference
    openings = []

    class Recording(DraftPolicy):
        def choose(self, draft, budget, opening=False):
            openings.append(opening)
            return super().choose(draft, budget, opening)

    kv, stats = KVCache(), GenerationStats()
    context = prompt + (ref[:2] if resumed else [])
    prefill(tiny, kv, context, stats, None, 128)
    out = generate(tiny, kv, context, scripted(lambda ctx: [_wrong(_truth(prompt, ref, ctx)[:4])]),
                   Recording(CostModel(), AdaptiveConfig(fixed_k=4)), StopChecker(StopConfig(max_tokens=6), tiny.token_bytes),
                   SamplingParams(), None, stats, emitted_before=tiny.token_bytes(ref[0]) + tiny.token_bytes(ref[1])
                   if resumed else b"")
    assert out.tokens == (ref[2:8] if resumed else ref[:6])  # every draft wrong: a pass a token
    assert len(openings) == 5 and openings == [not resumed] + [False] * (len(openings) - 1)


def test_an_opening_no_draft_could_pay_for_is_looked_up_one_request_in_eight(tiny, reference, scripted):
    """On a near-linear cost curve an opening draft, priced at the opening's prior, is declined
    however long: the request's first pass skips the lookup, but for one opening in
    ``EXPLORE_OPENINGS``, whose declined draft keeps the opening's rate learning. Later passes
    look up as before, and the output is plain decoding's either way."""
    from ngramd.daemon.engine.policy import EXPLORE_OPENINGS

    prompt, ref = reference
    policy = DraftPolicy(CostModel(sizes=[1, 2, 4, 8, 16], ms=[10.0, 16.0, 22.5, 36.5, 64.0], online=False))
    first_pass_lookups = 0
    for request in range(2 * EXPLORE_OPENINGS):
        proposer = scripted(lambda ctx: [_wrong(_truth(prompt, ref, ctx)[:8])])
        kv, stats = KVCache(), GenerationStats()
        prefill(tiny, kv, prompt, stats, None, 128)
        out = generate(tiny, kv, prompt, proposer, policy, StopChecker(StopConfig(max_tokens=3), tiny.token_bytes),
                       SamplingParams(), None, stats)
        assert out.tokens == ref[:3]
        # the third pass has no room left for a draft: 2 lookups with the opening's, 1 without
        first_pass_lookups += proposer.calls == 2
        assert proposer.calls in (1, 2)
    assert first_pass_lookups == 2
    assert policy.tracker.snapshot()["0/opening"] < 0.05  # learnt from the two: both wrong


def test_an_opening_is_looked_up_where_its_draft_could_pay():
    """torch's flat CPU curve pays even for the opening's prior; an edit's first draft is the
    original, always looked up; a policy with no cost model drafts every draft it gets."""
    from ngramd.daemon.edit.editor import EditDraftPolicy
    from ngramd.index.draft import Source

    flat = DraftPolicy(CostModel(sizes=[1, 2, 16], ms=[70.0, 70.5, 130.0], online=False))
    linear = DraftPolicy(CostModel(sizes=[1, 2, 4, 8, 16], ms=[10.0, 16.0, 22.5, 36.5, 64.0], online=False))
    assert all(flat.probes_opening(16) for _ in range(20))
    assert [linear.probes_opening(16) for _ in range(16)].count(True) == 2
    assert all(EditDraftPolicy(linear).probes_opening(16) for _ in range(20))
    fixed = DraftPolicy(CostModel(sizes=[1, 2, 4, 8, 16], ms=[10.0, 16.0, 22.5, 36.5, 64.0]), AdaptiveConfig(fixed_k=4))
    assert all(fixed.probes_opening(16) for _ in range(20))
    for _ in range(40):  # openings that keep being right: the opening's rate climbs until drafts pay
        linear.tracker.update(int(Source.BUFFER), 14, 16, 16, opening=True)
    assert all(linear.probes_opening(16) for _ in range(20))
