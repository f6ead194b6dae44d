"""Where an edit's answer ends (fences of its own, a longer fence, end of sequence) and what it
becomes in the file (CRLF files, the end of the file): streamed through the stop rules as
generation does, then cleaned and put back (daemon/edit/prompt.py, daemon/engine/stops.py)."""

from __future__ import annotations

import pytest

from ngramd.daemon.edit.prompt import build_edit_prompt, draft_text
from ngramd.daemon.engine.stops import StopChecker, StopConfig, bare_short_lines


def rewrite(runtime, text: str, start: int, end: int, answer: str, uri: str = "file:///w/m.py",
            ended: bool = True) -> tuple[str, str]:
    """(the file after the rewrite, the stop reason): ``answer`` streamed byte by byte through the
    edit's stop rules; ``ended``: the model's end of sequence comes after it if no rule fired."""
    ep = build_edit_prompt(runtime, text, start, end, "change it", uri)
    stopper = StopChecker(StopConfig(max_tokens=100_000, **ep.stop_config()), lambda t: bytes([t]))
    stopper.push_many(list(answer.encode()))
    reason = stopper.reason or ("eos" if ended else "max_tokens")
    replacement = ep.replacement(stopper.text, reason in ("stop_string", "eos"))
    return text[:start] + replacement + text[end:], reason


FENCED_DOCSTRING = ('def area(w, h):\n    """Area of a rectangle.\n\n    ```python\n    area(2, 3)\n'
                    '    ```\n    """\n    return w * h\n')


def test_a_longer_fence_closed_with_three_backticks_ends_the_answer(tok_runtime):
    """The selection holds a fence of three, so the answer's is four; the model closes it with
    three anyway and goes on talking: the talk is not code."""
    text = FENCED_DOCSTRING + "\n\nprint(area(2, 3))\n"
    end = len(FENCED_DOCSTRING)
    renamed = FENCED_DOCSTRING.replace("(w, h)", "(width, h)").replace("w * h", "width * h")
    answer = "\n" + renamed.rstrip("\n") + "\n```\n\nThe `w * h` syntax is not allowed in Python.\n"
    edited, reason = rewrite(tok_runtime, text, 0, end, answer)
    assert reason == "stop_string"
    assert edited == renamed + "\n\nprint(area(2, 3))\n"


def test_in_markdown_a_longer_fence_closed_with_three_ends_the_answer_after_the_blocks_copied(tok_runtime):
    text = "# Tool\n\nInstal it with pip:\n\n```sh\npip install tool\n```\n\nThen run it.\n"
    start, end = text.index("Instal"), text.index("\nThen")
    answer = "\nInstall it with pip:\n\n```sh\npip install tool\n```\n```\n\nThe instruction is complete.\n"
    edited, reason = rewrite(tok_runtime, text, start, end, answer, uri="file:///w/README.md")
    assert reason == "stop_string"
    assert edited == text.replace("Instal it", "Install it")


def test_three_backticks_end_the_answer_after_as_many_as_the_selection_has_to_copy(tok_runtime):
    assert bare_short_lines("```sh\nls\n```", "````") == 0  # its bare line closes a block of its own
    assert bare_short_lines("```\nls\n```", "````") == 2  # a block opened bare at column 0: both read so
    assert bare_short_lines("    ```\n    ls\n    ```", "````") == 0  # indented: text
    # the selection has two such lines: the answer copies them, then the model's own three close it
    text = 'HELP = """\n```\nls -l\n```\n"""\nx = 1\n'
    end = text.index("x = 1")
    answer = '\nHELP = """\n```\nls -la\n```\n"""\n```\nI changed the flag.\n'
    edited, reason = rewrite(tok_runtime, text, 0, end, answer)
    assert (edited, reason) == (text.replace("ls -l\n", "ls -la\n"), "stop_string")


def test_a_fence_line_with_an_info_string_in_code_does_not_end_the_answer(tok_runtime):
    """Outside Markdown too: the answer adds a fenced example to a docstring."""
    text = 'DOC = """Usage:\nrun it\n"""\nx = 1\n'
    end = text.index("x = 1")
    answer = '\nDOC = """Usage:\n```sh\nrun it\n```\n"""\n```'
    edited, reason = rewrite(tok_runtime, text, 0, end, answer)
    assert edited == 'DOC = """Usage:\n```sh\nrun it\n```\n"""\nx = 1\n'
    assert reason == "eos"  # the closing line is judged once complete: at the end of sequence here


def test_an_answer_ended_inside_a_block_of_its_own_keeps_the_selections_layout(tok_runtime):
    text = "Some text.\nMore text.\n"
    edited, reason = rewrite(tok_runtime, text, 0, len("Some text.\n"), "\nSome text.\n```sh\nls",
                             uri="file:///w/notes.md")
    assert reason == "eos"
    assert edited == "Some text.\n```sh\nls\nMore text.\n"  # the model's text as it wrote it, no fence glued on


