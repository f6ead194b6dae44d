"""Edit prompts: chat and plain styles, the draft's tokens, cleaning, bad ranges."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.edit.prompt import (SELECTION, EditRangeError, build_edit_prompt, check_range,
                                clean_answer, draft_text, excerpt, fence_for, language_of)
from ngramd.daemon.runtime.tokenizer import encode_template

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


def test_clean_answer_cuts_at_the_closing_fence_without_the_answers_line_breaks():
    assert clean_answer("\n    y = 1\n```", "```", True) == ("    y = 1", True)
    assert clean_answer("\n    y = 1\n```\n<|im_end|>", "```", True) == ("    y = 1", True)
    assert clean_answer("\na\n\n```", "```", True) == ("a", True)  # the layout is the selection's, not the answer's
    assert clean_answer("\na = 1\r\nb = 2\r\n```", "```", True) == ("a = 1\r\nb = 2", True)  # CRLF: no stray \r
    assert clean_answer("\r\na = 1\r\n```", "```", True) == ("a = 1", True)  # nor after the opening fence
    assert clean_answer("\n```", "```", True) == ("", True)
    # ended (eos) without the closing fence: all of it is code
    assert clean_answer("\n    y = 1\n", "```", True) == ("    y = 1", True)
    # not ended (max_tokens reached): everything that came, unfinished, even a last line of backticks
    assert clean_answer("\n    y = 1\n    z", "```", False) == ("    y = 1\n    z", False)
    assert clean_answer("\n    y = 1\n```", "```", False) == ("    y = 1\n```", False)


def _edit(text: str, start: int, end: int, answer: str, uri: str = "file:///w/m.py") -> str:
    """The file after the rewrite of text[start:end] by the model's finished ``answer``."""
    from ngramd.daemon.runtime.loading import load_runtime

    ep = build_edit_prompt(load_runtime("tiny", device="cpu"), text, start, end, "change it", uri)
    return text[:start] + ep.replacement(answer, True) + text[end:]


def test_the_selections_trailing_blank_lines_stay():
    """Whole lines selected down past the blank lines after them: the model is shown the code,
    and the blank lines come back after its answer."""
    text = "def size(path):\n    return len(path)\n\n\ndef name(path):\n    return path\n"
    edited = _edit(text, 0, text.index("def name"), "\ndef size(path: str) -> int:\n    return len(path)")
    assert edited == text.replace("def size(path)", "def size(path: str) -> int")


def test_a_selection_ending_in_the_next_lines_indentation_keeps_the_lines_apart():
    text = "def f():\n    a = 1\n    b = 2\n"
    edited = _edit(text, text.index("a = 1"), text.index("b = 2"), "\na: int = 1")
    assert edited == "def f():\n    a: int = 1\n    b = 2\n"


@pytest.mark.parametrize("at", ["\n    return", "return"], ids=["column 0", "after the indentation"])
def test_code_written_before_code_on_its_line_goes_in_as_lines_of_its_own(at):
    text = "def f(items):\n    return items\n\n\nx = 1\n"
    cursor = text.index(at) + (1 if at.startswith("\n") else 0)
    edited = _edit(text, cursor, cursor, "\nif not items:\n    items = []")
    assert edited == "def f(items):\n    if not items:\n        items = []\n    return items\n\n\nx = 1\n"
    compile(edited, "edited.py", "exec")
    crlf = text.replace("\n", "\r\n")
    cursor = crlf.index("    return")
    assert _edit(crlf, cursor, cursor, "\nprint(items)").startswith("def f(items):\r\n    print(items)\r\n    return")


def test_an_answer_without_code_deletes_the_selection_with_its_layout():
    text = "def f():\n    a = 1\n    b = 2\n"
    assert _edit(text, text.index("    a"), text.index("    b"), "") == "def f():\n    b = 2\n"
    assert _edit(text, text.index("a = 1"), text.index("b = 2"), "") == "def f():\n    b = 2\n"
    empty = text.index("    b")
    assert _edit(text, empty, empty, "") == text  # nothing selected, nothing written: nothing changes


def test_blank_lines_an_answer_opens_with_leave_no_trailing_whitespace():
    text = "class A:\n    def f(self):\n        return 1\n"
    start = text.index("def f")
    assert _edit(text, start, len(text), "\n\n  \ndef f(self) -> int:\n    return 1") == \
        "class A:\n    def f(self) -> int:\n        return 1\n"
    blank_first = "def g():\n\n    return 2\n"
    start = blank_first.index("\n\n") + 1  # the selection opens with its blank line: kept
    assert _edit(blank_first, start, len(blank_first), "\n\nreturn 3") == "def g():\n\n    return 3\n"
    # after code on its line, the opening line break is what ends that line: kept
    after_code = "def f():\n    a = 1\n    return a\n"
    cursor = after_code.index("\n    return")
    assert _edit(after_code, cursor, cursor, "\n\n    b = 2") == "def f():\n    a = 1\n    b = 2\n    return a\n"


