"""Fixtures of every folder: the embedded GGUF on llama.cpp, loaded once per session
(skipped where llama-cpp-python is not installed: ngramd then serves on torch)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def llama_rt():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    from ngramd.daemon.runtime.llamacpp import load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    runtime = load_llamacpp(embedded_gguf_path())
    yield runtime
    runtime.close()
