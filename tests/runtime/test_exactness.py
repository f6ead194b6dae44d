"""The exactness self-check: it passes on llama.cpp built without llamafile, and it fails on a
runtime whose multi-token passes round otherwise than its one-token passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ngramd.daemon.runtime.exactness import CHECK_PASSES, check_exactness


class StandInCache:
    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def crop(self, n: int) -> None:
        del self.tokens[n:]

    def extended(self, new_tokens) -> None:
        self.tokens.extend(int(t) for t in new_tokens)


class StandInRuntime:
    """Logits that depend on the context only (a seeded draw per prefix), so every pass shape
    agrees, unless ``nudge`` changes the rows of passes over several tokens: ``"ulp"`` moves one
    logit of one row by one unit in the last place, ``"flip"`` makes that row's runner-up win."""

    vocab_size = 64

    def __init__(self, nudge: str | None = None) -> None:
        self.nudge = nudge
        self.released: list[StandInCache] = []

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode()]

    def new_cache(self) -> StandInCache:
        return StandInCache()

    def release_cache(self, cache: StandInCache) -> None:
        self.released.append(cache)

    def _row(self, context: list[int]) -> np.ndarray:
        seed = hash(tuple(context)) % (2**32)
        return np.random.default_rng(seed).standard_normal(self.vocab_size).astype(np.float32)

    def forward_pass(self, ids, cache, keep_last=None, tree=None) -> torch.Tensor:
        rows = [self._row(cache.tokens + list(ids[:i + 1])) for i in range(len(ids))]
        if len(ids) > 1 and self.nudge:
            row = rows[len(ids) // 2]
            if self.nudge == "ulp":
                row[3] = np.nextafter(row[3], np.float32(np.inf))
            else:
                top = int(np.argmax(row))
                row[int(np.argsort(row)[-2])] = row[top] + np.float32(1e-3)
        out = np.stack(rows)[-(keep_last or len(ids)):]
        return torch.from_numpy(out)


def test_a_runtime_with_row_invariant_passes_passes_the_check():
    rt = StandInRuntime()
    verdict = check_exactness(rt)
    assert verdict.exact
    assert verdict.checked_rows == sum(CHECK_PASSES) == 24
    assert len(rt.released) == 1, "the check hands its cache back"


@pytest.mark.parametrize("nudge, flipped", [("ulp", 0), ("flip", 1)])
def test_a_runtime_whose_multi_token_rows_differ_fails_the_check(nudge, flipped):
    rt = StandInRuntime(nudge)
    verdict = check_exactness(rt)
    assert not verdict.exact
    assert verdict.checked_rows == 24
    # one row of the 8-token pass and one of the 16-token pass
    assert verdict.detail.startswith("2 of 24 rows"), verdict.detail
    assert "8-token pass row 4" in verdict.detail
    assert f"argmax changed in {2 * flipped}" in verdict.detail
    assert len(rt.released) == 1


def test_a_text_too_short_for_the_passes_is_refused():
    with pytest.raises(ValueError):
        check_exactness(StandInRuntime(), text="x = 1")


@pytest.mark.real_model
def test_llamacpp_built_without_llamafile_passes_the_check(llama_rt):
    from ngramd.daemon.runtime.llamacpp import build_info

    assert not build_info()["llamafile"], "scripts/install_llamacpp.sh builds with -DGGML_LLAMAFILE=OFF"
    assert llama_rt.exactness.exact, llama_rt.exactness.detail
    assert llama_rt.exactness.checked_rows == 24
    # passes of other sizes too, as the engine's drafts are: with the build's many-column product
    # (tests/runtime/test_exact_gemm.py) 2, 3 and 5 tokens take its tiles of 2, 3 and 1 columns
    wide = check_exactness(llama_rt, passes=(2, 3, 5, 32))
    assert wide.exact and wide.checked_rows == 42, wide.detail
