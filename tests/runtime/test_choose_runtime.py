"""``--runtime auto``: llama.cpp for a GGUF file on the CPU, torch for the rest."""

from __future__ import annotations

import importlib.util

import pytest

from ngramd.daemon.runtime import loading
from ngramd.daemon.runtime.loading import ModelLoadError, choose_runtime, runs_on_cpu


@pytest.fixture
def llama_installed(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return object() if name == "llama_cpp" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_auto_runs_a_gguf_on_the_cpu_on_llamacpp(llama_installed, tmp_path):
    gguf = tmp_path / "m.gguf"
    assert choose_runtime(str(gguf), "cpu") == "llamacpp"
    assert choose_runtime(None, "cpu") == "llamacpp"  # the embedded default model is a GGUF


@pytest.mark.parametrize("spec", ["tiny", "tiny-fim", "org/model"])
def test_auto_runs_the_rest_on_torch(llama_installed, spec):
    assert choose_runtime(spec, "cpu") == "torch"


def test_auto_runs_a_gguf_on_torch_for_cuda(llama_installed, tmp_path):
    assert choose_runtime(str(tmp_path / "m.gguf"), "cuda") == "torch"
    assert choose_runtime(str(tmp_path / "m.gguf"), "cuda:1") == "torch"


def test_auto_is_the_cpu_without_asking_torch_where_no_gpu_device_exists(monkeypatch, tmp_path):
    monkeypatch.setattr(loading.sys, "platform", "linux")
    monkeypatch.setattr(loading, "_GPU_NODES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setitem(loading.sys.modules, "torch", None)  # `import torch` would raise
    assert runs_on_cpu("auto") and runs_on_cpu("cpu") and not runs_on_cpu("cuda")
    with pytest.raises(ModelLoadError, match="unknown device"):
        runs_on_cpu("tpu")


def test_auto_asks_torch_where_a_gpu_device_exists(monkeypatch, tmp_path):
    import torch

    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.setattr(loading, "_GPU_NODES", (str(node),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not runs_on_cpu("auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runs_on_cpu("auto")


def test_auto_without_llamacpp_falls_back_to_torch_and_says_why(monkeypatch, tmp_path, caplog):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    with caplog.at_level("WARNING", logger="ngramd.model"):
        assert choose_runtime(str(tmp_path / "m.gguf"), "cpu") == "torch"
    assert "llama-cpp-python is not installed" in caplog.text


def test_a_named_runtime_is_taken_as_asked_and_an_unknown_one_refused():
    assert choose_runtime("tiny", "cpu", "llamacpp") == "llamacpp"
    with pytest.raises(ModelLoadError, match="unknown runtime"):
        choose_runtime("tiny", "cpu", "onnx")


@pytest.mark.parametrize("spec, device, says", [
    ("tiny", "cpu", "loads GGUF files"),
])
def test_llamacpp_refuses_what_it_cannot_run(spec, device, says):
    with pytest.raises(ModelLoadError, match=says):
        loading.load_runtime(spec, device, "llamacpp")
