"""The transformers tokenizer of a GGUF file, splitting text as llama.cpp does.

transformers builds a GGUF's tokenizer from the file's vocabulary and merges, but not
from its pre-tokenizer name (``tokenizer.ggml.pre``): every byte-level model gets
GPT-2's pre-tokenizer. For SmolLM2 (``smollm``) that is not how the model was trained,
nor how llama.cpp splits text: its tokenizer puts every digit apart first. Without it,
whitespace before a digit splits otherwise ("\\n    1" is "\\n   ", " ", "1" instead of
"\\n    ", "1"): 170 of 668 stdlib files tokenized differently from llama.cpp; with it, none
(tests/runtime/test_tokenizer_agreement.py).

The fix is made to the loaded tokenizer, not to the cached file, so a tokenizer cached
before it is fixed as well.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("ngramd.tokenizer")

# llama.cpp's pre-tokenizer names whose split transformers' GGUF tokenizer does not make,
# and the transformers pre-tokenizer that makes it
_DIGITS_FIRST = ("smollm",)


def gguf_pre_tokenizer_name(path: Path) -> str | None:
    """The file's ``tokenizer.ggml.pre`` (None when absent), read from its header alone."""
    from daemon.runtime.gguf_header import read_gguf_string

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
    from daemon.runtime.model import cached_gguf_tokenizer

    tokenizer = cached_gguf_tokenizer(path)
    fix_pre_tokenizer(tokenizer, gguf_pre_tokenizer_name(path))
    return tokenizer
