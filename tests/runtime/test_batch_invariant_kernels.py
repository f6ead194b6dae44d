"""K-quant models (the Q4_K_M mix most local users run) on the llama.cpp runtime. With ggml's
own kernels their multi-token passes are not exact, so the check at load turns speculation off
and names the way out; ``exact_kernels`` (``--exact-kernels``) loads them without the tiled
K-quant product and the repacked weights, and then speculation is exact and token-identical to
plain decoding. docs/design/batch-invariance.md has the measurements.

ggml reads ``GGML_CPU_TILED_MM`` once per process, at its first product: each case that sets
the kernels runs in a process of its own."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]
X86 = platform.machine() in ("x86_64", "AMD64")

# In a fresh process: load, and with exact passes compare plain decoding and speculation on
# three positions of real code (a random model repeats itself: drafts get verified).
CHILD = r'''
import json, sys
from pathlib import Path
from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.protocol.requests import CompletionRequest
from ngramd.daemon.runtime.llamacpp import load_llamacpp
from ngramd.index.store import NgramIndex

rt = load_llamacpp(sys.argv[1], exact_kernels=sys.argv[2] == "exact")
out = {"exact": rt.exactness.exact, "detail": rt.exactness.detail, "kernels": rt.kernels}
if rt.exactness.exact:
    text = Path(sys.argv[3]).read_text()[:3000]
    completer = Completer(rt, NgramIndex(rt.tokenize_batch),
                          EngineConfig(calibrate=False, add_history=False, answer_cache=False))
    out["identical"], out["drafted"] = [], 0
    for offset in (1200, 2100, 2900):
        req = dict(uri="file:///work/store.py", text=text, offset=offset, max_tokens=40)
        plain = completer.complete(CompletionRequest(**req, speculate=False))
        spec = completer.complete(CompletionRequest(**req, speculate=True))
        out["identical"].append(spec.token_ids == plain.token_ids)
        out["drafted"] += spec.stats.drafted
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory, load_script):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    pytest.importorskip("gguf")
    from ngramd.daemon.runtime.llamacpp import build_info

    if build_info()["llamafile"]:
        pytest.skip("a llamafile build's attention is not exact with any kernels (scripts/install_llamacpp.sh)")
    out = tmp_path_factory.mktemp("gguf") / "random-small-k.Q4_K_M.gguf"
    load_script("make_random_gguf").write(out, size="small-k", qtype_name="q4_k_m", seed=3)
    return out


def _load_in_a_fresh_process(model: Path, kernels: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    env["NGRAMD_HUGE_PAGES"] = "0"
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), kernels, str(ROOT / "index" / "store.py")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_file_holds_q4_k_and_q6_k_weights(kquant_gguf):
    import gguf

    types = {t.tensor_type for t in gguf.GGUFReader(str(kquant_gguf)).tensors}
    assert {gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K} <= types


@pytest.mark.skipif(not X86, reason="the tiled K-quant product and Q4_K's repacking are measured on x86")
def test_with_ggml_s_own_kernels_the_check_fails_and_names_the_flag(kquant_gguf):
    verdict = _load_in_a_fresh_process(kquant_gguf, "default")
    assert not verdict["exact"] and verdict["kernels"] == "ggml"
    assert "rows of 8 and 16-token passes differ from one-token passes" in verdict["detail"]
    assert "--exact-kernels" in verdict["detail"]


def test_with_exact_kernels_speculation_is_exact_and_identical_to_plain(kquant_gguf):
    verdict = _load_in_a_fresh_process(kquant_gguf, "exact")
    assert verdict["exact"], verdict["detail"]
    assert verdict["kernels"] == "exact" and "--exact-kernels" in verdict["detail"]
    assert verdict["identical"] == [True, True, True]
    assert verdict["drafted"] >= 8, "drafts of several tokens must have been verified"
