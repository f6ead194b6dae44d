"""What the GPU run needs of the daemon's code on a bare GPU image: no platformdirs when
NGRAMD_CACHE_DIR is set, and the pass-drift measurements' inputs on the model's device
(scripts/measure_pass_drift.py, and gpu_bench.py's exactness check, which uses it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ngramd.daemon.runtime.loading import cache_root

REPO = Path(__file__).resolve().parents[2]


def test_cache_dir_from_the_environment_needs_no_platformdirs(monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAMD_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # import fails, as on the GPU image
    assert cache_root() == tmp_path


def test_cache_dir_without_the_variable_is_the_user_cache_dir(monkeypatch):
    import platformdirs

    monkeypatch.delenv("NGRAMD_CACHE_DIR", raising=False)
    assert cache_root() == Path(platformdirs.user_cache_dir("ngramd"))


@pytest.fixture(scope="module")
def pass_drift(load_script):
    return load_script("measure_pass_drift")


class MetaDeviceRuntime:
    """A runtime on the meta device, a stand-in for CUDA on a CPU machine: like a CUDA model,
    its forward refuses inputs on another device (``ModelRuntime.forward`` moves none).
    Logits: 0..vocab-1 on every row, and one row's swapped top two where ``swap_row`` says."""

    device = torch.device("meta")
    vocab_size = 16

    def __init__(self, swap_row=None):
        self.swap_row, self.devices = swap_row, []

    def forward(self, input_ids, cache, keep_last=None, **kwargs):
        self.devices.append(input_ids.device)
        assert input_ids.device == self.device, f"input_ids on {input_ids.device}, the model on {self.device}"
        logits = torch.arange(self.vocab_size, dtype=torch.float32).repeat(keep_last or input_ids.shape[1], 1)
        if self.swap_row is not None and input_ids.shape[1] > 1 and keep_last is None:  # the k-token pass
            logits[self.swap_row, -2:] = torch.tensor([15.0, 14.0])
        return logits


def test_drift_inputs_are_made_on_the_runtimes_device(pass_drift):
    rt = MetaDeviceRuntime()
    diff, gap, same = pass_drift.drift_at(rt, list(range(10)), 4)
    assert set(rt.devices) == {torch.device("meta")} and len(rt.devices) == 2 + 1 + 4
    assert (diff, gap, same) == (0.0, 1.0, True)


def test_drift_reports_an_argmax_that_differs(pass_drift):
    diff, gap, same = pass_drift.drift_at(MetaDeviceRuntime(swap_row=2), list(range(10)), 4)
    assert (diff, gap, same) == (1.0, 1.0, False)


def test_gpu_benchs_exactness_check_makes_its_inputs_on_the_runtimes_device(load_script):
    rt = MetaDeviceRuntime()
    exact = load_script("gpu_bench").pass_exactness(rt, k=4, ctx=6, sequences=2)
    assert set(rt.devices) == {torch.device("meta")} and len(rt.devices) == 2 * (2 + 1 + 4)
    assert (exact["max_abs_logit_diff"], exact["min_top2_gap"], exact["argmax_agrees"]) == (0.0, 1.0, True)
