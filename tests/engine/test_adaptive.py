"""The verify-cost curve: online correction keeps it monotone and follows the device."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ngramd.index.draft import Branch, Draft, Source

from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy


def test_observations_pull_the_curve_to_the_measured_costs():
    cost = CostModel(sizes=[1, 2, 4, 8], ms=[1000.0, 1000.0, 1000.0, 1000.0])  # calibrated under heavy load
    truth = {1: 70.0, 2: 120.0, 4: 118.0, 8: 130.0}
    for _ in range(200):
        for n, ms in truth.items():
            cost.observe(n, ms)
    assert abs(cost(1) - 70) < 5 and abs(cost(8) - 130) < 8
    assert all(a <= b for a, b in zip(cost.ms, cost.ms[1:])), cost.ms


def test_an_observation_between_sizes_moves_the_nearest_point_by_the_curve_shape():
    cost = CostModel(sizes=[1, 8], ms=[70.0, 140.0])
    cost.observe(7, 2 * cost(7), alpha=1.0)  # everything twice as slow, seen at n=7
    assert cost.ms[1] == 280.0 and cost.ms[0] == 70.0


@st.composite
def cost_curves(draw):
    sizes = sorted(draw(st.sets(st.integers(1, 96), min_size=1, max_size=8)))
    ms = sorted(draw(st.lists(st.floats(0.5, 400.0), min_size=len(sizes), max_size=len(sizes))))
    pad_to = tuple(sorted(draw(st.sets(st.integers(1, 120), max_size=5))))
    return CostModel(sizes=sizes, ms=ms, pad_to=pad_to)


def _array_cost(cost: CostModel, ns: np.ndarray) -> np.ndarray:
    """The cost curve over [k] pass sizes as numpy prices it: np.interp's formula written out,
    along the last segment past the largest size, padded sizes first."""
    if cost.pad_to:
        buckets = np.asarray(cost.pad_to)
        inside = (ns >= buckets[0]) & (ns <= buckets[-1])
        ns = np.where(inside, buckets[np.minimum(np.searchsorted(buckets, ns), len(buckets) - 1)], ns)
    xs, ys = np.asarray(cost.sizes, dtype=np.float64), np.asarray(cost.ms, dtype=np.float64)
    ns = np.asarray(ns, dtype=np.float64)
    if len(xs) == 1:
        return np.full(ns.shape, ys[0])
    j = np.clip(np.searchsorted(xs, ns, side="right") - 1, 0, len(xs) - 2)
    ms = np.where(ns <= xs[0], ys[0], (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (ns - xs[j]) + ys[j])
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(ns >= xs[-1], ys[-1] + slope * (ns - xs[-1]), ms)


def _array_best_count(values: list[float], cost: CostModel, min_gain: float = 1.0) -> int:
    """``best_count`` in numpy: every size's expected tokens per ms at once, the first best."""
    from ngramd.daemon.engine.policy import MIN_CEILING

    if not values:
        return 0
    sizes = np.arange(2, len(values) + 2)
    costs = _array_cost(cost, sizes)
    rates = (1.0 + np.cumsum(values)) / costs
    rates = np.where(sizes / costs >= MIN_CEILING / cost(1), rates, -np.inf)
    best = int(np.argmax(rates))
    return best + 1 if rates[best] > min_gain / cost(1) else 0


@settings(max_examples=300, deadline=None)
@given(cost_curves(), st.integers(1, 200))
def test_one_pass_is_priced_as_numpy_prices_it(cost, n):
    assert cost(n) == float(_array_cost(cost, np.array([n]))[0])


@settings(max_examples=300, deadline=None)
@given(cost_curves(), st.lists(st.floats(0.0, 1.0), max_size=40), st.sampled_from([1.0, 1.05]))
def test_the_best_draft_size_is_the_one_numpy_finds(cost, values, min_gain):
    """``best_count`` is a plain-Python loop for speed (every draft proposed is priced): it picks
    the size the array form picks, from the same floats, ties to the shorter draft included."""
    from ngramd.daemon.engine.policy import best_count

    assert best_count(values, cost, min_gain) == _array_best_count(values, cost, min_gain)


