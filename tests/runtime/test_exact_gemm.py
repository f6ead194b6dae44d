"""The exact many-column products of ngramd's llama.cpp build (scripts/llamacpp/exact-gemm.patch):
Q4_1 and Q8_0 weights against several columns through a kernel that sums each column as the
one-column ``vec_dot`` does. The embedded model (Q4_1 layers, Q8_0 output) passes through it in
every pass of two tokens or more: passes of 2 to 16 tokens must give bitwise the logits they give
with the kernel off (``GGML_CPU_EXACT_GEMM=0``, read once per process: each side runs in its own), and
the build must say whether it has the kernel. docs/design/batch-invariance.md has the figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ngramd.daemon.runtime.llamacpp import _exact_gemm_in_use

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]

# Pass sizes: the kernel's tiles are 4 columns wide, and 1, 2 or 3 at a pass's edge.
SIZES = (2, 3, 5, 7, 16)

# In a fresh process: the embedded model's logits for passes of SIZES tokens, each after the
# same 300 tokens of real code, written to argv[1] as float32 [sum(SIZES), vocab]; prints
# whether the process multiplies through the kernel.
CHILD = r'''
import sys
from pathlib import Path
import numpy as np
from ngramd.daemon.runtime.loading import embedded_gguf_path
from ngramd.daemon.runtime.llamacpp import load_llamacpp

sizes = [int(k) for k in sys.argv[3].split(",")]
rt = load_llamacpp(embedded_gguf_path(), check=False)
ids = rt.encode(Path(sys.argv[2]).read_text())[:300 + max(sizes)]
cache = rt.new_cache()
rt.forward_pass(ids[:300], cache, keep_last=1)
cache.extended(ids[:300])
rows = []
for k in sizes:
    rows.append(np.asarray(rt.forward_pass(ids[300:300 + k], cache), dtype=np.float32))
    cache.extended(ids[300:300 + k])
    cache.crop(300)
np.save(sys.argv[1], np.concatenate(rows))
print(int(rt.exact_gemm))
'''


def _logits_in_a_fresh_process(tmp_path: Path, exact_gemm: str) -> tuple[np.ndarray, bool]:
    env = dict(os.environ, GGML_CPU_EXACT_GEMM=exact_gemm, NGRAMD_HUGE_PAGES="0")
    out = tmp_path / f"logits-{exact_gemm}.npy"
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), str(ROOT / "index" / "store.py"),
                           ",".join(map(str, SIZES))],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out), done.stdout.strip().splitlines()[-1] == "1"


def test_many_token_passes_have_the_bits_of_one_column_products(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    from ngramd.daemon.runtime.llamacpp import build_info

    if not build_info()["exact_gemm"]:
        pytest.skip("this llama.cpp build has no exact many-column products (scripts/install_llamacpp.sh)")
    with_kernel, reported_on = _logits_in_a_fresh_process(tmp_path, "1")
    one_column, reported_off = _logits_in_a_fresh_process(tmp_path, "0")
    assert reported_on and not reported_off  # the variable took the kernel out of the second process
    assert with_kernel.shape == one_column.shape and with_kernel.shape[0] == sum(SIZES)
    assert with_kernel.tobytes() == one_column.tobytes()  # bitwise, every row of every pass


def test_a_build_without_the_kernel_says_so(tmp_path):
    assert _exact_gemm_in_use(tmp_path) is False  # no library there
    (tmp_path / "libggml-cpu.so").write_bytes(b"not a library")
    assert _exact_gemm_in_use(tmp_path) is False


def test_the_runtime_and_the_daemon_status_tell_the_build(llama_rt):
    from ngramd.daemon.engine.completer import Completer
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.llamacpp import build_info
    from ngramd.index.store import NgramIndex

    assert llama_rt.exact_gemm is build_info()["exact_gemm"]
    completer = Completer(llama_rt, NgramIndex(llama_rt.tokenize_batch), EngineConfig(calibrate=False))
    try:
        assert completer.stats()["exact_gemm"] is llama_rt.exact_gemm
    finally:
        completer.release_memory()
