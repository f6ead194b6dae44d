"""Source files that are not UTF-8 (issue 33 item 7): Latin-1 files were skipped as binary.
``read_text`` decodes them by their PEP 263 coding line, else as Latin-1, unless control
characters say the file is binary."""

import os

import pytest

from ngramd.index.workspace import SkipFile, read_text


def test_a_latin1_file_with_a_coding_line_is_read_in_that_encoding(tmp_path):
    text = "# -*- coding: cp1252 -*-\nprice = '\u20ac 3, caf\u00e9'\n"
    (tmp_path / "a.py").write_bytes(text.encode("cp1252"))
    assert read_text(tmp_path / "a.py", 1 << 20) == text
    second_line = "#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\nname = 'Gr\u00f6\u00dfe'\n"
    (tmp_path / "b.py").write_bytes(second_line.encode("latin-1"))
    assert read_text(tmp_path / "b.py", 1 << 20) == second_line


def test_a_latin1_file_without_a_coding_line_falls_back_to_latin1(tmp_path):
    text = "/* r\u00e9sum\u00e9 des donn\u00e9es */\nint na\u00efve = 1;\n" * 20
    (tmp_path / "a.c").write_bytes(text.encode("latin-1"))
    assert read_text(tmp_path / "a.c", 1 << 20) == text
    # a coding line that does not fit the bytes: the fallback decides
    (tmp_path / "b.py").write_bytes("# coding: ascii\nx = '\u00e9'\n".encode("latin-1"))
    assert read_text(tmp_path / "b.py", 1 << 20) == "# coding: ascii\nx = '\u00e9'\n"


def test_bytes_full_of_control_characters_are_still_binary(tmp_path):
    data = bytes(range(1, 256)) * 40  # no NUL, not UTF-8, many control bytes
    (tmp_path / "blob.bin").write_bytes(data)
    with pytest.raises(SkipFile) as info:
        read_text(tmp_path / "blob.bin", 1 << 20)
    assert info.value.reason == "binary"
    (tmp_path / "rand.bin").write_bytes(os.urandom(4096).replace(b"\0", b"x"))
    with pytest.raises(SkipFile):
        read_text(tmp_path / "rand.bin", 1 << 20)
