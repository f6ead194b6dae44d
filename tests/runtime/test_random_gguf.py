"""scripts/make_random_gguf.py: its small model is a GGUF that llama.cpp loads through
``load_llamacpp``, with random 4-bit weights and the embedded SmolLM2's tokenizer, read alike
by llama.cpp and transformers (the 1.5b size is the same code with other numbers; its memory
figures are in docs/benchmarks.md, "Memory")."""

from __future__ import annotations

import numpy as np
import pytest

# building the transformers tokenizer from a new GGUF takes ~10 s
pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory, load_script):
    pytest.importorskip("gguf")
    out = tmp_path_factory.mktemp("gguf") / "random-small.Q4_0.gguf"
    info = load_script("make_random_gguf").write(out, size="small", qtype_name="q4_0", seed=1)
    assert info["bytes"] == out.stat().st_size < 8 << 20  # a few MB
    return out


def test_weights_are_random_4bit_and_the_tokenizer_is_smollm2s(small_gguf):
    import gguf
    from gguf.quants import dequantize

    from ngramd.daemon.runtime.loading import embedded_gguf_path

    ours, source = gguf.GGUFReader(str(small_gguf)), gguf.GGUFReader(str(embedded_gguf_path()))
    assert ours.fields["general.architecture"].contents() == "llama"
    names = {t.name for t in ours.tensors}
    assert "token_embd.weight" in names and "output.weight" not in names  # tied, as Qwen2.5-Coder-1.5B
    for t in ours.tensors:
        if t.name.endswith("norm.weight"):
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            values = np.asarray(t.data)
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q4_0
            values = dequantize(np.asarray(t.data), t.tensor_type)
        assert np.isfinite(values).all() and np.count_nonzero(values) > values.size // 2, t.name
        assert values.std() > 0, t.name
    tokenizer_keys = [k for k in source.fields if k.startswith("tokenizer.")]
    assert tokenizer_keys
    for key in tokenizer_keys:
        assert ours.fields[key].contents() == source.fields[key].contents(), key


def test_llamacpp_loads_it_with_the_same_vocabulary(small_gguf, tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llamacpp.sh)")
    import gguf

    from ngramd.daemon.runtime.llamacpp import TOKENIZER_SAMPLE, load_llamacpp
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    monkeypatch.setenv("NGRAMD_CACHE_DIR", str(tmp_path / "cache"))  # its tokenizer, built here, not kept
    tokens = gguf.GGUFReader(str(embedded_gguf_path())).fields["tokenizer.ggml.tokens"].contents()
    runtime = load_llamacpp(small_gguf, sequences=2, ctx_per_sequence=256, check=False)
    try:
        assert runtime.vocab_size == len(tokens) == len(runtime.tokenizer) == 49152
        assert runtime.tokenizer.convert_ids_to_tokens(list(range(len(tokens)))) == tokens
        assert runtime.tokenizer_disagreement(TOKENIZER_SAMPLE) == ""
        ids = runtime.encode(TOKENIZER_SAMPLE)
        assert runtime.decode(ids) == TOKENIZER_SAMPLE
        cache = runtime.new_cache()
        logits = runtime.forward_pass(ids, cache, keep_last=2)
        assert logits.shape == (2, 49152)
        assert bool(np.isfinite(logits).all()) and float(logits.std()) > 0
    finally:
        runtime.close()
