"""Did an edit do what its instruction asked? A check for the bench's kinds of instruction.

Speed is half of an edit's story: an answer that repeats the original unchanged, or
rewrites lines it was not asked to touch, is fast to verify and useless to apply. For
the instructions ``ngramd bench --make-cases --mode edit`` writes (daemon/bench/edit_cases.py),
and the hand-written cases of the same wording, the answer can be judged exactly, on the
code's syntax tree (so layout and comments are not judged, nor docstrings: renaming a
word in a docstring, or not, both follow a rename):

- "Rename the parameter|variable|function OLD to NEW.": the answer's tree is the
  original's with every name ``OLD`` (a parameter, a variable, a function's own name, an
  ``except ... as``, ``import ... as`` or ``match`` capture name, a ``global``/``nonlocal``
  name) written ``NEW``; attributes (``self.OLD``) and keyword arguments of calls keep their
  name (they are other objects' names), except a keyword of a call to the function itself;
- "Add type hints..." : the answer's tree without its annotations (a bare declaration
  ``x: int`` stays, unannotated) and without imports from ``typing`` is the original's so
  stripped, and it has more annotations than the original.

Known limits: scopes are not followed (an inner ``lambda x:`` or ``[x for x in ...]`` that
rebinds OLD is expected renamed too, and an answer that left it, equally right, is judged
not to follow), nor calls to the function through another name.

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
        expected = _Rename(rename.group(1), rename.group(2), _own_names(before)).visit(before)
        return _shape(expected) == _shape(after)
    added = _annotations(after) > _annotations(before)  # counted before the stripping changes the trees
    return added and _shape(_StripAnnotations().visit(after)) == _shape(_StripAnnotations().visit(before))


def _own_names(tree: ast.Module) -> set[str]:
    """The names the selection's functions have (a call to one of them is a recursive call)."""
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


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


def _annotations(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree)
               if (isinstance(node, ast.arg) and node.annotation is not None)
               or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None)
               or isinstance(node, ast.AnnAssign))


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str, own: set[str]) -> None:
        self.old, self.new = old, new
        self.own = own  # the selection's function names: their calls' keywords are its parameters

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

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.ExceptHandler:
        if node.name is not None:
            node.name = self._name(node.name)
        self.generic_visit(node)
        return node

    def visit_alias(self, node: ast.alias) -> ast.alias:
        if node.asname is not None:  # ``import os as OLD`` binds OLD; ``import OLD`` names a module
            node.asname = self._name(node.asname)
        return node

    def visit_MatchAs(self, node: ast.MatchAs) -> ast.MatchAs:
        if node.name is not None:
            node.name = self._name(node.name)
        self.generic_visit(node)
        return node

    def visit_MatchStar(self, node: ast.MatchStar) -> ast.MatchStar:
        if node.name is not None:
            node.name = self._name(node.name)
        return node

    def visit_MatchMapping(self, node: ast.MatchMapping) -> ast.MatchMapping:
        if node.rest is not None:
            node.rest = self._name(node.rest)
        self.generic_visit(node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.Call:
        callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if callee in self.own:  # a recursive call: its keyword names the renamed parameter
            for keyword in node.keywords:
                if keyword.arg is not None:
                    keyword.arg = self._name(keyword.arg)
        self.generic_visit(node)
        return node


class _StripAnnotations(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:  # a bare declaration ``x: int`` stays (a dataclass field), unannotated
            node.annotation = ast.Constant(value=None)
            return node
        return ast.Assign(targets=[node.target], value=node.value)

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        return None if all(alias.name == "typing" for alias in node.names) else node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module in ("typing", "__future__") else node  # what hints may need
