"""``--make-cases --mode edit``: whole functions, instructions each function offers, valid cases."""

from __future__ import annotations

import ast
import collections
import json
import re
import textwrap

import pytest

from ngramd.daemon.bench.cases import BenchCaseError, load_cases
from ngramd.daemon.bench.edit_cases import KINDS, MAX_LINES, MIN_LINES, make_edit_cases
from ngramd.daemon.cli.main import main

MODULE = textwrap.dedent('''\
    """Shapes."""


    def area(width, height):
        value = width * height
        return value


    class Counter:
        def __init__(self, start=0):
            self.count = start
            self.value_seen = False

        def bump(self, step):
            total = self.count + step
            self.count = total
            return total

        def typed(self, step: int) -> int:
            doubled = step * 2
            return doubled


    def one_liner(x): return x


    def long_function(values):
    ''') + "".join(f"    v{i} = values[{i}]\n" for i in range(MAX_LINES)) + "    return v0\n"


@pytest.fixture()
def edit_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shapes.py").write_text(MODULE)
    (ws / "other.py").write_text(MODULE.replace("area", "surface").replace("Counter", "Tally"))
    return ws


def load(tmp_path, cases):
    path = tmp_path / "made.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return load_cases(path)


def function_at(text: str, offset: int) -> ast.FunctionDef:
    line = text.count("\n", 0, offset) + 1
    return next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.lineno == line)


def test_each_case_rewrites_one_whole_function_of_a_few_lines(tmp_path, edit_workspace):
    cases = load(tmp_path, make_edit_cases(edit_workspace, n=20, seed=0))
    assert cases
    for case in cases:
        original = (edit_workspace / case.file).read_text()
        assert case.mode == "edit" and case.text == original
        node = function_at(original, case.offset)
        assert original[case.offset:].startswith("def ")
        # the range ends after the function's last line break: the whole function, nothing more
        assert case.end == len("".join(original.splitlines(keepends=True)[:node.end_lineno]))
        assert MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES
    names = {function_at((edit_workspace / c.file).read_text(), c.offset).name for c in cases}
    assert "one_liner" not in names and "long_function" not in names  # too short, too long


def test_each_instruction_is_one_the_function_offers(tmp_path, edit_workspace):
    cases = load(tmp_path, make_edit_cases(edit_workspace, n=20, seed=0))
    for case in cases:
        node = function_at(case.text, case.offset)
        body = case.text[case.offset:case.end]
        params = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
        if case.instruction == "Add type hints.":
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            assert node.returns is None and all(a.annotation is None for a in every)
            continue
        m = re.fullmatch(r"Rename the (parameter|variable) (\w+) to (\w+)\.", case.instruction)
        assert m, case.instruction
        kind, old, new = m.groups()
        assert not re.search(rf"\b{new}\b", body), "the new name must not be a word of the function already"
        if kind == "parameter":
            assert old == params[0]
        else:
            assert old not in params and re.search(rf"\b{old}\s*=", body)


def test_one_case_per_function_kinds_balanced_and_files_spread(edit_workspace):
    cases = make_edit_cases(edit_workspace, n=20, seed=0)
    assert len({(c["file"], c["offset"]) for c in cases}) == len(cases)
    # 2 files x 4 functions that fit (typed has annotations: no "hints"); all of them taken
    assert len(cases) == 8
    kinds = collections.Counter(c["id"].split("-", 2)[2].rsplit("-", 1)[0] for c in cases)
    assert set(kinds) <= set(KINDS) and max(kinds.values()) - min(kinds[k] for k in KINDS) <= 1
    two = make_edit_cases(edit_workspace, n=2, seed=0)
    assert len(two) == 2 and {c["file"] for c in two} == {"shapes.py", "other.py"}  # one per file first


def test_same_seed_same_cases(edit_workspace):
    assert make_edit_cases(edit_workspace, n=5, seed=4) == make_edit_cases(edit_workspace, n=5, seed=4)


