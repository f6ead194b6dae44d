"""The llama.cpp runtime: a GGUF model evaluated by llama.cpp (the ``llama-cpp-python``
binding's low-level API) at its own quantization, held once in memory, with no de-quantized copy.

One llama.cpp context serves every document. It has ``sequences`` live sequences (one by
default), each with its own KV stream of ``n_ctx_seq`` cells (``kv_unified`` off). A document's
cache (``LlamaCppCache``) is either live in one of them or parked: its cells copied out to host
memory (``llama_state_seq_get_data``) and copied back, bitwise, when it is next used. So any
number of documents keep their caches while the context holds the KV cells of one: parking a
document of 1,800 tokens and bringing it back cost about 35 ms here, where reading a prompt of
1,065 tokens again took about 5 s.
Rolling back a rejected draft or keeping a common prefix is ``llama_memory_seq_rm`` from a
position on.

A pass asks llama.cpp for the logits of the rows the caller keeps only (the batch's
``logits`` flags): llama.cpp then runs the output projection on those rows alone.

Exactness: speculation is token-identical to plain decoding only if a pass over k
tokens gives each row bitwise the logits of one-token passes. llama.cpp's default
CPU build does not (its llamafile GEMM sums attention's float products over several
rows in another order than the one-row path); ``-DGGML_LLAMAFILE=OFF`` does for the
embedded model and Q4_0/Q8_0 ones. K-quant models (Q4_K_M...) pass through two more
many-row kernels of ggml, the "tiled" K-quant product and Q4_K's repacked layout,
which are not exact either: ``exact_kernels`` loads without them, at a cost measured
in docs/design/batch-invariance.md (there, plain decoding 1.31x slower than llama.cpp's
fastest kernels, more than speculation can win back at the pass costs measured there), so it
is the user's choice.
daemon/runtime/exactness.py checks every load: where passes differ, no drafting. ngramd's build
(scripts/install_llamacpp.sh) adds a many-column product for Q4_1 and Q8_0 weights that keeps
one-column bits and makes many-token passes cheaper, and a kernel for attention's F16 products
that keeps ``ggml_vec_dot_f16``'s bits and makes every pass cheaper (docs/design/batch-invariance.md);
``exact_gemm`` and ``exact_f16`` say whether this process has them.

The tokenizer is the transformers tokenizer read from the same GGUF, splitting text as
llama.cpp does (daemon/runtime/gguf_tokenizer.py): prompts, chat templates and the index
use its ids, and llama.cpp evaluates exactly those ids (tests/runtime compares the two
tokenizers on real code).

Entry point: ``load_llamacpp(path)``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ngramd.daemon.runtime.base import CPU, NOT_CHECKED, Exactness
from ngramd.daemon.runtime.cache_pool import common_prefix_len
from ngramd.daemon.runtime.loading import ModelLoadError
from ngramd.daemon.runtime.tokenizer import TokenizerMethods

log = logging.getLogger("ngramd.llamacpp")

# llama-cpp-python's version this runtime is built and tested against (pyproject's extra pins it)
PINNED_VERSION = "0.3.36"
BUILD_HINT = ('CMAKE_ARGS="-DGGML_LLAMAFILE=OFF" pip install --no-binary llama-cpp-python '
              f'--no-cache-dir llama-cpp-python=={PINNED_VERSION}')

# Live sequences of the context; the other documents' caches are parked in host memory. One holds
# a fifth of five's KV cells (71 MB against 354 MB for the embedded model). Its speed a token was not
# told apart from five's: in scripts/measure_decode_shapes.py the order in which the runtimes were
# created moved the figures as much as their shapes did (docs/benchmarks.md, "Cost curve").
DEFAULT_SEQUENCES = 1
# Cells per document, capped by the model's training context. A completion's prompt is at most
# 1,792 tokens (daemon/engine/prompt.py) plus its answer.
DEFAULT_CTX_PER_SEQUENCE = 3072
# Tokens per llama_decode call. On this project's 2-core CPUs 256 prefilled a prompt in 0.93x the
# time of 512 (the binding's default), 128 in 0.94x; the logits are bitwise the same at any size
# (scripts/measure_prefill_batch.py; docs/benchmarks.md, "A smaller llama_decode batch").
BATCH = 256
MAX_OUTPUT_ROWS = 128  # logits rows per llama_decode call (a verify pass asks 1 + draft; more are split)
# ggml's K-quant "tiled" product (Q2_K..Q6_K, IQ types) takes 8 or more rows and sums in another
# order than one row's vec_dot (docs/design/batch-invariance.md). ggml reads the variable once,
# at the process's first product: exact kernels must be asked before any model computes.
TILED_MATMUL_ENV = "GGML_CPU_TILED_MM"
EXACT_KERNELS_HINT = ("--exact-kernels may make them exact (the check at load decides), at a cost in plain "
                      "decoding: docs/design/batch-invariance.md")
_tiled_at_first_runtime: str | None = None  # GGML_CPU_TILED_MM when this process's first runtime was made


def disable_tiled_matmul() -> None:
    """Keep ggml's tiled K-quant product out of this process (before its first product)."""
    os.environ[TILED_MATMUL_ENV] = "0"


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (hyper-threads share a core's
    arithmetic units: a second thread on one slows llama.cpp's passes)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


class LlamaCppCache:
    """One document's KV cache. ``tokens[i]``'s keys and values sit at position i of llama.cpp
    sequence ``seq_id`` while it is live, or in ``parked`` while another document has the
    sequence (the cells of ``tokens`` and maybe more: a crop made while parked is cut at restore)."""

    def __init__(self, runtime: "LlamaCppRuntime") -> None:
        self._runtime = runtime
        self.seq_id = -1  # the live sequence, or -1
        self.parked: Any = None  # llama_state_seq_get_data's bytes (a ctypes array), or None
        self.released = False
        self.last_used = 0  # the runtime's clock: the least recently used live cache is parked first
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self._runtime._forget_cells(self)
        self.tokens = []

    def crop(self, n: int) -> None:
        assert 0 <= n <= len(self.tokens), (n, len(self.tokens))
        if self.released:
            raise RuntimeError("this cache was released")
        if n == len(self.tokens):
            return
        if self.seq_id >= 0:  # parked cells past n are cut when they come back
            self._runtime._remove(self.seq_id, n)
        del self.tokens[n:]

    def reuse_for(self, tokens: Sequence[int]) -> int:
        self.crop(common_prefix_len(self.tokens, tokens))  # parked: only the count, no copy
        if self.tokens:  # cells worth keeping come back now; a park that cannot is a cold cache
            self._runtime._bring_back(self, strict=False)
        return len(self.tokens)

    def select(self, keep: int, positions: Sequence[int]) -> None:
        """Chains only: the accepted path is the entries right after ``keep``."""
        positions = [int(p) for p in positions]
        if positions != list(range(keep, keep + len(positions))):
            raise NotImplementedError("the llama.cpp runtime verifies chains only (supports_trees is False)")
        self.crop(keep + len(positions))

    def extended(self, new_tokens: Sequence[int]) -> None:
        self.tokens.extend(int(t) for t in new_tokens)


class LlamaCppRuntime(TokenizerMethods):
    """A GGUF model in one llama.cpp context; see the module docstring."""

    kind = "llamacpp"
    supports_trees = False  # chains only: a tree through sequences was not measured worth it

    def __init__(self, path: Path, tokenizer: Any, sequences: int = DEFAULT_SEQUENCES,
                 ctx_per_sequence: int = DEFAULT_CTX_PER_SEQUENCE, threads: int | None = None,
                 flash_attention: bool = False, exact_kernels: bool = False, batch: int = BATCH) -> None:
        """``exact_kernels``: without ggml's tiled K-quant product and repacked weights (the
        module docstring); "exact" in ``kernels``, else "ggml". ``batch``: tokens per
        llama_decode call (``BATCH``; scripts/measure_prefill_batch.py times others)."""
        global _tiled_at_first_runtime
        if exact_kernels:
            disable_tiled_matmul()
        if _tiled_at_first_runtime is None:
            _tiled_at_first_runtime = os.environ.get(TILED_MATMUL_ENV, "")
        import llama_cpp as L

        self._L = L
        self.name = path.name
        self.path = path
        self.tokenizer = tokenizer
        self.device = CPU
        self.dtype = "float32"  # the logits'; the weights keep the file's quantization
        self.exactness: Exactness = NOT_CHECKED
        self.threads = threads or physical_cores()
        if batch < 1:
            raise ValueError(f"a llama_decode batch needs at least one token, got {batch}")
        self.batch = batch
        self.kernels = "exact" if exact_kernels else "ggml"
        # whether the build multiplies Q4_1/Q8_0 weights by several columns in its exact product
        # and whether its attention's F16 products go through the patch's exact kernel
        self.exact_gemm, self.exact_f16 = _exact_kernels_in_use(_library_dir())
        self._special_ids = frozenset(int(i) for i in tokenizer.all_special_ids)
        self._lock = threading.RLock()  # one llama.cpp context: its calls never overlap
        _quiet_llama_log(L)
        L.llama_backend_init()
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = 0
        # The file is read, not mapped: llama.cpp's CPU "repack" buffers rewrite Q4_0/Q4_K/IQ4_NL weights
        # into a faster layout, and a mapped file stays resident beside that copy. A random 1.5B Q4_0 model
        # (781 MB) held 1,584 MB mapped and repacked, 822 MB mapped without repack (decoding 2x slower),
        # 872 MB read and repacked (docs/benchmarks.md, "Memory"). Read, every model is held once.
        # Exact kernels: no repacking, whose Q4_K GEMM sums a many-row pass otherwise than one row.
        mparams.load_mode = L.LLAMA_LOAD_MODE_NONE
        mparams.use_extra_bufts = not exact_kernels
        model = L.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise ModelLoadError(f"llama.cpp cannot load the GGUF file {path}")
        self._model = model
        self._vocab = L.llama_model_get_vocab(model)
        self.vocab_size = int(L.llama_vocab_n_tokens(self._vocab))
        trained = int(L.llama_model_n_ctx_train(model))
        self.positions = min(trained, ctx_per_sequence) if trained > 0 else ctx_per_sequence
        cparams = L.llama_context_default_params()
        cparams.n_ctx = self.positions * sequences
        cparams.n_batch = cparams.n_ubatch = self.batch
        cparams.n_seq_max = sequences
        cparams.n_outputs_max = MAX_OUTPUT_ROWS
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.kv_unified = False  # one KV stream per sequence: a pass reads its own document's cells
        cparams.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attention
                                   else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cparams.no_perf = True
        ctx = L.llama_init_from_model(model, cparams)
        if not ctx:
            L.llama_model_free(model)
            raise ModelLoadError(f"llama.cpp cannot create a context for {path} "
                                 f"({sequences} sequences of {self.positions} tokens)")
        self._ctx = ctx
        self._mem = L.llama_get_memory(ctx)
        self.sequences = int(L.llama_n_seq_max(ctx))
        self._live: list[LlamaCppCache | None] = [None] * self.sequences  # each sequence's document
        self._clock = 0
        self.parked_bytes = 0  # host memory holding parked documents' cells
        self._batch = L.llama_batch_init(self.batch, 0, 1)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(self.batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.batch,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(self.batch,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(self.batch,))
        self._nseq[:] = 1
        self._batch_seq = -1  # the sequence id written in every seq_id[i][0]
        self._n_layer = int(L.llama_model_n_layer(model))
        self._kv_width = int(L.llama_model_n_embd(model)) // max(1, int(L.llama_model_n_head(model))) \
            * int(L.llama_model_n_head_kv(model))

    # --- tokenizer: the transformers tokenizer of the same GGUF (model.TokenizerMethods) ------
    def tokenizer_disagreement(self, text: str) -> str:
        """"" when the transformers tokenizer gives ``text`` llama.cpp's own ids, else where not."""
        ours, theirs = self.encode(text), self.llama_tokenize(text)
        if ours == theirs:
            return ""
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        return f"first at token {at}, {self.decode(ours[max(0, at - 2):at + 2])!r}: {ours[at:at + 3]} against {theirs[at:at + 3]}"

    def llama_tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenization of ``text`` (no BOS, special-token strings as text):
        only to check that the transformers tokenizer agrees with it."""
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (self._L.llama_token * cap)()
        n = self._L.llama_tokenize(self._vocab, data, len(data), buf, cap, False, False)
        if n < 0:
            cap = -n
            buf = (self._L.llama_token * cap)()
            n = self._L.llama_tokenize(self._vocab, data, len(data), buf, cap, False, False)
        return list(buf[:n])

    # --- caches ----------------------------------------------------------------------------
    def new_cache(self) -> LlamaCppCache:
        """An empty document cache; it takes a live sequence at its first pass."""
        return LlamaCppCache(self)

    def release_cache(self, cache: LlamaCppCache) -> None:
        with self._lock:
            if cache.released:
                return
            self._forget_cells(cache)
            if cache.seq_id >= 0:
                self._live[cache.seq_id] = None
                cache.seq_id = -1
            cache.released = True
            cache.tokens = []

    def _forget_cells(self, cache: LlamaCppCache) -> None:
        """Drop ``cache``'s cells, live or parked."""
        with self._lock:
            if cache.released:
                raise RuntimeError("this cache was released")
            if cache.seq_id >= 0:
                self._remove(cache.seq_id, 0)
            self._drop_parked(cache)

    def _drop_parked(self, cache: LlamaCppCache) -> None:
        if cache.parked is not None:
            self.parked_bytes -= len(cache.parked)
            cache.parked = None

    def _bring_back(self, cache: LlamaCppCache, strict: bool = True) -> int:
        """``cache``'s live sequence, parking the least recently used document to free one and
        copying ``cache``'s parked cells back. Cells that cannot come back: ``strict`` raises
        (a pass's positions were counted from ``tokens``), else the cache starts empty."""
        with self._lock:
            if cache.released:
                raise RuntimeError("this cache was released")
            self._clock += 1
            cache.last_used = self._clock
            if cache.seq_id >= 0:
                return cache.seq_id
            seq = min(range(self.sequences),
                      key=lambda i: -1 if self._live[i] is None else self._live[i].last_used)
            if self._live[seq] is not None:
                self._park(self._live[seq])
            self._live[seq], cache.seq_id = cache, seq
            if cache.parked is not None:
                parked, n = cache.parked, len(cache.parked)
                self._drop_parked(cache)
                read = self._L.llama_state_seq_set_data(self._ctx, parked, n, seq) if cache.tokens else n
                if read != n:
                    self._remove(seq, 0)
                    cache.tokens = []
                    msg = f"llama.cpp could not restore a parked document's cells ({read} of {n} bytes)"
                    if strict:
                        raise RuntimeError(msg)
                    log.warning("%s: its prompt is read again", msg)
                self._remove(seq, len(cache.tokens))  # cells past a crop made while parked
            return seq

    def _park(self, cache: LlamaCppCache) -> None:
        """Copy ``cache``'s cells to host memory and free its sequence."""
        seq, L = cache.seq_id, self._L
        if cache.tokens:
            n = int(L.llama_state_seq_get_size(self._ctx, seq))
            buf = (ctypes.c_uint8 * n)()
            if int(L.llama_state_seq_get_data(self._ctx, buf, n, seq)) == n:
                cache.parked = buf
                self.parked_bytes += n
            else:  # parked nothing: the document reads its prompt again at its next request
                log.warning("llama.cpp could not copy out a document's %d cells: dropped", len(cache.tokens))
                cache.tokens = []
        self._remove(seq, 0)
        self._live[seq] = None
        cache.seq_id = -1

    def _remove(self, seq: int, start: int) -> None:
        with self._lock:
            ok = self._L.llama_memory_seq_rm(self._mem, seq, start, -1)
        if not ok:
            raise RuntimeError(f"llama.cpp could not remove positions {start}.. of sequence {seq}")

    # --- passes ----------------------------------------------------------------------------
    def forward_pass(self, ids: Sequence[int], cache: LlamaCppCache, keep_last: int | None = None,
                     tree: Any = None) -> np.ndarray:
        """Run ``ids`` after ``cache``'s tokens; fp32 logits [keep_last or len(ids), vocab] of the
        last rows (only those rows are computed), as numpy: nothing on this path imports torch.
        Chains only."""
        if tree is not None and tree.size and not tree.is_chain:
            raise NotImplementedError("the llama.cpp runtime verifies chains only (supports_trees is False)")
        n = len(ids)
        rows = n if keep_last is None else min(int(keep_last), n)
        if n == 0 or rows <= 0:
            raise ValueError(f"a pass needs tokens and rows: {n} tokens, keep_last={keep_last}")
        ids = np.asarray(ids, dtype=np.int32)
        first_out = n - rows
        out = np.empty((rows, self.vocab_size), dtype=np.float32)
        filled = lo = 0
        self._lock.acquire()
        try:
            seq = self._bring_back(cache)
            start = len(cache.tokens)
            if start + n > self.positions:
                raise RuntimeError(f"{start + n} tokens exceed the {self.positions} positions of a document's cache")
            while lo < n:  # llama_decode calls of at most ``batch`` tokens and MAX_OUTPUT_ROWS rows of logits
                hi = min(n, lo + self.batch, max(lo, first_out) + MAX_OUTPUT_ROWS)
                got = self._decode(ids[lo:hi], start + lo, seq, max(0, first_out - lo))
                if got:  # a copy: the next llama_decode overwrites llama.cpp's buffer
                    ctypes.memmove(out[filled:].ctypes.data, self._L.llama_get_logits(self._ctx),
                                   got * self.vocab_size * 4)
                    filled += got
                lo = hi
        except BaseException:
            if lo:  # the calls that went through are not in ``tokens``: drop them
                self._remove(seq, start)
            raise
        finally:
            self._lock.release()
        return out

    def _decode(self, ids: np.ndarray, pos0: int, seq: int, first_out: int) -> int:
        """One llama_decode of ``ids`` at positions pos0.. of ``seq``; logits for rows
        ``first_out``.. of this piece. Returns how many rows have logits."""
        L, b, m = self._L, self._batch, len(ids)
        if seq != self._batch_seq:
            for i in range(self.batch):
                b.seq_id[i][0] = seq
            self._batch_seq = seq
        b.n_tokens = m
        self._tok[:m] = ids
        self._pos[:m] = np.arange(pos0, pos0 + m, dtype=np.int32)
        self._out[:m] = 0
        self._out[first_out:m] = 1
        rc = L.llama_decode(self._ctx, b)
        if rc != 0:
            # a failed decode may leave part of the batch in the cache: the engine resets it
            raise RuntimeError(f"llama_decode failed ({rc}) on {m} tokens at position {pos0}")
        return max(0, m - first_out)

    def synchronize(self) -> None:
        """llama_decode returns when the pass is done."""

    def memory_figures(self) -> dict[str, int]:
        """The model's tensors (at their quantization), the KV cells of the live sequences (fp16 keys
        and values) and the parked documents' cells in host memory."""
        kv = 2 * self._n_layer * self._kv_width * 2 * self.positions * self.sequences
        return {"model_bytes": int(self._L.llama_model_size(self._model)), "kv_cache_bytes": kv,
                "parked_kv_bytes": int(self.parked_bytes)}

    def close(self) -> None:
        L = self._L
        if getattr(self, "_ctx", None):
            L.llama_batch_free(self._batch)
            L.llama_free(self._ctx)
            L.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_LOG_CALLBACK = None  # kept referenced: llama.cpp calls it from C


def _quiet_llama_log(L: Any) -> None:
    """llama.cpp's log lines go to this module's logger (its warnings and errors at their level,
    the rest at debug), not to stderr."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None:
        return

    def forward(level: int, text: bytes, _user: Any) -> None:
        msg = text.decode("utf-8", "replace").rstrip()
        if msg:
            log.log(logging.ERROR if level == 4 else logging.WARNING if level == 3 else logging.DEBUG, "%s", msg)

    _LOG_CALLBACK = L.llama_log_callback(forward)
    L.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def build_info() -> dict[str, Any]:
    """The installed binding's version, whether its CPU backend was built with llamafile's GEMM, and
    whether with ngramd's exact many-column products and F16 kernel (scripts/llamacpp/exact-gemm.patch)."""
    import llama_cpp as L

    system = L.llama_print_system_info().decode("utf-8", "replace")
    return {"version": L.__version__, "llamafile": "LLAMAFILE = 1" in system, "system": system.strip(),
            **dict(zip(("exact_gemm", "exact_f16"), _exact_kernels_in_use(_library_dir())))}


def _library_dir() -> Path:
    """Where the binding loaded llama.cpp's libraries from: its package's lib/, or LLAMA_CPP_LIB_PATH."""
    from llama_cpp import llama_cpp as bound

    return Path(getattr(bound, "_base_path", Path(bound.__file__).parent / "lib"))


def _exact_kernels_in_use(lib_dir: Path) -> tuple[bool, bool]:
    """Whether the CPU backend in ``lib_dir``, as this process runs it, multiplies Q4_1 and Q8_0
    weights by several columns in the patch's exact many-column product, and whether its attention's
    F16 products go through the patch's exact kernel (docs/design/batch-invariance.md), from one
    lookup of the library. False for a build without the patch, on a CPU without AVX2, under
    ``GGML_CPU_EXACT_GEMM=0`` (both) and ``GGML_CPU_EXACT_F16=0`` (the second)."""
    cpu = cpu_backend(lib_dir)
    flags = (getattr(cpu, query, None) for query in ("ggml_cpu_exact_gemm", "ggml_cpu_exact_f16"))
    return tuple(bool(flag()) if flag is not None else False for flag in flags)  # type: ignore[return-value]


def cpu_backend(lib_dir: Path) -> ctypes.CDLL | None:
    """ggml's CPU backend in ``lib_dir`` as this process loaded it, or None (another layout, not a
    library). A wheel holds libggml-cpu.so, .so.0 and .so.0.x as copies, not links, and a copy
    opened apart is another instance with its own state: the one mapped (the .so.0 that libggml
    needs) is taken where there is one."""
    where = lib_dir.resolve()
    try:
        with open("/proc/self/maps") as maps:
            mapped = sorted({line.split()[-1] for line in maps if "libggml-cpu" in line})
    except OSError:
        mapped = []
    libs = [p for p in mapped if Path(p).parent == where] or [str(p) for p in sorted(lib_dir.glob("libggml-cpu.*"))]
    try:
        return ctypes.CDLL(libs[0])
    except (IndexError, OSError):
        return None


def load_llamacpp(path: str | Path, sequences: int = DEFAULT_SEQUENCES,
                  ctx_per_sequence: int = DEFAULT_CTX_PER_SEQUENCE, threads: int | None = None,
                  check: bool = True, exact_kernels: bool = False, batch: int = BATCH) -> LlamaCppRuntime:
    """Load a GGUF file on llama.cpp, with its transformers tokenizer; ``check``: run the exactness
    self-check (daemon/runtime/exactness.py) and the tokenizers' agreement on a sample, and say
    what they found in the log. ``exact_kernels``, ``batch``: ``LlamaCppRuntime``'s. ``ModelLoadError`` when
    llama-cpp-python is missing or the file cannot be loaded."""
    from ngramd.daemon.runtime.exactness import check_exactness
    from ngramd.daemon.runtime.gguf_tokenizer import load_gguf_tokenizer

    path = Path(os.path.expanduser(str(path)))
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    try:
        info = build_info()
    except ImportError as exc:
        raise ModelLoadError(f"llama-cpp-python is not installed ({exc}); build it with: {BUILD_HINT}") from None
    if info["version"] != PINNED_VERSION:
        log.warning("llama-cpp-python %s is installed; ngramd is tested with %s", info["version"], PINNED_VERSION)
    tokenizer = load_gguf_tokenizer(path)
    runtime = LlamaCppRuntime(path, tokenizer, sequences=sequences, ctx_per_sequence=ctx_per_sequence,
                              threads=threads, exact_kernels=exact_kernels, batch=batch)
    runtime.start_tokenizer_pool()
    if check:
        disagree = runtime.tokenizer_disagreement(TOKENIZER_SAMPLE)
        if disagree:
            log.warning("the tokenizer read by transformers splits text otherwise than llama.cpp's (%s): "
                        "prompts are not tokenized as the model was trained", disagree)
        runtime.exactness = check_exactness(runtime)
        if info["llamafile"] and runtime.exactness.exact:
            log.info("llama.cpp was built with llamafile's GEMM, yet its passes were exact here")
        if not runtime.exactness.exact:
            if info["llamafile"]:
                hint = f"rebuild llama-cpp-python with llamafile off: {BUILD_HINT}"
            elif exact_kernels and _tiled_at_first_runtime != "0":
                hint = (f"ggml's tiled product stayed on: it reads {TILED_MATMUL_ENV} once, and this "
                        "process computed before --exact-kernels was asked")
            elif exact_kernels:
                hint = "even with --exact-kernels"
            else:
                hint = EXACT_KERNELS_HINT
            runtime.exactness = replace(runtime.exactness, detail=f"{runtime.exactness.detail}; {hint}")
            log.warning("llama.cpp's multi-token passes are not exact, speculation is off: %s",
                        runtime.exactness.detail)
        elif exact_kernels:
            runtime.exactness = replace(runtime.exactness, detail=f"{runtime.exactness.detail} "
                                                                  "(--exact-kernels)")
    log.info("%s on llama.cpp %s (%s): %d threads, %d live sequence(s) of %d positions; %s", path.name,
             info["version"], ("exact many-column products" if runtime.exact_gemm else "one-column products")
             + (", exact F16 kernel" if runtime.exact_f16 else ""),
             runtime.threads, runtime.sequences, runtime.positions, runtime.exactness.detail)
    return runtime


# real code with the splits that tokenizers disagree on most: whitespace before digits, numbers
TOKENIZER_SAMPLE = (
    "def scale(values, factor=2.5e-3):\n    # 10  items\n    return [v * factor for v in values[:128]]\n"
    "\n\nMAXINT =  2**31 - 1\nTABLE = {\n    1: 'one',\n        22: 'twenty-two',\n}\n"
)
