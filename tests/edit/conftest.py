"""Fixtures for the speculative-edit tests (tests/edit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture(scope="session")
def tok_runtime():
    """The embedded model's tokenizer behind the runtime's tokenizer API (no model weights)."""
    from ngramd.daemon.runtime.tokenizer import encode_plain
    from ngramd.daemon.runtime.gguf_tokenizer import load_tokenizer_only

    tok = load_tokenizer_only()
    return SimpleNamespace(
        tokenizer=tok,
        eos_token_id=tok.eos_token_id,
        encode=lambda text: encode_plain(tok, [text])[0],
        decode=lambda ids: tok.decode(list(ids), skip_special_tokens=False,
                                      clean_up_tokenization_spaces=False),
    )


@pytest.fixture(scope="session")
def tiny_runtime():
    from ngramd.daemon.runtime.loading import load_runtime

    return load_runtime("tiny", device="cpu")
