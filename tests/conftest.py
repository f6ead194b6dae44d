"""Fixtures of every folder: the embedded GGUF on llama.cpp, loaded once per session
(skipped where llama-cpp-python is not installed: ngramd then serves on torch), and the
measurement scripts as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="session")
def load_script():
    """``load_script("gpu_bench")``: scripts/gpu_bench.py as a module (scripts are no package),
    loaded once a session and registered in ``sys.modules``, where dataclasses look their module up."""

    def load(name: str):
        key = f"ngramd_scripts.{name}"
        if key not in sys.modules:
            spec = importlib.util.spec_from_file_location(key, SCRIPTS / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[key]
                raise
        return sys.modules[key]

    return load


@pytest.fixture(scope="session")
def llama_rt():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    from ngramd.daemon.runtime.llamacpp import load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    runtime = load_llamacpp(embedded_gguf_path())
    yield runtime
    runtime.close()
