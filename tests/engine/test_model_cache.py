"""Where a GGUF file's conversion is cached: named by content, so a reinstall (a new
modification time) finds it, and the folders the old key left behind go."""

from __future__ import annotations

import os

from ngramd.daemon.runtime.model import _drop_old_conversions, gguf_cache_dir


def test_the_cache_folder_follows_the_content_not_the_modification_time(tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMD_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 5000)
    first = gguf_cache_dir(gguf)
    os.utime(gguf, ns=(1, 1))  # reinstalled: same bytes, another time
    assert gguf_cache_dir(gguf) == first and first.parent == tmp_path / "cache" / "gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(255)) * 5000)  # other content, same name
    assert gguf_cache_dir(gguf) != first and gguf_cache_dir(gguf).name.startswith("m-sha1-")


def test_conversions_under_the_old_key_are_removed_and_nothing_else(tmp_path):
    root = tmp_path / "gguf"
    keep = ["m-sha1-0123456789abcdef", "m-sha1-1234567890123456", "other-98362432-1796116819189545468",
            "m-1-2.tmp77", "m-8-sha1-1234567890123456"]  # the last: another file's, named m-8
    drop = ["m-98362432-1796116819189545468", "m-98362432-1796120320525446181"]
    for name in keep + drop:
        (root / name).mkdir(parents=True)
        (root / name / "model.safetensors").write_bytes(b"x")
    _drop_old_conversions(tmp_path / "m.gguf", root / "m-sha1-0123456789abcdef")
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)
