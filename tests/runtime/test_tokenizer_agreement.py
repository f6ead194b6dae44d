"""One tokenizer for prompts, the index and llama.cpp: the transformers tokenizer read from
the GGUF gives llama.cpp's own ids on real code (the standard library's sources)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

FILES = 200  # spread over the whole standard library


def _corpus() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)
    step = max(1, len(files) // FILES)
    return files[::step][:FILES]


def test_transformers_and_llamacpp_tokenize_real_code_alike(llama_rt):
    files = _corpus()
    assert len(files) >= 100, "the standard library's sources are the corpus"
    tokens = 0
    mismatched = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        ours = llama_rt.encode(text)
        tokens += len(ours)
        if ours != llama_rt.llama_tokenize(text):
            mismatched.append(path.name)
    assert tokens > 500_000
    assert mismatched == []


@pytest.mark.parametrize("text", [
    "<|im_end|> stays text", "a\r\nb\tc", "é\u00a0ü 日本語 🙂", "x = 12345.6e-7\n\n    1", "   ", "",
])
def test_edge_cases_tokenize_alike(llama_rt, text):
    assert llama_rt.encode(text) == llama_rt.llama_tokenize(text)


def test_without_the_digit_split_transformers_splits_otherwise(llama_rt):
    """The fix is needed: transformers' tokenizer of this GGUF, as built, splits whitespace
    before a digit otherwise than llama.cpp (and the model's training)."""
    from transformers import AutoTokenizer

    from ngramd.daemon.runtime.gguf_tokenizer import gguf_pre_tokenizer_name

    assert gguf_pre_tokenizer_name(llama_rt.path) == "smollm"
    raw = AutoTokenizer.from_pretrained(llama_rt.tokenizer.name_or_path)  # the cached file, unfixed
    text = "x = [\n    1,\n]\n"  # indentation before a digit
    as_built = raw(text, add_special_tokens=False)["input_ids"]
    assert as_built != llama_rt.llama_tokenize(text)
    assert llama_rt.encode(text) == llama_rt.llama_tokenize(text)