def test_an_annotated_function_is_never_asked_for_hints(edit_workspace):
    for seed in range(6):
        for case in make_edit_cases(edit_workspace, n=20, seed=seed):
            if case["anchor"].startswith("def typed"):
                assert case["instruction"] != "Add type hints."


def test_make_edit_cases_errors(tmp_path):
    with pytest.raises(BenchCaseError, match="not a directory"):
        make_edit_cases(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchCaseError, match="no Python files"):
        make_edit_cases(tmp_path / "empty")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "m.py").write_text("X = 1\n\ndef f(): return X\n")
    with pytest.raises(BenchCaseError, match="no function of 3-15 lines"):
        make_edit_cases(tmp_path / "flat")
    with pytest.raises(BenchCaseError, match="--n must be"):
        make_edit_cases(tmp_path, n=0)


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr_only"])
def test_made_edit_cases_load_back_whatever_the_line_endings(tmp_path, newline):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "m.py").write_bytes(MODULE.replace("\n", newline).encode())
    cases = make_edit_cases(ws, n=10, seed=0)
    assert cases and all(c["anchor"].startswith("def ") for c in cases)
    for case in load(tmp_path, cases):
        assert case.text[case.offset:].startswith("def ")
        assert case.text[:case.end].endswith(newline)  # the range ends after a line break


def candidates(source: str) -> dict[str, list[str]]:
    from ngramd.daemon.bench.edit_cases import _candidates_in

    out: dict[str, list[str]] = {}
    for offers in _candidates_in(source, "m.py"):
        def_line = source[offers[0].offset:].split("(")[0]
        out[def_line] = [c.instruction for c in offers]
    return out


def test_async_decorated_nested_and_keyword_only_functions():
    source = textwrap.dedent('''\
        import functools


        @functools.cache
        async def fetch(url, *, retries=2):
            reply = await get(url)
            return reply


        def outer(items):
            def inner(x, /, y):
                total = x + y
                return total
            return inner
    ''')
    found = candidates(source)
    # the range starts at "async def", after the decorator; a positional-only parameter is renamed too
    assert set(found) == {"async def fetch", "def outer", "def inner"}
    assert "Rename the parameter url to value." in found["async def fetch"]
    assert "Rename the variable reply to value." in found["async def fetch"]
    assert "Rename the parameter x to value." in found["def inner"]
    # outer binds no local of its own ("inner" is a def, not an assignment)
    assert not any(i.startswith("Rename the variable") for i in found["def outer"])


def test_comprehension_targets_and_globals_are_not_locals():
    source = textwrap.dedent('''\
        def squares(values):
            global CACHE
            CACHE = [v * v for v in values]
            total = sum(CACHE)
            return total
    ''')
    renames = [i for i in candidates(source)["def squares"] if i.startswith("Rename the variable")]
    assert renames == ["Rename the variable total to value."]  # not v (the comprehension's), not CACHE


def test_a_repeated_def_line_gets_an_anchor_unique_in_its_file(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    source = "".join(f"class C{i}:\n    def close(self):\n        self.n = {i}\n        return self.n\n\n"
                     for i in range(3))
    (ws / "m.py").write_text(source)
    made = make_edit_cases(ws, n=3, seed=0)
    assert len(made) == 3
    for case in made:
        assert source.count(case["anchor"]) == 1 and case["anchor"].startswith("def close(self):\n")
    for case in load(tmp_path, made):  # each loads back where it was made
        assert case.offset == next(c["offset"] for c in made if c["id"] == case.id)


def test_cli_make_edit_cases(tmp_path, edit_workspace, capsys):
    out = tmp_path / "e.jsonl"
    assert main(["bench", "--make-cases", str(edit_workspace), "--mode", "edit", "--n", "3", "--out", str(out)]) == 0
    loaded = load_cases(out)
    assert len(loaded) == 3 and all(c.mode == "edit" and c.instruction for c in loaded)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--make-cases", str(edit_workspace), "--mode", "rewrite"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
