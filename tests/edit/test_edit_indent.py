"""The selection's indentation frame: shown dedented, the answer indented back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramd.daemon.edit.indent import IndentFrame, frame_of

CLASS_SRC = '''class Mailbox:

    @property
    def display_name(self):
        if self[0].token_type == 'name-addr':

            return self[0].display_name

    def route(self):
        return self[0].route
'''
METHOD_START = CLASS_SRC.index("def display_name")
METHOD_END = CLASS_SRC.index("    def route")


def _apply(text: str, start: int, end: int, replacement: str) -> str:
    return text[:start] + replacement + text[end:]


def test_a_method_selected_from_its_def_is_shown_as_a_top_level_function():
    frame = frame_of(CLASS_SRC, METHOD_START, METHOD_END)
    assert frame == IndentFrame(lead="    ", base="    ")
    shown = frame.dedent(CLASS_SRC[METHOD_START:METHOD_END])
    assert shown == ("def display_name(self):\n"
                     "    if self[0].token_type == 'name-addr':\n"
                     "\n"
                     "        return self[0].display_name\n"
                     "\n")


def test_an_answer_in_the_shown_frame_lands_at_the_methods_indentation():
    frame = frame_of(CLASS_SRC, METHOD_START, METHOD_END)
    answer = "def display_name(self) -> str:\n    return self[0].display_name\n\n"
    edited = _apply(CLASS_SRC, METHOD_START, METHOD_END, frame.reindent(answer))
    assert ("    def display_name(self) -> str:\n"
            "        return self[0].display_name\n"
            "\n"
            "    def route(self):\n") in edited
    compile(edited, "edited.py", "exec")  # still a valid class


def test_whole_lines_selected_from_column_zero_lose_their_shared_indentation():
    start = CLASS_SRC.index("    @property")
    frame = frame_of(CLASS_SRC, start, METHOD_END)
    assert frame == IndentFrame(lead="", base="    ")
    assert frame.dedent(CLASS_SRC[start:METHOD_END]).startswith("@property\ndef display_name(self):\n    if")
    assert frame.reindent("@property\ndef f(self):\n    pass\n") == "    @property\n    def f(self):\n        pass\n"


def test_a_selection_after_code_on_its_line_is_shown_as_it_is():
    text = "def f(a, b):\n    return g(a,\n             b)\n"
    start = text.index("g(a")
    frame = frame_of(text, start, len(text))
    assert frame == IndentFrame()
    assert frame.dedent(text[start:]) == text[start:]
    assert frame.reindent("h(a,\n  b)\n") == "h(a,\n  b)\n"


def test_tabs_crlf_and_whitespace_only_lines():
    text = "class A:\r\n\tdef f(self):\r\n\t\tx = 1\r\n\t\t\r\n\r\n\t\treturn x\r\n"
    start = text.index("def f")
    frame = frame_of(text, start, len(text))
    assert frame == IndentFrame(lead="\t", base="\t")
    shown = frame.dedent(text[start:])
    # blank lines (with or without their whitespace) pass through untouched
    assert shown == "def f(self):\r\n\tx = 1\r\n\t\t\r\n\r\n\treturn x\r\n"
    assert frame.reindent(shown) == text[start:]
    assert frame.reindent("def f(self):\r\n\treturn 1\r\n") == "def f(self):\r\n\t\treturn 1\r\n"


def test_a_base_shorter_than_the_lead():
    """Lines after the first indented less than the lead: the shown first line keeps the
    difference, and the lead (in the file) stands in for what the answer's first line lacks."""
    text = "if a:\n        x = 1\n    y = 2\n"
    start = text.index("x = 1")
    frame = frame_of(text, start, len(text))
    assert frame == IndentFrame(lead="        ", base="    ")
    assert frame.dedent(text[start:]) == "    x = 1\ny = 2\n"
    assert frame.reindent("    x = 3\ny = 4\n") == "x = 3\n    y = 4\n"
    assert _apply(text, start, len(text), frame.reindent("x = 3\ny = 4\n")) == "if a:\n        x = 3\n    y = 4\n"


