"""Command-line positions: the same line breaks as the LSP, clear errors outside the text."""

from __future__ import annotations

import pytest

from ngramd.daemon.cli.inputs import InputError, check_generation_args, offset_of
from ngramd.lsp.positions import UTF32, offset_at


@pytest.mark.parametrize("text", ["a\nbc\n", "a\r\nbc\r\n", "a\rbc\r", "a\r\nbc\nd\re", "", "no break"])
def test_offsets_agree_with_the_lsp_inside_every_line(text):
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line, content in enumerate(lines):
        for col in range(len(content) + 1):
            assert offset_of(text, line, col) == offset_at(text, line, col, UTF32)


def test_crlf_line_ends_before_the_carriage_return():
    with pytest.raises(InputError, match="column 2 is outside line 0 \\(columns 0..1\\)"):
        offset_of("a\r\nb", 0, 2)  # would land between \r and \n
    with pytest.raises(InputError, match="line 2 is outside the file \\(lines 0..1\\)"):
        offset_of("a\r\nb", 2, 0)


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), 1e-40, -1.0, 101.0])
def test_unusable_temperatures_are_refused_with_the_rule(temperature):
    """The RPC's rule (ngramd.daemon.protocol.requests.check_temperature): 0 for greedy, else finite in [1e-4, 100]."""
    with pytest.raises(InputError, match=r"--temperature must be >= 0 \(0 is greedy; otherwise between 0.0001 and 100\)"):
        check_generation_args(16, temperature, 1.0)


def test_usable_sampling_flags_pass():
    for temperature in (0.0, 1e-4, 0.7, 100.0):
        check_generation_args(16, temperature, 1.0)
    with pytest.raises(InputError, match=r"--top-p must be in \(0, 1\], got nan"):
        check_generation_args(16, 0.7, float("nan"))


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path):
    from ngramd.daemon.cli.inputs import read_source

    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\ny = 2\n")
    text = read_source(path)
    assert text == "x = 1\ny = 2\n"  # as an editor shows it: column 0 of line 0 is "x"
    assert text[offset_of(text, 0, 4)] == "1"
    path.write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(InputError, match="is empty"):
        read_source(path)


def test_the_readmes_first_completion_is_after_edit_buffers_docstring():
    """The README's first command says where its cursor is; index/store.py moves under it."""
    import ast
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    lines = {int(n) for n in re.findall(r"complete index/store\.py --line (\d+) --col 0", (repo / "README.md").read_text())}
    tree = ast.parse((repo / "index" / "store.py").read_text())
    (edit_buffer,) = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "edit_buffer"]
    first_statement = edit_buffer.body[1]  # body[0] is the docstring
    assert lines == {first_statement.lineno - 1}  # the CLI's lines are 0-based


def test_a_file_longer_than_a_document_or_no_regular_file_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    from pathlib import Path

    import ngramd.daemon.cli.inputs as cli_inputs
    from ngramd.daemon.cli.inputs import read_source

    monkeypatch.setattr(cli_inputs, "DEFAULT_MAX_DOCUMENT_CHARS", 10)
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert read_source(tmp_path / "ok.py") == "x = 1\n"
    (tmp_path / "long.py").write_text("x = 12345678\n")  # 13 characters
    with pytest.raises(InputError, match="too long: more than 10 characters"):
        read_source(tmp_path / "long.py")
    (tmp_path / "longer.py").write_text("é" * 30)  # 60 bytes: past 4 bytes a character
    with pytest.raises(InputError, match="too long"):
        read_source(tmp_path / "longer.py")
    with pytest.raises(InputError, match="not a regular file"):
        read_source(Path("/dev/zero"))  # never read to its end
