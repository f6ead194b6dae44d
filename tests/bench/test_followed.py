"""daemon/bench/followed.py: whether an edit's answer does what its instruction asked."""

from __future__ import annotations

import io

from ngramd.daemon.bench.followed import followed
from ngramd.daemon.bench.report import build_report, render_text, summarize

METHOD = '''def get(self, msg, default=None):
        """Look msg up."""
        found = self.table.get(msg)  # by key
        self.msg = msg
        return found if found is not None else call(msg=default)
'''
LEAD = "    "  # the method's indentation, before ``def``


def test_a_rename_must_rename_every_use_of_the_name_and_nothing_else():
    ask = "Rename the parameter msg to key."
    right = METHOD.replace("(self, msg,", "(self, key,").replace("get(msg)", "get(key)").replace("= msg\n", "= key\n")
    assert followed(ask, "a.py", METHOD, LEAD, right) is True
    # the docstring and the comment are not judged; layout is not either
    assert followed(ask, "a.py", METHOD, LEAD, right.replace("Look msg up", "Look key up")
                    .replace("  # by key", "").replace("(self, key,", "(self,  key,")) is True
    # the attribute and the call's keyword are other objects' names: renaming them is wrong
    assert followed(ask, "a.py", METHOD, LEAD, right.replace("self.msg", "self.key")) is False
    assert followed(ask, "a.py", METHOD, LEAD, right.replace("call(msg=", "call(key=")) is False
    # renamed in the signature only; not renamed at all; a rename with another change
    assert followed(ask, "a.py", METHOD, LEAD, METHOD.replace("(self, msg,", "(self, key,")) is False
    assert followed(ask, "a.py", METHOD, LEAD, METHOD) is False
    assert followed(ask, "a.py", METHOD, LEAD, right.replace("is not None", "is None")) is False
    # an answer that does not parse in place (the body back at the def's column)
    assert followed(ask, "a.py", METHOD, LEAD, right.replace("\n        ", "\n    ")) is False


def test_a_function_rename_and_global_names_follow():
    code = "def count():\n    global total\n    total += 1\n    return count\n"
    ask = "Rename the function count to tally."
    assert followed(ask, "a.py", code, "", code.replace("count", "tally")) is True
    assert followed("Rename the variable total to seen.", "a.py", code, "", code.replace("total", "seen")) is True


def test_type_hints_must_annotate_and_change_nothing_else():
    code = "def area(r, scale=1.0):\n    full = 3.14 * r ** 2\n    return full * scale\n"
    ask = "Add type hints."
    hinted = code.replace("(r, scale=1.0)", "(r: float, scale: float = 1.0) -> float")
    assert followed(ask, "a.py", code, "", hinted) is True
    assert followed(ask, "a.py", code, "", hinted.replace("full = ", "full: float = ")) is True
    assert followed("Add type hints to the function signature.", "a.py", code, "", hinted) is True
    assert followed(ask, "a.py", code, "", code) is False  # nothing added
    assert followed(ask, "a.py", code, "", hinted.replace("** 2", "** 3")) is False  # the code changed


def test_what_cannot_be_judged_is_none():
    code = "def f(s):\n    return s\n"
    assert followed("Add a docstring.", "a.py", code, "", code) is None  # another instruction
    assert followed("Rename the parameter s to t.", "a.txt", code, "", code) is None  # not Python
    assert followed("Rename the parameter s to t.", "a.py", "def f(s:\n", "", code) is None  # original broken
    assert followed("Rename the parameter s to t.", "a.py", "s + 1", "x = ", "t + 1") is None  # after code


def test_the_report_counts_the_finished_answers_that_did_what_was_asked():
    def edit_row(id_, ok, stop="stop_string"):
        return {"id": id_, "kind": "ordinary", "status": "ok", "mode": "edit", "ms": 100, "plain_ms": 200,
                "hf_prompt_lookup_ms": 200, "generated": 10, "forward_passes": 5, "plain_forward_passes": 10,
                "drafted": 8, "accepted": 6, "identical": True, "speedup_plain": 2.0, "speedup_hf": 2.0,
                "changed_lines": 1, "stop_reason": stop,
                "still_compiles": True, "followed": ok}

    rows = [edit_row("a", True), edit_row("b", False), edit_row("c", None), edit_row("cut", True, stop="max_tokens")]
    s = summarize(rows)
    assert (s["edits"]["followed"], s["edits"]["follow_checked"]) == (1, 2)
    out = io.StringIO()
    render_text(build_report(rows, {}), out, use_rich=False)
    assert "the answer does what the instruction asks in 1 of 2 judged" in out.getvalue()
    assert "follow_checked" not in summarize([edit_row("c", None)])["edits"]


def test_names_bound_by_except_import_and_match_are_renamed_and_recursive_keywords_too():
    code = ("def load(path, retry=1):\n    import json as codec\n    try:\n        return codec.load(path)\n"
            "    except ValueError as err:\n        return load(path=path, retry=retry - 1) if retry else err\n")
    ask = "Rename the parameter path to source."
    right = ("def load(source, retry=1):\n    import json as codec\n    try:\n        return codec.load(source)\n"
             "    except ValueError as err:\n        return load(source=source, retry=retry - 1) if retry else err\n")
    assert followed(ask, "a.py", code, "", right) is True
    # the recursive call's keyword left as it was: that call would fail
    assert followed(ask, "a.py", code, "", right.replace("load(source=source", "load(path=source")) is False
    renamed_err = code.replace("err", "exc")
    assert followed("Rename the variable err to exc.", "a.py", code, "", renamed_err) is True
    assert followed("Rename the variable err to exc.", "a.py", code, "", code.replace("else err", "else exc")) is False
    renamed_codec = code.replace("codec", "js")
    assert followed("Rename the variable codec to js.", "a.py", code, "", renamed_codec) is True
    match = "def kind(v):\n    match v:\n        case [first, *rest]:\n            return first\n"
    assert followed("Rename the variable first to head.", "a.py", match, "", match.replace("first", "head")) is True


def test_type_hints_may_import_from_typing_but_not_drop_a_declaration():
    code = "class P:\n    x: int\n    y: int\n\n    def norm(self, scale):\n        return scale\n"
    hinted = code.replace("def norm(self, scale):", "def norm(self, scale: Optional[float]) -> float:")
    assert followed("Add type hints.", "a.py", code, "", "from typing import Optional\n" + hinted) is True
    assert followed("Add type hints.", "a.py", code, "", hinted.replace("    y: int\n", "")) is False
