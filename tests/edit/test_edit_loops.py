"""The loop guard (daemon/engine/repetition.py) against a real edit prompt: the selection's own
repetition is the prompt's, at the indentation the model is shown."""

from __future__ import annotations

import pytest

from ngramd.daemon.edit.prompt import build_edit_prompt
from ngramd.daemon.engine.repetition import MIN_SPAN, RepetitionGuard

ROW = "            [0, 0, 0, 0],\n"


def _source(rows: int) -> str:
    return "class Grid:\n    def cells(self):\n        return [\n" + ROW * rows + "        ]\n"


@pytest.fixture(scope="module")
def token_bytes(tok_runtime):
    from ngramd.daemon.runtime.tokenizer import _build_byte_table

    table = _build_byte_table(tok_runtime.tokenizer, len(tok_runtime.tokenizer))
    return table.__getitem__


def _stops_at(tok_runtime, token_bytes, rows_in_file: int, rows_in_answer: int,
              prompt_counts: bool = True) -> int | None:
    src = _source(rows_in_file)
    ep = build_edit_prompt(tok_runtime, src, src.index("def cells"), len(src), "add type hints", "file:///w/g.py")
    # the answer the model would write, in the frame it is shown (the method dedented)
    answer = "\n" + ep.shown.replace(ROW[4:] * rows_in_file, ROW[4:] * rows_in_answer) + ep.fence
    assert answer.count(ROW[4:]) == rows_in_answer  # the table as shown: 4 columns less
    guard = RepetitionGuard(ep.prompt.encode() if prompt_counts else b"", token_bytes)
    ids = tok_runtime.encode(answer)
    return next((i + 1 for i, t in enumerate(ids) if guard.push(t)), None)


def test_an_answer_repeating_the_selections_long_table_is_not_a_loop(tok_runtime, token_bytes):
    assert _stops_at(tok_runtime, token_bytes, 40, 40) is None  # ~400 tokens of rows, all in the prompt
    assert _stops_at(tok_runtime, token_bytes, 40, 41) is None  # and one row more


def test_an_answer_that_repeats_rows_the_prompt_never_had_is_a_loop(tok_runtime, token_bytes):
    at = _stops_at(tok_runtime, token_bytes, 4, 60)
    ignoring_the_prompt = _stops_at(tok_runtime, token_bytes, 4, 60, prompt_counts=False)
    assert ignoring_the_prompt is not None and ignoring_the_prompt >= MIN_SPAN
    # the prompt's four rows count: the loop is found about four rows later
    row_tokens = len(tok_runtime.encode(ROW[4:]))
    assert 3 * row_tokens <= at - ignoring_the_prompt <= 4 * row_tokens
