"""The exact kernels of ngramd's llama.cpp build (scripts/llamacpp/exact-gemm.patch): Q4_1 and Q8_0
weights against several columns through a kernel that sums each column as the one-column
``vec_dot`` does, and attention's F16 products through one that converts each value once for the
columns that read it and sums each output as ``ggml_vec_dot_f16`` does. The embedded model (Q4_1
layers, Q8_0 output, F16 KV cache) passes through both: passes of 1 to 16 tokens must give bitwise
the logits they give with the kernels off (``GGML_CPU_EXACT_GEMM=0`` all, ``GGML_CPU_EXACT_F16=0``
the F16 one; read once per process: each side runs in its own), and the build must say whether
it has them. docs/design/batch-invariance.md has the figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ngramd.daemon.runtime.llamacpp import _exact_kernels_in_use

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]

# Pass sizes: the quantized kernel's tiles are 4 columns wide, and 1, 2 or 3 at a pass's edge;
# the F16 kernel converts as it loads in one-token passes, once for many columns in the others,
# and with AVX-512 ends 16 outputs at once (this model's rows are all whole 64-value steps).
SIZES = (1, 2, 3, 5, 7, 16)

# In a fresh process: the embedded model's logits for passes of SIZES tokens, each after the
# same 300 tokens of real code, written to argv[1] as float32 [sum(SIZES), vocab]; prints
# whether the process multiplies through each kernel.
CHILD = r'''
import sys
from pathlib import Path
import numpy as np
from ngramd.daemon.runtime.loading import embedded_gguf_path
from ngramd.daemon.runtime.llamacpp import load_llamacpp

sizes = [int(k) for k in sys.argv[3].split(",")]
rt = load_llamacpp(Path(sys.argv[4]) if len(sys.argv) > 4 else embedded_gguf_path(), check=False)
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
print(int(rt.exact_gemm), int(rt.exact_f16))
'''


def _logits_in_a_fresh_process(tmp_path: Path, model: Path | None = None,
                               **switches: str) -> tuple[np.ndarray, tuple[bool, bool]]:
    """The CHILD's logits (``model``, default the embedded one) and whether its process had (the
    many-column kernel, the F16 kernel); ``switches``: GGML_CPU_EXACT_GEMM / GGML_CPU_EXACT_F16 values."""
    env = dict(os.environ, GGML_CPU_EXACT_GEMM="1", GGML_CPU_EXACT_F16="1", NGRAMD_HUGE_PAGES="0")
    env.update(switches)
    out = tmp_path / f"logits-{'-'.join(f'{k}={v}' for k, v in sorted(switches.items()))}.npy"
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), str(ROOT / "index" / "store.py"),
                           ",".join(map(str, SIZES))] + ([str(model)] if model else []),
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    gemm, f16 = done.stdout.strip().splitlines()[-1].split()
    return np.load(out), (gemm == "1", f16 == "1")


def test_passes_have_the_bits_they_have_without_the_kernels(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    from ngramd.daemon.runtime.llamacpp import build_info

    info = build_info()
    if not (info["exact_gemm"] and info["exact_f16"]):
        pytest.skip("this llama.cpp build has not ngramd's exact kernels (scripts/install_llamacpp.sh)")
    with_kernels, reported_on = _logits_in_a_fresh_process(tmp_path)
    without_f16, reported_gemm_only = _logits_in_a_fresh_process(tmp_path, GGML_CPU_EXACT_F16="0")
    without, reported_off = _logits_in_a_fresh_process(tmp_path, GGML_CPU_EXACT_GEMM="0")
    # the variables took the kernels out of the other processes: GEMM=0 both of them
    assert reported_on == (True, True) and reported_gemm_only == (True, False) and reported_off == (False, False)
    assert with_kernels.shape == without.shape and with_kernels.shape[0] == sum(SIZES)
    assert with_kernels.tobytes() == without_f16.tobytes()  # the F16 kernel alone: bitwise, every row
    assert with_kernels.tobytes() == without.tobytes()  # both kernels


def test_heads_of_16_values_keep_the_bits_too(tmp_path, load_script):
    """The F16 kernel's four-row path, with its leftovers in double: a row that is not whole
    64-value steps (a random model whose attention heads hold 16 values; the embedded model's
    hold 64, which the 16-output path takes)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    pytest.importorskip("gguf")
    from ngramd.daemon.runtime.llamacpp import build_info

    if not build_info()["exact_f16"]:
        pytest.skip("this llama.cpp build has not ngramd's F16 kernel (scripts/install_llamacpp.sh)")
    model = tmp_path / "random-small.Q4_0.gguf"
    load_script("make_random_gguf").write(model, size="small", qtype_name="q4_0", seed=1)
    with_kernel, reported_on = _logits_in_a_fresh_process(tmp_path, model)
    without, reported_off = _logits_in_a_fresh_process(tmp_path, model, GGML_CPU_EXACT_F16="0")
    assert reported_on[1] and not reported_off[1]
    assert with_kernel.shape[0] == sum(SIZES) and np.isfinite(with_kernel).all() and with_kernel.std() > 0
    assert with_kernel.tobytes() == without.tobytes()


def test_a_build_without_the_kernel_says_so(tmp_path):
    assert _exact_kernels_in_use(tmp_path) == (False, False)  # no library there
    (tmp_path / "libggml-cpu.so").write_bytes(b"not a library")
    assert _exact_kernels_in_use(tmp_path) == (False, False)


def test_the_runtime_and_the_daemon_status_tell_the_build(llama_rt):
    from ngramd.daemon.engine.completer import Completer
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.runtime.llamacpp import build_info
    from ngramd.index.store import NgramIndex

    assert llama_rt.exact_gemm is build_info()["exact_gemm"]
    assert llama_rt.exact_f16 is build_info()["exact_f16"]
    completer = Completer(llama_rt, NgramIndex(llama_rt.tokenize_batch), EngineConfig(calibrate=False))
    try:
        assert completer.stats()["exact_gemm"] is llama_rt.exact_gemm
        assert completer.stats()["exact_f16"] is llama_rt.exact_f16
    finally:
        completer.release_memory()


def test_the_f16_kernel_switched_between_passes_of_one_process_keeps_the_bits():
    """scripts/measure_f16_kernel.py turns the kernel on and off between passes of one process (how
    its figures are taken) and compares each pass's logits both ways: they must be equal."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    from ngramd.daemon.runtime.llamacpp import build_info

    if not build_info()["exact_f16"]:
        pytest.skip("this llama.cpp build has no exact F16 kernel (scripts/install_llamacpp.sh)")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_f16_kernel.py"), "--context", "200",
                           "--rounds", "2", "--sizes", "1,3,6", "--prefills", "1"],
                          env=dict(os.environ, NGRAMD_HUGE_PAGES="0"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "logits on and off bitwise equal: yes" in done.stdout
    assert "prefill 200" in done.stdout and " k=6 " in done.stdout


def test_the_cpu_backend_asked_is_the_copy_the_binding_loaded(llama_rt):
    """A wheel's libggml-cpu.so and .so.0 are copies: a switch or a query sent to the one not
    loaded would reach another instance of the library and change nothing in the passes."""
    from ngramd.daemon.runtime.llamacpp import _library_dir, cpu_backend

    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libggml-cpu" in line}
    assert mapped, "llama.cpp's CPU backend is not loaded"
    assert cpu_backend(_library_dir())._name in mapped