def test_policy_drafts_less_when_passes_of_several_tokens_turn_out_expensive():
    draft = Draft((Branch(tokens=np.arange(10, 26, dtype=np.int32), count=1, source=Source.BUFFER,
                          match_len=5),))
    cheap = DraftPolicy(CostModel(sizes=[1, 2, 16], ms=[70.0, 74.0, 130.0]), AdaptiveConfig())
    dear = DraftPolicy(CostModel(sizes=[1, 2, 16], ms=[70.0, 74.0, 130.0]), AdaptiveConfig())
    for _ in range(100):
        dear.cost.observe(2, 160.0)
        dear.cost.observe(16, 400.0)
        dear.cost.observe(1, 70.0)
    cheap_k = sum(len(t) for _, t in cheap.choose(draft, 16))
    dear_k = sum(len(t) for _, t in dear.choose(draft, 16))
    assert cheap_k > 0 and dear_k == 0  # at the measured costs no draft pays: plain decoding


def test_padded_passes_cost_their_bucket_and_the_policy_fills_the_bucket():
    """With packed weights a pass of 17 tokens runs as one of 20 (daemon/runtime/fast_linear.py): the
    cost model says so, and a draft that pays for 20 rows uses them."""
    from ngramd.daemon.engine.policy import best_count
    from ngramd.daemon.runtime.fast_linear import PACK_BUCKETS

    plain = CostModel(sizes=[1, 64], ms=[10.0, 74.0], online=False)
    padded = CostModel(sizes=[1, 64], ms=[10.0, 74.0], online=False, pad_to=PACK_BUCKETS)
    assert padded(17) == padded(20) == plain(20) > plain(17) and padded(2) == plain(2)
    # 65 runs as 80 rows (fast_linear pads it): past the calibrated 64 the curve goes on rising
    assert [padded(n) for n in (1, 16, 17, 19, 20, 65)] == [plain(n) for n in (1, 16, 20, 20, 20, 80)]
    assert padded(65) == plain(80) == pytest.approx(74.0 + 16 * 64 / 63) and plain(80) > plain(64)
    values = [0.97 ** (i + 1) for i in range(40)]  # a long draft that keeps being accepted
    m = best_count(values, padded)
    assert m > 0 and 1 + m in PACK_BUCKETS


def test_a_draft_that_spills_past_the_calibrated_sizes_pays_for_its_padded_rows():
    """A draft of 64 is a pass of 65, padded to 80 rows: not free at the 64-token price. At the
    prior curve even an edit accepted at 0.99 per token stays within the 64 calibrated rows."""
    from ngramd.daemon.engine.policy import best_count
    from ngramd.daemon.runtime.fast_linear import PACK_BUCKETS

    cost = CostModel(online=False, pad_to=PACK_BUCKETS)  # the prior: 70 ms at 1, 260 ms at 64
    assert cost(65) == cost(80) > cost(64) == cost(57)
    values = np.cumprod(np.full(64, 0.99)).tolist()  # EditDraftPolicy's values at acceptance 0.99
    assert 1 + best_count(values, cost) <= 64


def _long_buffer_match() -> Draft:
    return Draft((Branch(tokens=np.arange(10, 26, dtype=np.int32), count=1, source=Source.BUFFER,
                         match_len=14),))


def test_a_declined_draft_teaches_its_first_token_so_a_low_rate_can_climb_back():
    """A rate that a run of rejections drove below break-even (here long buffer matches) is not
    switched off for good: each declined draft's first token, which the plain pass shows, is
    learnt. Right ones bring the drafts back; wrong ones keep them declined."""
    draft = _long_buffer_match()
    policy = DraftPolicy(CostModel(sizes=[1, 2, 16], ms=[40.0, 44.0, 80.0], online=False), AdaptiveConfig())
    prior = policy.tracker.rate(int(Source.BUFFER), 14)
    policy.declined(draft, 7)  # a wrong first token moves the rate down from its prior
    assert policy.tracker.rate(int(Source.BUFFER), 14) < prior
    assert policy.choose(draft, 16)  # still above what pays
    for _ in range(40):  # a place where every long buffer match is wrong at its first token
        policy.feedback(draft, 0, 0, 16)
    for _ in range(20):  # declined, and the plain pass makes another token: it stays declined
        assert policy.choose(draft, 16) == []
        policy.declined(draft, 7)
    declined = 0
    while not policy.choose(draft, 16):  # the output follows the drafts again
        policy.declined(draft, int(draft.best.tokens[0]))
        declined += 1
        assert declined < 20, policy.tracker.snapshot()


