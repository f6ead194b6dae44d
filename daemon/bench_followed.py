"""Did an edit do what its instruction asked? A check for the bench's kinds of instruction.

Speed is half of an edit's story: an answer that repeats the original unchanged, or
rewrites lines it was not asked to touch, is fast to verify and useless to apply. For
the instructions ``ngramd bench --make-cases --mode edit`` writes (daemon/bench_edit_cases.py),
and the hand-written cases of the same wording, the answer can be judged exactly, on the
code's syntax tree (so layout and comments are not judged, nor docstrings: renaming a
word in a docstring, or not, both follow a rename):

- "Rename the parameter|variable|function OLD to NEW.": the answer's tree is the
  original's with every name ``OLD`` (a parameter, a variable, a function's own name,
  a ``global``/``nonlocal`` name) written ``NEW``; attributes (``self.OLD``) and keyword
  arguments of calls keep their name (they are other objects' names);
- "Add type hints..." : the answer's tree without its annotations is the original's
  without its annotations, and it has more annotations than the original.

Any other instruction, a file that is not Python, or an original that does not parse
alone gets ``None``: not judged.

    followed("Rename the parameter s to text.", "a.py", "def f(s):\\n    return s\\n", "",
             "def f(text):\\n    return text\\n") is True
"""

from __future__ import annotations

import ast
import re
import textwrap

_RENAME = re.compile(r"Rename the (?:parameter|variable|function) ([A-Za-z_]\w*) to ([A-Za-z_]\w*)\.?\s*\Z")
_HINTS = re.compile(r"Add type hints\b")


def followed(instruction: str, path: str, original: str, lead: str, replacement: str) -> bool | None:
    """Whether ``replacement`` does to ``original`` what ``instruction`` asks (see the module doc).

    ``lead`` is the text between the start of the original's first line and the original
    (a method's indentation), so that both parse as one block.
    """
    if not path.endswith((".py", ".pyi")):
        return None
    rename = _RENAME.match(instruction.strip())
    hints = _HINTS.match(instruction.strip())
    if not rename and not hints:
        return None
    before = _parse(lead, original)
    if before is None:
        return None
    after = _parse(lead, replacement)
    if after is None:
        return False
    if rename:
        expected = _Rename(rename.group(1), rename.group(2)).visit(before)
        return _shape(expected) == _shape(after)
    return (_shape(_StripAnnotations().visit(after)) == _shape(_StripAnnotations().visit(before))
            and _annotations(_parse(lead, replacement)) > _annotations(_parse(lead, original)))


def _parse(lead: str, code: str) -> ast.Module | None:
    if lead.strip():  # the original starts after code on its line: not a block of its own
        return None
    try:
        return ast.parse(textwrap.dedent(lead + code))
    except (SyntaxError, ValueError):  # ValueError: a NUL in the code
        return None


def _shape(tree: ast.AST) -> str:
    """The tree without docstrings, as text (positions are not part of ``ast.dump``)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _annotations(tree: ast.AST | None) -> int:
    if tree is None:
        return 0
    return sum(1 for node in ast.walk(tree)
               if (isinstance(node, ast.arg) and node.annotation is not None)
               or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None)
               or isinstance(node, ast.AnnAssign))


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def _name(self, name: str) -> str:
        return self.new if name == self.old else name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self._name(node.arg)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self._name(node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> ast.Global:
        node.names = [self._name(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global  # type: ignore[assignment]


class _StripAnnotations(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:  # a bare declaration ``x: int`` only annotates
            return None
        return ast.Assign(targets=[node.target], value=node.value)
