"""Edit prompts: chat and plain styles, the draft's tokens, cleaning, bad ranges."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.edit_prompt import (SELECTION, EditRangeError, build_edit_prompt, check_range,
                                clean_answer, draft_text, excerpt, fence_for, language_of)
from daemon.model import encode_template

SRC = '''import os


def area(w, h):
    """Area of a rectangle."""
    x = w * h
    return x


def main():
    print(area(2, 3))
'''
START = SRC.index("    x = w")
END = SRC.index("def main")


def test_check_range_rejects_bad_ranges_clearly():
    check_range("abc", 0, 3)
    check_range("abc", 2, 2)
    with pytest.raises(EditRangeError, match="after end"):
        check_range("abc", 2, 1)
    with pytest.raises(EditRangeError, match="outside"):
        check_range("abc", 0, 4)
    with pytest.raises(EditRangeError, match="outside"):
        check_range("abc", -1, 2)
    with pytest.raises(EditRangeError, match="int"):
        check_range("abc", "0", 2)


def test_language_fence_and_excerpt():
    assert language_of("file:///a/b/x.py") == "python"
    assert language_of("Makefile") == ""
    assert fence_for("x = 1") == "```"
    assert fence_for("doc\n````\n") == "`````"
    ex = excerpt(SRC, START, END)
    assert ex.startswith("import os") and SELECTION in ex and ex.endswith("print(area(2, 3))\n")
    assert "x = w * h" not in ex


def test_clean_answer_cuts_at_the_closing_fence_and_keeps_the_trailing_newline():
    assert clean_answer("\n    y = 1\n```", "    x = 1\n", "```") == "    y = 1\n"
    assert clean_answer("\n    y = 1\n```", "    x = 1", "```") == "    y = 1"
    assert clean_answer("\n    y = 1\n```\n<|im_end|>", "x\n", "```") == "    y = 1\n"
    assert clean_answer("\n```", "x\n", "```") == ""
    # no closing fence (max_tokens reached): everything that came
    assert clean_answer("\n    y = 1\n    z", "x\n", "```") == "    y = 1\n    z"
    # the original's blank last line survives
    assert clean_answer("\na\n\n```", "a\n\n", "```") == "a\n\n"


def test_clean_answer_of_a_crlf_file_keeps_its_line_ends_and_adds_no_stray_cr():
    assert clean_answer("\na = 1\r\nb = 2\r\n```", "a = 0\r\nb = 2\r\n", "```") == "a = 1\r\nb = 2\r\n"
    assert clean_answer("\na = 1\r\nb = 2\r\n```", "a = 0\r\nb = 2", "```") == "a = 1\r\nb = 2"


@pytest.mark.parametrize("original", ["    x = w * h\n    return x\n", "x = 1", "\tif a:\n\t\tb()\n\n", "",
                                      "a = 1\r\nb = 2\r\n", "a = 1\r\nb = 2", "a = 1\r"])
def test_clean_answer_of_the_draft_gives_back_the_original(original):
    fence = fence_for(original)
    assert clean_answer(draft_text(original, fence) + "\n", original, fence) == original


def test_chat_prompt_uses_the_template_and_prefills_the_fence(tok_runtime):
    ep = build_edit_prompt(tok_runtime, SRC, START, END, "rename x to count", uri="file:///t/geo.py")
    assert ep.style == "chat"
    assert ep.prompt.startswith("<|im_start|>system\n")
    assert ep.prompt.endswith("<|im_start|>assistant\n```python")
    assert "Instruction: rename x to count" in ep.prompt
    assert ep.original == SRC[START:END]
    assert ep.stop == ("\n```",)
    assert ep.prompt_ids[0] == tok_runtime.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ep.draft_ids[-1] == tok_runtime.eos_token_id
    assert ep.shown == "x = w * h\nreturn x\n\n\n"  # the selection, its shared indentation taken off
    assert tok_runtime.decode(ep.draft_ids[:-1]) == draft_text(ep.shown, "```")


@pytest.mark.parametrize("start,end", [(START, END), (SRC.index("x = w"), SRC.index("\n    return")),
                                       (SRC.index("def area"), SRC.index("def main")), (0, 0)])
def test_prompt_and_draft_tokens_concatenate(tok_runtime, start, end):
    # the answer's tokens, when the model repeats the selection it was shown, are exactly the draft
    ep = build_edit_prompt(tok_runtime, SRC, start, end, "add type hints", uri="geo.py")
    joined = encode_template(tok_runtime.tokenizer, ep.prompt + draft_text(ep.shown, ep.fence))
    assert joined == ep.prompt_ids + ep.draft_ids[:-1]


def test_clean_answer_keeps_a_special_token_literal_of_the_code():
    # eos ends the generation as a token; "<|im_end|>" in the answer's text is the code's own
    answer = "\nx = '<|im_end|>'\ny = 1\n```"
    assert clean_answer(answer, "x = 'a'\ny = 1\n", "```") == "x = '<|im_end|>'\ny = 1\n"


def test_special_token_literals_in_the_selection_are_plain_text(tok_runtime):
    src = "marker = '<|im_end|>'\nstart = '<|im_start|><|endoftext|>'\n"
    ep = build_edit_prompt(tok_runtime, src, 0, len(src), "add a docstring", uri="m.py")
    tok = tok_runtime.tokenizer
    special = set(tok.all_special_ids)
    # the draft holds the literals as text and ends with the one real eos
    assert not special & set(ep.draft_ids[:-1]) and ep.draft_ids[-1] == tok_runtime.eos_token_id
    assert tok_runtime.decode(ep.draft_ids[:-1]) == draft_text(src, "```")
    # the prompt's special tokens are the template's alone: the same as for a selection without literals
    plain = build_edit_prompt(tok_runtime, "marker = 'x'\n", 0, 13, "add a docstring", uri="m.py")
    assert [i for i in ep.prompt_ids if i in special] == [i for i in plain.prompt_ids if i in special]
    assert tok_runtime.decode(ep.prompt_ids) == ep.prompt


def test_plain_prompt_for_a_base_model(tok_runtime):
    base = SimpleNamespace(tokenizer=SimpleNamespace(chat_template=None), eos_token_id=None,
                           encode=tok_runtime.encode)
    ep = build_edit_prompt(base, SRC, START, END, "rename x to count", uri="geo.py")
    assert ep.style == "plain"
    assert ep.prompt.endswith("Rewritten selection:\n```python")
    assert "<|im_start|>" not in ep.prompt
    assert ep.draft_ids == tok_runtime.encode(draft_text(ep.shown, "```"))


def test_bad_ranges_and_instruction(tok_runtime):
    with pytest.raises(EditRangeError):
        build_edit_prompt(tok_runtime, SRC, END, START, "x")
    with pytest.raises(EditRangeError):
        build_edit_prompt(tok_runtime, SRC, 0, len(SRC) + 1, "x")
    with pytest.raises(ValueError, match="instruction"):
        build_edit_prompt(tok_runtime, SRC, 0, 1, "  ")


def _excerpt_of_whole_text(text, start, end):
    """``excerpt`` as first written, splitting the whole text: the windowed one must agree."""
    from daemon.edit_prompt import CONTEXT_CHARS, CONTEXT_LINES_AFTER, CONTEXT_LINES_BEFORE, SELECTION

    before = "\n".join(text[:start].split("\n")[-CONTEXT_LINES_BEFORE:])[-CONTEXT_CHARS:]
    after = "\n".join(text[end:].split("\n")[:CONTEXT_LINES_AFTER])[:CONTEXT_CHARS]
    return before + SELECTION + after


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_windowed_excerpt_is_the_excerpt_of_the_whole_text(data):
    """Short and long lines, few and many, around ranges anywhere (both limits, lines and characters)."""
    longest = data.draw(st.sampled_from([2, 12, 90, 400]))  # many lines in the window, or few
    count = data.draw(st.integers(0, 150))
    lines = data.draw(st.lists(st.text(alphabet="ab \t", max_size=longest), min_size=count, max_size=count))
    text = "\n".join(lines)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert excerpt(text, start, end) == _excerpt_of_whole_text(text, start, end)


@pytest.mark.parametrize("line_chars, lines", [(300, 50), (3, 200), (1000, 12), (0, 90)])
def test_the_windowed_excerpt_agrees_where_each_limit_decides(line_chars, lines):
    """Long lines (the character limit decides), short ones (the line limit), empty ones."""
    text = "\n".join(("x" * line_chars + str(i))[: line_chars or 0] for i in range(lines))
    for start in range(0, len(text) + 1, max(1, len(text) // 37)):
        for end in (start, min(len(text), start + 5), len(text)):
            assert excerpt(text, start, end) == _excerpt_of_whole_text(text, start, end), (start, end)