def test_a_requests_opening_draft_is_learnt_apart_from_later_drafts_of_its_match_length():
    """A draft at a request's first pass continues the cursor's own place in the buffer: its own
    key, with a low prior, so that it is declined where a later draft of the same match is taken,
    and what it teaches moves its key only."""
    from ngramd.daemon.engine.policy import _OPENING_PRIOR, AcceptanceTracker

    draft = _long_buffer_match()
    tracker = AcceptanceTracker()
    policy = DraftPolicy(CostModel(sizes=[1, 2, 16], ms=[40.0, 44.0, 80.0], online=False), AdaptiveConfig(),
                         tracker)
    assert policy.choose(draft, 16, opening=True) == [] and policy.choose(draft, 16)
    later = tracker.rate(int(Source.BUFFER), 14)
    assert tracker.rate(int(Source.BUFFER), 14, opening=True) == _OPENING_PRIOR < later
    policy.declined(draft, 7, opening=True)  # the opening's first token was wrong
    assert set(tracker.snapshot()) == {"0/opening"}
    assert tracker.rate(int(Source.BUFFER), 14, opening=True) < _OPENING_PRIOR
    assert tracker.rate(int(Source.BUFFER), 14) == later
    rights = 0
    while not policy.choose(draft, 16, opening=True):  # where openings are right (the user retypes
        policy.declined(draft, int(draft.best.tokens[0]), opening=True)  # what follows the cursor) ...
        assert tracker.rate(int(Source.BUFFER), 14) == later
        rights += 1
        assert rights < 40, tracker.snapshot()  # ... they are drafted
    before = tracker.rate(int(Source.BUFFER), 14, opening=True)
    policy.feedback(draft, 0, 16, 16, opening=True)  # a verified opening is learnt under its key
    assert tracker.rate(int(Source.BUFFER), 14, opening=True) > before
    assert tracker.rate(int(Source.BUFFER), 14) == later


def test_the_calibration_on_disk_is_per_chip(tmp_path, monkeypatch):
    """Measured once per model, device and chip: the same slot (``cuda:0``, ``cpu``) with another
    chip behind it (a home folder shared between machines) measures its own curve."""
    import types

    import torch

    import ngramd.daemon.engine.policy as adaptive

    measured = []
    monkeypatch.setattr(adaptive.CostModel, "calibrate",
                        classmethod(lambda cls, rt: measured.append(rt) or cls(sizes=[1, 2], ms=[1.0, 2.0])))
    runtime = types.SimpleNamespace(name="m", device=torch.device("cpu"), dtype=torch.float32)
    path = tmp_path / "calibration.json"
    for chip in ("chip A", "chip A", "chip B", "chip A"):
        monkeypatch.setattr(adaptive, "hardware_name", lambda device, chip=chip: chip)
        adaptive.CostModel.cached(runtime, path=path)
    assert len(measured) == 2  # chip A once, chip B once, chip A again from disk


def test_the_cpu_is_named():
    import torch

    from ngramd.daemon.engine.policy import hardware_name

    name = hardware_name(torch.device("cpu"))
    assert isinstance(name, str) and name.strip()


def test_on_a_near_linear_curve_a_draft_too_short_to_pay_even_accepted_is_declined():
    """llama.cpp on the CPU: passes of 1, 2, 4 tokens cost 14, 24, 37 ms. A 1-token draft accepted
    gains at most 1.17x; rejected it costs 1.7x: declined however likely it looks. A long draft
    accepted at 0.95 a token still pays."""
    from ngramd.daemon.engine.policy import MIN_CEILING, best_count

    cost = CostModel(sizes=[1, 2, 4, 8, 16, 32, 64], ms=[14.0, 24.0, 37.0, 63.0, 109.0, 205.0, 400.0], online=False)
    assert 2 * cost(1) / cost(2) < MIN_CEILING
    assert best_count([0.9], cost, min_ceiling=1.0) == 1  # by expected rate alone it would draft
    assert best_count([0.9], cost) == 0
    assert best_count([0.9, 0.1], cost) == 0  # the second token adds too little
    long = best_count(np.cumprod(np.full(32, 0.95)).tolist(), cost)
    assert long >= 3 and (1 + long) * cost(1) / cost(1 + long) >= MIN_CEILING
    flat = CostModel(sizes=[1, 2, 16], ms=[70.0, 74.0, 130.0], online=False)  # torch's CPU curve
    assert best_count([0.6], flat) == 1
