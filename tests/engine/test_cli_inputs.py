"""Command-line positions: the same line breaks as the LSP, clear errors outside the text."""

from __future__ import annotations

import pytest

from daemon.cli_inputs import InputError, offset_of
from lsp.positions import UTF32, offset_at


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
