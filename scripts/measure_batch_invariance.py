#!/usr/bin/env python
"""Which of ggml's matrix products give a column the same bits whether it is multiplied alone or
among others, and what the many-column kernels gain; in the llama.cpp build this process loads.

A speculative pass multiplies the weights by k columns at once, plain decoding by one. ggml's CPU
backend sends one column to ``vec_dot``, and several columns of some types to kernels that sum in
another order: llamafile's tinyBLAS (2 or more columns, in llama.cpp's default build) and, in
every build, ggml's tiled K-quant product (8 or more; off with ``GGML_CPU_TILED_MM=0``, or taken
for one column too with ``GGML_CPU_TILED_MM_FORCE=1``). This script runs each product of the
embedded model's shapes (and a few of larger models' types) on random data through ggml itself,
once per column and once over n columns, and compares the bits:

    .venv/bin/python scripts/measure_batch_invariance.py                       # the installed build
    .venv/bin/python scripts/measure_batch_invariance.py --lib-dir DIR/llama_cpp/lib   # another one

A default build of the same version installs beside ours with
``pip install --no-binary llama-cpp-python --no-cache-dir --target DIR llama-cpp-python==0.3.36``.
Figures: docs/design/batch-invariance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# ggml_type values (ggml.h)
TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14}

# (what it is, weight type, rows M, inner size K): A is [K x M], the columns are [K x n]
PRODUCTS = [
    ("layer weights (embedded model, Q4_1)", "Q4_1", 1536, 576),
    ("output projection (embedded model, Q8_0)", "Q8_0", 49152, 576),
    ("attention scores, K cache", "F16", 1024, 64),
    ("attention values, V cache", "F16", 64, 1024),
    ("attention scores, F32 K cache", "F32", 1024, 64),
    ("layer weights, Q4_0", "Q4_0", 8960, 1536),
    ("layer weights, Q4_K", "Q4_K", 8960, 1536),
    ("layer weights, Q6_K", "Q6_K", 8960, 1536),
]
COLUMNS = (2, 4, 8, 16)


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def load_ggml(lib_dir: Path):
    """libggml-base (tensors, graphs, quantization) and libggml-cpu (compute) of one build."""
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    p, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    base.ggml_init.argtypes, base.ggml_init.restype = [InitParams], p
    base.ggml_free.argtypes, base.ggml_free.restype = [p], None
    base.ggml_new_tensor_2d.argtypes, base.ggml_new_tensor_2d.restype = [p, ctypes.c_int, i64, i64], p
    base.ggml_mul_mat.argtypes, base.ggml_mul_mat.restype = [p, p, p], p
    base.ggml_new_graph.argtypes, base.ggml_new_graph.restype = [p], p
    base.ggml_build_forward_expand.argtypes, base.ggml_build_forward_expand.restype = [p, p], None
    base.ggml_get_data.argtypes, base.ggml_get_data.restype = [p], p
    base.ggml_nbytes.argtypes, base.ggml_nbytes.restype = [p], sz
    base.ggml_quantize_chunk.argtypes = [ctypes.c_int, p, p, i64, i64, i64, p]
    base.ggml_quantize_chunk.restype = sz
    cpu.ggml_cpu_init.argtypes, cpu.ggml_cpu_init.restype = [], None
    cpu.ggml_graph_compute_with_ctx.argtypes = [p, p, ctypes.c_int]
    cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    cpu.ggml_cpu_init()
    return base, cpu


class Product:
    """One weight matrix A (random, in its ggml type) and 16 random columns."""

    def __init__(self, base, cpu, wtype: str, m: int, k: int, threads: int, seed: int = 0) -> None:
        self.base, self.cpu, self.m, self.k, self.threads = base, cpu, m, k, threads
        rng = np.random.default_rng(seed)
        weights = (rng.standard_normal((m, k)) * 0.05).astype(np.float32)  # [M, K] row-major = ggml [K x M]
        self.columns = rng.standard_normal((max(COLUMNS), k)).astype(np.float32)  # [16, K]
        self._ctx = base.ggml_init(InitParams(weights.nbytes + (1 << 20), None, False))
        self.a = base.ggml_new_tensor_2d(self._ctx, TYPES[wtype], k, m)
        dst = base.ggml_get_data(self.a)
        if wtype == "F32":
            ctypes.memmove(dst, weights.ctypes.data, weights.nbytes)
        elif wtype == "F16":
            half = weights.astype(np.float16)
            ctypes.memmove(dst, half.ctypes.data, half.nbytes)
        else:
            base.ggml_quantize_chunk(TYPES[wtype], weights.ctypes.data, dst, 0, m, k, None)

    def multiply(self, first: int, n: int) -> tuple[np.ndarray, float]:
        """A times columns ``first .. first + n``: the [n, M] result and the seconds the compute took."""
        b = self.base
        ctx = b.ggml_init(InitParams(64 << 20, None, False))
        try:
            cols = b.ggml_new_tensor_2d(ctx, TYPES["F32"], self.k, n)
            ctypes.memmove(b.ggml_get_data(cols), np.ascontiguousarray(self.columns[first:first + n]).ctypes.data, n * self.k * 4)
            out = b.ggml_mul_mat(ctx, self.a, cols)
            graph = b.ggml_new_graph(ctx)
            b.ggml_build_forward_expand(graph, out)
            t0 = time.perf_counter()
            if self.cpu.ggml_graph_compute_with_ctx(ctx, graph, self.threads) != 0:
                raise RuntimeError("ggml_graph_compute_with_ctx failed")
            seconds = time.perf_counter() - t0
            result = np.ctypeslib.as_array(ctypes.cast(b.ggml_get_data(out), ctypes.POINTER(ctypes.c_float)),
                                           shape=(n, self.m)).copy()
            return result, seconds
        finally:
            b.ggml_free(ctx)

    def close(self) -> None:
        self.base.ggml_free(self._ctx)


def measure(product: Product, repeats: int) -> dict:
    """Bits: each of n columns against the same column alone. Time: median ms per product."""
    alone = np.stack([product.multiply(j, 1)[0][0] for j in range(max(COLUMNS))])  # [16, M]
    row = {"differing_elements": {}, "max_abs_diff": {}, "ms": {}}
    for n in (1,) + COLUMNS:
        times = []
        for _ in range(repeats):
            result, seconds = product.multiply(0, n)
            times.append(seconds * 1000)
        row["ms"][n] = statistics.median(times)
        if n > 1:
            row["differing_elements"][n] = int(np.count_nonzero(result.view(np.uint32) != alone[:n].view(np.uint32)))
            row["max_abs_diff"][n] = float(np.max(np.abs(result - alone[:n])))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib-dir", type=Path, default=None,
                    help="a llama_cpp/lib folder (default: the installed llama-cpp-python's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    lib_dir = args.lib_dir
    if lib_dir is None:
        import llama_cpp
        lib_dir = Path(llama_cpp.__file__).parent / "lib"
    base, cpu = load_ggml(lib_dir)
    print(f"build: {lib_dir}, {args.threads} threads; share of the n x M results whose bits differ "
          f"from the column multiplied alone, and ms a column alone against among 16 (median of {args.repeats})")
    print("| product | M | K | n=2 | n=4 | n=8 | n=16 | largest difference | ms a column: alone | among 16 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for what, wtype, m, k in PRODUCTS:
        product = Product(base, cpu, wtype, m, k, args.threads)
        try:
            row = measure(product, args.repeats)
        finally:
            product.close()
        shares = " | ".join(f"{row['differing_elements'][n] / (n * m):.0%}" for n in COLUMNS)
        worst = max(row["max_abs_diff"].values())
        print(f"| {what} | {m} | {k} | {shares} | {worst:.1e} | {row['ms'][1]:.2f} | {row['ms'][16] / 16:.2f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
