"""Chunk boundaries and incremental re-tokenization of buffers."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.index import chunking
from ngramd.index.document import Document
from index_helpers import char_tokenize, word_tokenize

ALPHABET = ["a", "b", "1", " ", "  ", "\t", "\n", "\n", "\r\n", ".", "x\n", "é"]
texts = st.lists(st.sampled_from(ALPHABET), max_size=20).map("".join)


def test_boundaries_worked_example():
    # "a\n  b\n\nc": line 2 is indented by two spaces, so the cut goes before the
    # second one (" b" is one pre-token); "c" is at column 0 after a blank line, so
    # the cut goes before the last newline ("\n\nc" pre-tokenizes "\n", "\n", "c").
    t = "a\n  b\n\nc"
    assert chunking.boundaries(t) == [3, 6]
    assert chunking.chunk(t) == ["a\n ", " b\n", "\nc"]
    assert [p for p in range(len(t) + 1) if chunking.is_boundary(t, p)] == [0, 3, 6, 8]


def test_tab_indent_and_whitespace_only_lines():
    assert chunking.chunk("x\n\ty\n   \n") == ["x\n", "\ty\n   \n"]
    assert chunking.chunk("x\n\ty\n   \nz") == ["x\n", "\ty\n   ", "\nz"]


@given(texts, st.data())
def test_boundaries_match_the_local_predicate(t, data):
    every = [p for p in range(1, len(t)) if chunking.is_boundary(t, p)]
    assert chunking.boundaries(t) == every
    lo = data.draw(st.integers(0, len(t)))
    hi = data.draw(st.integers(lo, len(t)))
    assert chunking.boundaries(t, lo, hi) == [p for p in every if lo < p < hi]
    assert "".join(chunking.chunk(t)) == t


def test_document_edit_worked_example():
    d = Document.from_text("a\n  b", char_tokenize)
    assert d.cuts.tolist() == [0, 3, 5]
    d.edit(4, 5, "c", char_tokenize)
    assert d.text == "a\n  c"
    assert d.tokens.tolist() == [ord(c) for c in "a\n  c"]
    d.check(char_tokenize)


def test_edit_only_retokenizes_the_touched_chunks():
    seen: list[str] = []

    def spy(texts):
        seen.extend(texts)
        return word_tokenize(texts)

    lines = [f"    x{i} = f({i})\n" for i in range(200)]
    d = Document.from_text("def f():\n" + "".join(lines), spy)
    seen.clear()
    at = d.text.index("x100")
    d.edit(at, at + 4, "y100", spy)
    d.check(word_tokenize)
    assert 1 <= len(seen) <= 3 and sum(map(len, seen)) < 60, seen


@settings(max_examples=300, deadline=None)
@given(texts, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), texts), max_size=6))
def test_incremental_edits_equal_fresh_tokenization(t, edits):
    d = Document.from_text(t, word_tokenize)
    for a, n, new in edits:
        a = min(a, len(d.text))
        b = min(a + n, len(d.text))
        d.edit(a, b, new, word_tokenize)
        d.check(word_tokenize)  # cuts and tokens equal a from-scratch document
    assert np.array_equal(d.tokens, d.rebuild(word_tokenize).tokens)


@pytest.mark.parametrize("start,end", [(-1, 0), (0, 99), (3, 2), (0.5, 1)])
def test_edit_out_of_range_is_a_clear_error(start, end):
    d = Document.from_text("abc\n", char_tokenize)
    with pytest.raises(ValueError, match="out of range"):
        d.edit(start, end, "x", char_tokenize)
    assert d.text == "abc\n"


@pytest.mark.real_model
def test_real_tokenizer_chunked_equals_whole(real_tokenizer):
    """On stdlib sources, chunk-by-chunk tokenization equals whole-text tokenization."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:40]
    assert files
    same = 0
    for f in files:
        t = f.read_text("utf-8", "replace")
        whole = real_tokenizer([t])[0]
        chunked = Document.from_text(t, real_tokenizer).tokens.tolist()
        same += whole == chunked
    # Measured on the full stdlib by scripts/bench_index.py; here: every file must agree.
    assert same == len(files)
    # An edit through the real tokenizer stays equal to a fresh tokenization.
    d = Document.from_text("def f(x):\n    return x\n", real_tokenizer)
    at = d.text.index("return")
    d.edit(at, at + len("return"), "yield", real_tokenizer)
    assert d.tokens.tolist() == real_tokenizer(["def f(x):\n    yield x\n"])[0]