def test_a_selection_whose_first_line_is_blank():
    text = "def f():\n    \n    y = 2\n"
    start = text.index("    \n") + 4  # after the blank line's spaces
    frame = frame_of(text, start, len(text))
    assert frame == IndentFrame(lead="    ", base="    ")
    assert frame.dedent(text[start:]) == "\ny = 2\n"  # the blank first line as selected: no lead added
    assert _apply(text, start, len(text), frame.reindent("\ny = 3\n")) == "def f():\n    \n    y = 3\n"


def test_an_empty_selection_takes_the_answer_at_the_cursors_indentation():
    text = "def f(items):\n    \n    return items\n"
    at = text.index("    \n") + 4
    frame = frame_of(text, at, at)
    assert frame == IndentFrame(lead="    ", base="    ")
    assert frame.dedent("") == ""
    written = frame.reindent("for item in items:\n    print(item)\n")
    assert written == "for item in items:\n        print(item)\n"
    compile(_apply(text, at, at, written), "edited.py", "exec")
    assert frame_of("x = 1\n", 6, 6) == IndentFrame()  # at the end, at column 0: nothing to put back


def test_an_empty_selection_at_column_zero_takes_the_indentation_of_the_code_after_it():
    """An editor trims an empty line's whitespace: a click there, in a body, is at column 0."""
    text = "def f(items):\n    total = 0\n\n    return total\n"
    at = text.index("\n\n") + 1  # the empty line
    frame = frame_of(text, at, at)
    assert frame == IndentFrame(lead="", base="    ")
    edited = _apply(text, at, at, frame.reindent("for item in items:\n    total += item\n"))
    assert "    total = 0\n    for item in items:\n        total += item\n\n    return total" in edited
    compile(edited, "edited.py", "exec")
    # the cursor at column 0 of an indented line: the answer goes in before it, at its indentation
    at = text.index("    return")
    assert frame_of(text, at, at) == IndentFrame(lead="", base="    ")
    # empty lines selected whole, then top-level code: the top level
    two = "def f():\n    pass\n\n\ndef g():\n    pass\n"
    assert frame_of(two, two.index("\n\n") + 1, two.index("def g")) == IndentFrame()


_LINE = st.tuples(st.sampled_from(["", " ", "  ", "    ", "\t", "\t ", "        ", "\f", "\xa0"]),
                  st.sampled_from(["", "x = 1", "def f(a):", "  # note", "return a", " \t", "\r", "a\rb"]),
                  st.sampled_from(["\n", "\r\n"]))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, min_size=1, max_size=8), data=st.data())
def test_an_unchanged_answer_gives_back_the_original_and_the_frame_is_taken_off(lines, data):
    text = "".join(indent + body + end for indent, body, end in lines)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    original = text[start:end]
    frame = frame_of(text, start, end)
    shown = frame.dedent(original)
    assert frame.reindent(shown) == original
    if frame.base:  # what the model sees has no indentation left that all its lines share
        assert frame_of(shown, 0, len(shown)).base == ""


@pytest.mark.parametrize("start_text", ["def display_name", "    @property\n    def display_name"])
def test_the_prompt_shows_the_dedented_method_and_drafts_it(tok_runtime, start_text):
    from ngramd.daemon.edit.prompt import build_edit_prompt

    start = CLASS_SRC.index(start_text)
    ep = build_edit_prompt(tok_runtime, CLASS_SRC, start, METHOD_END, "Add type hints.", uri="file:///w/m.py")
    assert "Selection:\n```python\n" + ep.shown + "\n```" in ep.prompt
    assert "\ndef display_name(self):\n    if self[0]" in ep.prompt
    assert tok_runtime.decode(ep.draft_ids[:-1]) == "\n" + ep.shown + "\n```\n"
    assert ep.frame.reindent(ep.shown) + ep.layout == ep.original
