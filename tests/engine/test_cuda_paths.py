"""What the engine and model loader do differently on CUDA, checked without a GPU (none here)."""

from __future__ import annotations

import dataclasses
import logging
import threading

import torch

from ngramd.daemon.engine import loop as engine
from ngramd.daemon.engine.loop import GenerationStats
from ngramd.daemon.runtime.kv_cache import KVCache
from ngramd.daemon.runtime.model import ModelRuntime, resolve_device
from ngramd.daemon.runtime.loading import load_runtime


def test_fp32_products_are_set_to_full_precision_at_load(monkeypatch, caplog):
    """TF32 rounds as bf16 does (which broke identical output): whatever a script or an image
    set, loading sets full fp32 back, and warns about the override it cannot switch off."""
    from ngramd.daemon.runtime.model import exact_float32

    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    try:
        torch.set_float32_matmul_precision("high")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
        with caplog.at_level(logging.WARNING, logger="ngramd.model"):
            resolve_device("cpu")
            assert torch.get_float32_matmul_precision() == "highest"
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
            assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" not in caplog.text  # it acts on CUDA alone
            exact_float32(torch.device("cuda"))
            assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" in caplog.text
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cuda.matmul.allow_tf32 = before[1]
        torch.backends.cudnn.allow_tf32 = before[2]


def test_the_cpu_fast_paths_are_cpu_only():
    rt = load_runtime("tiny", "cpu")
    assert rt.fast_paths
    assert not dataclasses.replace(rt, device=torch.device("cuda")).fast_paths


class _CudaLikeRuntime:
    device = torch.device("cuda")
    synchronize = ModelRuntime.synchronize  # the torch runtime's own wait for the GPU

    def forward_pass(self, ids, cache, keep_last=None, tree=None):
        return None


class _Cache(KVCache):
    """Tokens only: the fake runtime writes no cache."""

    def extended(self, new_tokens):
        self.tokens.extend(new_tokens)


def test_a_cuda_prefill_waits_for_each_piece_so_a_cancel_between_pieces_counts(monkeypatch):
    """Queued all at once, the pieces ran on after a cancel, and a prepare's time was charged to
    the request after it."""
    synced = []
    cancel = threading.Event()
    tensor = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda data, device=None: tensor(data))  # no GPU here
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    runtime = _CudaLikeRuntime()
    real_piece = engine._prefill_piece

    def piece_then_cancel(rt, kv, piece):
        real_piece(rt, kv, piece)
        if len(synced) == 2:
            cancel.set()  # the user typed on

    monkeypatch.setattr(engine, "_prefill_piece", piece_then_cancel)
    kv = _Cache()
    done = engine.prefill(runtime, kv, list(range(1, 42)), GenerationStats(), cancel, chunk=8)
    assert not done and synced == [runtime.device] * 2 and len(kv) == 16