def test_a_markdown_answer_may_hold_a_code_block_of_its_own():
    text = "# Tool\n\nInstall with pip.\n\nThen run it.\n"
    start = text.index("Install")
    answer = "\nInstall with pip:\n\n```sh\npip install tool\n```\n\nThen run it."
    edited = _edit(text, start, len(text), answer, uri="file:///w/README.md")
    assert edited == "# Tool\n\nInstall with pip:\n\n```sh\npip install tool\n```\n\nThen run it.\n"


@pytest.mark.parametrize("after", ["", "\nNote: the instruction is done.\n"], ids=["eos", "text after"])
def test_a_markdown_answer_ends_at_the_fence_that_closes_no_block_of_its_own(tok_runtime, after):
    """The model's answer, streamed through the stop rules as generation does: the fence line
    after ```sh opens a block, the next bare one closes it, the one after closes the answer
    (three backticks, as the embedded model writes them); what follows it is not kept."""
    from ngramd.daemon.engine.stops import StopChecker, StopConfig

    text = "# Tool\n\nInstall with pip.\n\nThen run it.\n"
    ep = build_edit_prompt(tok_runtime, text, text.index("Install"), len(text), "add the command",
                           "file:///w/README.md")
    assert ep.fence == "```"
    out = "\nInstall with pip:\n\n```sh\npip install tool\n```\n\nThen run it.\n```" + after
    stopper = StopChecker(StopConfig(max_tokens=10_000, **ep.stop_config()), lambda t: bytes([t]))
    stopped = stopper.push_many(list(out.encode()))
    reason = stopper.reason or "eos"  # no rule fired: the model's eos ends it
    assert (reason == "stop_string") == bool(after) and stopped == len(out.encode()) - (len(after) - 1 if after else 0)
    replacement = ep.replacement(stopper.text, True)
    assert replacement == "Install with pip:\n\n```sh\npip install tool\n```\n\nThen run it.\n"


_LINE = st.tuples(st.sampled_from(["", " ", "    ", "\t", "        "]),
                  st.sampled_from(["", "x = 1", "def f(a):", "# note", "return a", " \t", "```", "```sh", "````",
                                   "y\rz"]),
                  st.sampled_from(["\n", "\r\n"]))


@pytest.mark.parametrize("uri", ["file:///w/m.py", "file:///w/notes.md"])
@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, min_size=1, max_size=8), data=st.data())
def test_an_answer_that_repeats_the_draft_gives_back_the_original(tok_runtime, uri, lines, data):
    """Whatever the file and the range: the model repeating what it was shown changes nothing,
    streamed through the stop rules as generation does, whether it then ends with eos or goes on."""
    from ngramd.daemon.engine.stops import StopChecker, StopConfig

    text = "".join(indent + body + end for indent, body, end in lines)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    ep = build_edit_prompt(tok_runtime, text, start, end, "keep it", uri)
    draft = draft_text(ep.shown, ep.fence)
    for after in ("", "\nDone.\n"):  # eos after the fence, or more text (which the stop rule cuts)
        stopper = StopChecker(StopConfig(max_tokens=100_000, **ep.stop_config()), lambda t: bytes([t]))
        stopper.push_many(list((draft + after).encode()))
        assert ep.replacement(stopper.text, True) == ep.original, after
    assert ep.replacement(draft, True) == ep.original


def test_chat_prompt_uses_the_template_and_prefills_the_fence(tok_runtime):
    ep = build_edit_prompt(tok_runtime, SRC, START, END, "rename x to count", uri="file:///t/geo.py")
    assert ep.style == "chat"
    assert ep.prompt.startswith("<|im_start|>system\n")
    assert ep.prompt.endswith("<|im_start|>assistant\n```python")
    assert "Instruction: rename x to count" in ep.prompt
    assert ep.original == SRC[START:END]
    assert ep.stop_config() == {"closing_fence": "```", "short_text": 0, "reopening": True, "block_end": False}
    assert ep.prompt_ids[0] == tok_runtime.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ep.draft_ids[-1] == tok_runtime.eos_token_id
    assert ep.shown == "x = w * h\nreturn x"  # the selection's code, its shared indentation taken off
    assert ep.layout == "\n\n\n"  # its blank lines, put back after the answer
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
    assert clean_answer(answer, "```", True) == ("x = '<|im_end|>'\ny = 1", True)


def test_special_token_literals_in_the_selection_are_plain_text(tok_runtime):
    src = "marker = '<|im_end|>'\nstart = '<|im_start|><|endoftext|>'\n"
    ep = build_edit_prompt(tok_runtime, src, 0, len(src), "add a docstring", uri="m.py")
    tok = tok_runtime.tokenizer
    special = set(tok.all_special_ids)
    # the draft holds the literals as text and ends with the one real eos
    assert not special & set(ep.draft_ids[:-1]) and ep.draft_ids[-1] == tok_runtime.eos_token_id
    assert tok_runtime.decode(ep.draft_ids[:-1]) == draft_text(src.rstrip("\n"), "```")
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
    from ngramd.daemon.edit.prompt import CONTEXT_CHARS, CONTEXT_LINES_AFTER, CONTEXT_LINES_BEFORE, SELECTION

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
