"""Adaptive draft size: spend verification work only where it pays.

A pass over ``n`` new tokens (the pending token plus n-1 draft tokens) costs
``cost(n)`` ms, measured on the actual device (``CostModel.calibrate``, cached
on disk). Each draft node has a value: the probability that it is reached and
accepted. A branch's first token is right with probability r (its acceptance
rate times its share of the index's counts), each later token with a, where a
is an exponential moving average of past outcomes per (source, match length).
For a chain of k tokens the expected yield is 1 + a + ... + a^k
= (1 - a^(k+1)) / (1 - a), as in DESIGN.md.

A rate is learnt from every draft proposed, verified or not: a verified draft by the tokens
its pass judged, a declined one by its first token, which the plain pass that runs instead
shows at no cost (``declined``). A rate that fell below what pays (a run of rejections
somewhere) is therefore still tested on each proposal, and climbs back once drafts are right
again; the tracker lives as long as the daemon, so a rate learnt from verified drafts alone
could switch the best drafts there are, long matches in the buffer, off for good.

A draft proposed at a request's first pass, the *opening*, has a rate of its own. It comes
before the model has written anything, so its longest match is mostly the cursor's own place in
the buffer, which holds the whole document, and its draft is the text after the cursor: what the
completion goes before, seldom what it repeats. On the greedy answers of the 117 stdlib cases
(bench/cases/stdlib.jsonl and stdlib_wide.jsonl), 2 openings of 117 had their first token right,
and later buffer drafts from matches as long (12 tokens or more) 200 of 231
(``scripts/replay_policy.py --openings``). Priced at a long match's rate, openings replayed on
the bench's answers drafted 4-5 tokens, all rejected. Where no opening draft could pay at the
opening's rates (llama.cpp's near-linear curve), the first pass does not look one up at all,
but for one opening in ``EXPLORE_OPENINGS`` (``probes_opening``): its rate keeps learning.

``choose`` keeps the m most valuable nodes (a prefix-closed set, since values
fall along each branch) maximising (1 + sum of values) / cost(1 + m). m = 0 is
plain decoding: on text that does not repeat, the draft is dropped and the pass
costs what a plain step costs.

The rationale, what the replay measures is left and what was tried: docs/design/drafting-policy.md.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ngramd.index.draft import Branch, Draft

log = logging.getLogger("ngramd.adaptive")

CALIBRATION_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class CostModel:
    """ms per forward pass as a function of new tokens, piecewise linear between measured points
    (and beyond the last one, along the last segment)."""

    sizes: list[int] = field(default_factory=lambda: [1, 64])
    ms: list[float] = field(default_factory=lambda: [70.0, 260.0])  # DESIGN.md's CPU figures as a prior
    online: bool = True  # fold measured passes in (``observe``); False: a fixed curve, deterministic
    # row counts a pass is padded to (ModelRuntime.padded_pass_rows): a pass of 17 tokens
    # costs what one of 20 does, so the policy sees drafts up to the bucket as free
    pad_to: tuple[int, ...] = ()

    def __call__(self, n: int) -> float:
        """ms of one pass of ``n`` new tokens (padding included), in plain Python: asked on every pass,
        twice by ``observe``, and for every size ``best_count`` weighs (numpy costs 20-50 us a call)."""
        if self.pad_to and self.pad_to[0] <= n <= self.pad_to[-1]:
            n = self.pad_to[min(bisect.bisect_left(self.pad_to, n), len(self.pad_to) - 1)]
        xs, ys = self.sizes, self.ms
        if n <= xs[0] or len(xs) == 1:
            return float(ys[0])
        # past the largest calibrated size, along the last segment: a clamp would price a pass of
        # 65 (run padded to 80 rows) as one of 64, and the policy would take those rows for free
        if n >= xs[-1]:
            return float(ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (n - xs[-1]))
        j = bisect.bisect_right(xs, n) - 1  # xs[j] <= n < xs[j + 1]
        # the slope times the offset, plus the left value: np.interp's formula
        return float((ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (n - xs[j]) + ys[j])

    def to_dict(self) -> dict[str, Any]:
        return {"sizes": [int(x) for x in self.sizes], "ms": [round(float(x), 3) for x in self.ms]}

    def observe(self, n: int, ms: float, alpha: float = 0.1) -> None:
        """Fold one measured pass of ``n`` new tokens into the curve (online calibration).

        The calibration at load can be taken at a bad moment (a shared, loaded CPU)
        and is cached on disk; every real pass corrects it. The observation is
        moved to the nearest calibrated size by the curve's own shape, blended in
        with an exponential moving average, and the curve is kept non-decreasing.
        """
        if not self.online or n < 1 or not ms > 0:
            return
        # a pass preempted by another process can take 100x its cost: at most double the curve
        ms = min(ms, 2.0 * self(n))
        j = min(range(len(self.sizes)), key=lambda i: abs(math.log(n / self.sizes[i])))
        at_j = ms * self.ms[j] / max(self(n), 1e-9)
        self.ms[j] += alpha * (at_j - self.ms[j])
        for i in range(j + 1, len(self.ms)):  # a larger pass never costs less ...
            self.ms[i] = max(self.ms[i], self.ms[i - 1])
        for i in range(j - 1, -1, -1):  # ... nor a smaller one more
            self.ms[i] = min(self.ms[i], self.ms[i + 1])

    @classmethod
    def calibrate(cls, runtime: Any, context: int = 512, sizes: Sequence[int] = CALIBRATION_SIZES,
                  repeats: int = 4) -> "CostModel":
        """Time passes of n new tokens after ``context`` cached tokens (random ids, minimum of repeats).

        Sizes are measured round-robin (1, 2, 4, ..., 64, 1, 2, ...), so that a burst of
        load on a shared machine inflates every size alike instead of one size's
        every repeat: the policy depends on the curve's shape, not its scale.
        """
        rng = np.random.default_rng(0)
        ids = rng.integers(100, min(runtime.vocab_size, 30000), context + max(sizes)).tolist()
        kv = runtime.new_cache()
        runtime.forward_pass(ids[:context], kv, keep_last=1)
        kv.extended(ids[:context])
        times: dict[int, list[float]] = {n: [] for n in sizes}
        try:
            for r in range(repeats + 1):  # round 0 warms up
                for n in sizes:
                    runtime.synchronize()
                    t0 = time.perf_counter()
                    runtime.forward_pass(ids[context:context + n], kv)
                    runtime.synchronize()
                    if r:
                        times[n].append((time.perf_counter() - t0) * 1000)
                    kv.extended(ids[context:context + n])
                    kv.crop(context)
        finally:
            runtime.release_cache(kv)
        # the minimum: other processes only ever add time (a shared CPU is noisy)
        out_ms = [min(times[n]) for n in sizes]
        # a pass never gets cheaper with more tokens: enforce monotonicity from the top,
        # so that one slow outlier cannot inflate every larger size
        out_ms = [float(x) for x in np.minimum.accumulate(out_ms[::-1])[::-1]]
        return cls(sizes=list(sizes), ms=out_ms)

    @classmethod
    def cached(cls, runtime: Any, path: Path | None = None, refresh: bool = False) -> "CostModel":
        """The calibration for this model/device from disk, measured once when missing (or ``refresh``).

        The environment variable NGRAMD_RECALIBRATE=1 also forces a new measurement.
        """
        from ngramd.daemon.runtime.loading import cache_root

        # v5: packed weights (daemon/runtime/fast_linear.py) made passes of 3+ tokens cheaper
        # v6: packed calls padded to fixed row counts (a pass of 5 costs what one of 6 does)
        # v7: the model in 2 MB pages (daemon/runtime/huge_pages.py) made one-token passes cheaper
        # than longer ones: 10.8, 19.8, 31.4, 54.3 ms for 1, 2, 4, 8 tokens on llama.cpp (2 cores)
        # the runtime's kind: the same model file costs otherwise on llama.cpp and on torch
        kind = getattr(runtime, "kind", "torch")
        threads = getattr(runtime, "threads", None)
        if not threads:  # the torch runtime's: torch's own pool (torch is loaded: it runs the model)
            import torch

            threads = torch.get_num_threads()
        # llama.cpp's exact kernels (--exact-kernels) cost otherwise than ggml's own
        variant = "|kernels=exact" if getattr(runtime, "kernels", "") == "exact" else ""
        # and a build with the exact many-column products (scripts/llamacpp/exact-gemm.patch) too
        variant += "|gemm=exact" if getattr(runtime, "exact_gemm", False) else ""
        variant += "|f16=exact" if getattr(runtime, "exact_f16", False) else ""
        key = (f"v7|{runtime.name}|{'' if kind == 'torch' else kind + '|'}{runtime.device}|{hardware_name(runtime.device)}|{runtime.dtype}"
               f"|threads={threads}{variant}")
        refresh = refresh or os.environ.get("NGRAMD_RECALIBRATE") == "1"
        path = path or cache_root() / "calibration.json"
        data: dict[str, Any] = {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        if key in data and not refresh:
            return cls(**data[key])
        t0 = time.perf_counter()
        model = cls.calibrate(runtime)
        log.info("calibrated verify cost in %.1f s: %s", time.perf_counter() - t0, model.to_dict())
        data[key] = model.to_dict()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1))
        except OSError as exc:
            log.warning("could not save calibration to %s: %s", path, exc)
        return model


def hardware_name(device: Any) -> str:
    """The chip behind ``device`` (a runtime's, daemon/runtime/base.py Device): another GPU or CPU
    in the same slot (a home folder shared between machines, a GPU swapped) has another cost curve."""
    if device.type == "cuda":
        import torch  # a CUDA device is torch's

        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _bucket(match_len: int) -> int:
    return 0 if match_len <= 2 else 1 if match_len <= 4 else 2 if match_len <= 7 else 3 if match_len <= 11 else 4


# Prior per-token acceptance per match-length bucket, before any outcome is seen.
# From replaying the greedy outputs of the stdlib bench (docs/benchmarks.md at 53c478e, Run 3)
# against the index as the bench builds it (scripts/simulate_drafts.py): mean agreeing
# tokens 0.41 / 0.86 / 2.3 / 3.9 / 4.8 for the buckets, i.e. a = agree / (1 + agree)
# = 0.29 / 0.46 / 0.70 / 0.80 / 0.83.
_PRIOR = (0.3, 0.45, 0.65, 0.78, 0.82)
# The bucket of a request's first proposal, whatever its match length, and its prior: 2 openings
# of 117 had their first token right (the module docstring).
OPENING = len(_PRIOR)
_OPENING_PRIOR = 0.05


# Of the openings no draft could pay at, one in this many is looked up all the same (``probes_opening``).
EXPLORE_OPENINGS = 8


def _key(source: int, match_len: int, opening: bool) -> tuple[int, int]:
    return int(source), OPENING if opening else _bucket(match_len)


def _prior(bucket: int) -> float:
    return _OPENING_PRIOR if bucket == OPENING else _PRIOR[bucket]


def ema_acceptance(a: float, accepted: int, drafted: int, alpha: float) -> float:
    """Per-token acceptance ``a`` after a pass that kept ``accepted`` of ``drafted`` tokens (in order).

    Tokens after the first rejection were never judged, so at most ``accepted + 1``
    outcomes are folded in. The result is clamped to [0.01, 0.99].
    """
    for i in range(min(accepted + 1, drafted)):
        a += alpha * ((1.0 if i < accepted else 0.0) - a)
    return min(max(a, 0.01), 0.99)


# The least a draft of m tokens must be able to give, all accepted: (1 + m) tokens in cost(1 + m)
# against one in cost(1). On a near-linear curve (llama.cpp on the CPU: 14, 24, 37 ms for passes
# of 1, 2, 4) a 1-token draft gains at most 1.19x when accepted and costs 1.7x when rejected: its
# expected gain rests on an acceptance estimate (a prior, a few outcomes) less sure than that
# margin, so such drafts do not pay. On torch's CPU curve (a pass of 2 costs about what one of 1
# does) every size clears it.
MIN_CEILING = 1.25


def best_count(values: Sequence[float], cost: CostModel, min_gain: float = 1.0,
               min_ceiling: float = MIN_CEILING) -> int:
    """The m maximising expected tokens per ms, (1 + sum(values[:m])) / cost(1 + m); 0 is plain decoding.

    ``values``: [n] the value of each draft node, best first. The chosen m must beat
    plain decoding by the factor ``min_gain``, and could beat it by ``min_ceiling`` were
    every token accepted (``MIN_CEILING``).
    """
    # plain Python: asked for every draft proposed, where numpy on 10-32 values cost ~100 us a call
    one = cost(1)
    floor = min_ceiling / one  # tokens per ms a draft must reach were it all accepted
    best, best_rate, running = 0, -math.inf, 0.0
    for m, value in enumerate(values, start=1):
        running += value
        ms = cost(1 + m)
        # strictly better only: of equal rates the shorter draft stays, as argmax's first would
        if (1 + m) / ms >= floor and (1.0 + running) / ms > best_rate:
            best, best_rate = m, (1.0 + running) / ms
    return best if best_rate > min_gain / one else 0


def cut_branches(branches: Sequence[Branch], k: int, budget: int) -> list[tuple[int, np.ndarray]]:
    """(branch index, tokens): each branch's first ``k`` tokens, in order, ``budget`` tokens in all."""
    out = []
    for bi, b in enumerate(branches):
        take = min(k, len(b.tokens), budget)
        if take <= 0:
            break
        out.append((bi, b.tokens[:take]))
        budget -= take
    return out


class AcceptanceTracker:
    """EMA of the per-token acceptance rate, keyed by (source, match-length bucket); a request's
    opening proposal by (source, ``OPENING``)."""

    def __init__(self, alpha: float = 0.15) -> None:
        self.alpha = alpha
        self._rate: dict[tuple[int, int], float] = {}

    def rate(self, source: int, match_len: int, opening: bool = False) -> float:
        key = _key(source, match_len, opening)
        return self._rate.get(key, _prior(key[1]))

    def update(self, source: int, match_len: int, accepted: int, drafted: int, opening: bool = False) -> None:
        """``accepted`` of the ``drafted`` tokens of the taken branch were kept (tokens in order);
        a declined draft's first token: ``drafted`` 1."""
        key = _key(source, match_len, opening)
        self._rate[key] = ema_acceptance(self._rate.get(key, _prior(key[1])), accepted, drafted, self.alpha)

    def best_opening_rate(self) -> float:
        """The highest rate an opening draft may be priced at now: a source's learnt one, or the
        prior, for a source not seen at an opening yet."""
        return max([_OPENING_PRIOR] + [a for (_, b), a in self._rate.items() if b == OPENING])

    def snapshot(self) -> dict[str, float]:
        return {f"{s}/{'opening' if b == OPENING else b}": round(a, 3) for (s, b), a in sorted(self._rate.items())}


@dataclass(frozen=True)
class AdaptiveConfig:
    max_draft: int = 32  # tokens per pass at most (all branches together)
    # branches at most. 1 (chains) is the default: on the 2-core CPU trees of 3 branches
    # accepted no more tokens per pass than chains on real code and cost more (docs/benchmarks.md at 53c478e)
    max_width: int = 1
    min_gain: float = 1.0  # speculate only when expected tokens/ms beats plain by this factor
    fixed_k: int | None = None  # bypass the cost model: draft up to this many tokens of each branch


class DraftPolicy:
    """Trims a draft to the size that maximises expected tokens per millisecond."""

    def __init__(self, cost: CostModel, config: AdaptiveConfig = AdaptiveConfig(),
                 tracker: AcceptanceTracker | None = None) -> None:
        self.cost = cost
        self.cfg = config
        self.tracker = tracker or AcceptanceTracker()
        self._openings_skipped = 0  # openings ``probes_opening`` found not worth a lookup

    @property
    def width(self) -> int:
        """Branches to ask the proposer for."""
        return self.cfg.max_width

    def probes_opening(self, budget: int) -> bool:
        """Whether a request's first pass looks a draft up. Not where even the best-priced opening
        draft, all ``budget`` tokens of it, would be declined: the lookup costs 0.3-0.5 ms on the
        CPU, its caches cold after the pass before. Every ``EXPLORE_OPENINGS``-th such opening is
        looked up all the same, so that the opening's rate still learns (``declined``) and drafts
        come back where openings turn out right."""
        if self.cfg.fixed_k is not None:
            return True
        a = self.tracker.best_opening_rate()
        if best_count([a ** (d + 1) for d in range(min(budget, self.cfg.max_draft))], self.cost,
                      self.cfg.min_gain):
            return True
        self._openings_skipped += 1
        return self._openings_skipped % EXPLORE_OPENINGS == 0

    def choose(self, draft: Draft, budget: int, opening: bool = False) -> list[tuple[int, np.ndarray]]:
        """(branch index, tokens) to verify, best first, at most ``budget`` tokens in all; [] for plain.
        ``opening``: a draft proposed at the request's first pass (the module docstring), priced
        at the opening's rate; its outcome goes to ``feedback`` or ``declined`` with the same flag."""
        if not draft or budget <= 0:
            return []
        branches = draft.branches[: self.cfg.max_width]
        if self.cfg.fixed_k is not None:  # no cost model: every branch cut to fixed_k, within budget
            return cut_branches(branches, self.cfg.fixed_k, budget)
        total = sum(max(b.count, 1) for b in branches)
        values: list[tuple[float, int, int]] = []  # (value, branch, depth)
        for bi, b in enumerate(branches):
            a = self.tracker.rate(int(b.source), b.match_len, opening)
            share = max(b.count, 1) / total if len(branches) > 1 else 1.0
            v = a * share
            for d in range(min(len(b.tokens), self.cfg.max_draft)):
                values.append((v, bi, d))
                v *= a
        if len(branches) > 1:  # one branch's values already fall along it (a < 1)
            values.sort(key=lambda x: -x[0])
        values = values[: min(budget, self.cfg.max_draft)]
        best_m = best_count([v for v, _, _ in values], self.cost, self.cfg.min_gain)
        if best_m == 0:
            return []
        depth = [0] * len(branches)
        for _, bi, d in values[:best_m]:
            depth[bi] = max(depth[bi], d + 1)
        return [(bi, branches[bi].tokens[:depth[bi]]) for bi in range(len(branches)) if depth[bi] > 0]

    def declined(self, draft: Draft, next_token: int, opening: bool = False) -> None:
        """A draft ``choose`` declined, and the token the plain pass made instead: whether the
        first token of a branch it priced was right, learnt as ``feedback`` learns a verified one's."""
        if not draft:
            return
        branches = draft.branches[: self.cfg.max_width]
        taken = next((bi for bi, b in enumerate(branches) if int(b.tokens[0]) == int(next_token)), -1)
        self.feedback(draft, taken, int(taken >= 0), 1, opening)

    def feedback(self, draft: Draft, taken_branch: int, accepted: int, drafted_len: int,
                 opening: bool = False) -> None:
        """Outcome of one pass: ``accepted`` tokens of branch ``taken_branch`` (-1: none matched);
        ``opening`` as ``choose`` was told."""
        if not draft:
            return
        b = draft.branches[max(taken_branch, 0)]
        self.tracker.update(int(b.source), b.match_len, accepted if taken_branch >= 0 else 0,
                            max(drafted_len, 1), opening)