def test_an_answer_cut_at_max_tokens_is_given_as_written(tok_runtime):
    text = "def f():\n    return 1\n"
    edited, reason = rewrite(tok_runtime, text, 0, len(text), "\ndef f():\n    return 2\n```", ended=False)
    assert reason == "max_tokens"  # its last line is not complete: not judged
    assert edited == "def f():\n    return 2\n```"


def test_an_answer_that_opens_the_fence_again_has_that_line_dropped(tok_runtime):
    """Generation stops where the cleaning cuts: at the fence that closes the reopened one."""
    text = "def f():\n    return 1\n\nx = 2\n"
    end = text.index("\nx = 2")
    answer = "\n```python\ndef f():\n    return 2\n```\n\nThis returns 2 now.\n"
    edited, reason = rewrite(tok_runtime, text, 0, end, answer, ended=False)
    assert (edited, reason) == ("def f():\n    return 2\n\nx = 2\n", "stop_string")
    # where the selection itself starts with a fence line, that line is the answer's
    md = "```sh\nls\n```\n"
    edited, _ = rewrite(tok_runtime, md, 0, len(md), "\n```sh\nls -l\n```\n```", uri="file:///w/a.md")
    assert edited == "```sh\nls -l\n```\n"


def test_a_markdown_answer_may_open_with_a_code_block_of_its_own(tok_runtime):
    text = "# Tool\n\nInstall it with pip.\n\nThen run it.\n"
    start, end = text.index("Install"), text.index("\nThen")
    answer = "\n```sh\npip install tool\n```\nInstall it with pip.\n```\n"
    edited, reason = rewrite(tok_runtime, text, start, end, answer, uri="file:///w/README.md")
    assert reason == "stop_string"
    assert edited == "# Tool\n\n```sh\npip install tool\n```\nInstall it with pip.\n\nThen run it.\n"


def test_a_crlf_selection_is_shown_and_drafted_with_lf_and_written_back_with_crlf(tok_runtime):
    text = "def total(xs):\r\n    s = 0\r\n    for x in xs:\r\n        s += x\r\n    return s\r\n\r\nprint(1)\r\n"
    end = text.index("\r\nprint")
    ep = build_edit_prompt(tok_runtime, text, 0, end, "rename s to acc", "file:///w/crlf.py")
    assert ep.crlf and "\r" not in ep.shown and "\r" not in ep.prompt
    assert "\r" not in tok_runtime.decode(ep.draft_ids[:-1])
    lf_answer = "\n" + ep.shown.replace("s = 0", "acc = 0").replace("s += x", "acc += x").replace("return s", "return acc") + "\n```"
    edited, _ = rewrite(tok_runtime, text, 0, end, lf_answer, uri="file:///w/crlf.py")
    assert edited == text.replace("s = 0", "acc = 0").replace("s += x", "acc += x").replace("return s", "return acc")
    # a model that writes CRLF itself: one line break each, not \r\r\n
    edited, _ = rewrite(tok_runtime, text, 0, end, lf_answer.replace("\n", "\r\n"), uri="file:///w/crlf.py")
    assert edited == text.replace("s = 0", "acc = 0").replace("s += x", "acc += x").replace("return s", "return acc")
    # mixed line breaks: shown as they are, nothing converted
    mixed = "a = 1\r\nb = 2\nc = 3\n"
    ep = build_edit_prompt(tok_runtime, mixed, 0, len(mixed), "keep", "file:///w/m.py")
    assert not ep.crlf and "\r\n" in ep.shown


@pytest.mark.parametrize("text,expected", [
    ("x = 1\n", "x = 1\ny = 2\n"),  # the file ended with a line break: it still does
    ("x = 1\r\n", "x = 1\r\ny = 2\r\n"),
    ("", "y = 2"),  # an empty file had none
])
def test_code_written_at_the_end_of_the_file(tok_runtime, text, expected):
    edited, _ = rewrite(tok_runtime, text, len(text), len(text), "\ny = 2\n```")
    assert edited == expected


def test_the_draft_repeated_ends_where_the_draft_does(tok_runtime):
    """The draft's own closing fence is the answer's end, whatever backticks the selection holds."""
    text = FENCED_DOCSTRING
    ep = build_edit_prompt(tok_runtime, text, 0, len(text), "keep", "file:///w/m.py")
    assert ep.fence == "````" and ep.short_text == 0
    edited, reason = rewrite(tok_runtime, text, 0, len(text), draft_text(ep.shown, ep.fence) + "\nmore")
    assert (edited, reason) == (text, "stop_string")
