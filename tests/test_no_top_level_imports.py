"""Nothing imports daemon, index or lsp as top-level packages any more: they install as
ngramd.daemon, ngramd.index and ngramd.lsp (pyproject.toml's [tool.setuptools.package-dir]) while
their folders stay at the top of the repository, where a stray old name could still import from
the repository root (python -m pytest, python -c, cwd) and hide the mistake until installed.

Checked on the source: import statements, and strings that hold a module path (-m arguments,
mock.patch and monkeypatch targets, importorskip, code run by python -c)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLD = ("daemon", "index", "lsp")
FOLDERS = ("daemon", "index", "lsp", "tests", "scripts", "bench")
_OLD = "|".join(OLD)
# a module path in a string: an old root and a name after it, not part of a longer name or path
STRING_PATH = re.compile(r"(?<![\w./\-])(" + _OLD + r")\.([A-Za-z_]\w*)")
STRING_IMPORT = re.compile(r"\b(?:from\s+(" + _OLD + r")\s+import|import\s+(" + _OLD + r")(?=[ \t]*(?:$|[;,\"'`)\\]|as\b)))",
                           re.M)


def _is_module(root: Path, name: str, sub: str) -> bool:
    return (root / name / f"{sub}.py").is_file() or (root / name / sub / "__init__.py").is_file()


def old_names(path: Path, root: Path = ROOT) -> list[str]:
    """``line: what`` for each old top-level name the file imports or names as a module path."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in OLD]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OLD:
                found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in STRING_PATH.finditer(node.value):
                if _is_module(root, m.group(1), m.group(2)):
                    found.append(f"{node.lineno}: {m.group(0)!r} in a string")
            found += [f"{node.lineno}: {m.group(0)!r} in a string" for m in STRING_IMPORT.finditer(node.value)]
    return found


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in FOLDERS if (root / folder).is_dir()
                  for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_nothing_imports_the_old_top_level_names():
    stale = {str(p.relative_to(ROOT)): found for p in sources() if (found := old_names(p))}
    assert not stale, "import these as ngramd.daemon, ngramd.index, ngramd.lsp: " + repr(stale)


def test_the_check_sees_every_form(tmp_path):
    for name in OLD:
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "__init__.py").write_text("")
    forms = [f"import {OLD[0]}.sub", f"from {OLD[1]}.sub import x", f"from {OLD[2]} import sub",
             f"def f():\n    import {OLD[1]}.sub as s", f"p = '{OLD[0]}.sub.thing'",
             f"cmd = ['-m', '{OLD[0]}.sub']", f"code = 'import {OLD[2]}'"]
    for form in forms:
        (tmp_path / "stray.py").write_text(form + "\n")
        assert old_names(tmp_path / "stray.py", tmp_path), form
    fine = ["import ngramd.daemon.cli", "from ngramd.lsp import items", "x = daemon.proc",
            "log = 'ngramd.watcher'", "path = 'daemon/engine/loop.py'", "index.sub['a'] = 1",
            f"s = 'the {OLD[0]} is up'"]
    for form in fine:
        (tmp_path / "ok.py").write_text(form + "\n")
        assert not old_names(tmp_path / "ok.py", tmp_path), form


@pytest.mark.parametrize("package", OLD)
def test_the_packages_import_from_this_tree_under_ngramd(package):
    """The editable install maps ngramd.<package> to this checkout's folder (pip install -e .
    again after pyproject.toml changes, or after moving the checkout)."""
    import importlib

    module = importlib.import_module(f"ngramd.{package}")
    assert Path(module.__file__).resolve() == ROOT / package / "__init__.py"
