"""Fixtures for the index tests: the real SmolLM2 tokenizer (fakes live in index_helpers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def real_tokenizer():
    """SmolLM2's tokenizer (``ngramd.daemon.runtime.gguf_tokenizer.load_tokenizer_only``: cached, ~7 s the first time)."""
    from ngramd.daemon.runtime.loading import ModelLoadError
    from ngramd.daemon.runtime.gguf_tokenizer import load_tokenizer_only

    try:
        tok = load_tokenizer_only()
    except ModelLoadError as e:
        pytest.skip(str(e))

    def tokenize_batch(texts: list[str]) -> list[list[int]]:
        return tok(texts, add_special_tokens=False)["input_ids"] if texts else []

    return tokenize_batch
