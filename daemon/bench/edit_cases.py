"""``ngramd bench --make-cases WORKSPACE --mode edit``: edit cases from a real workspace.

Each case rewrites one whole function (its ``def`` line to the end of its last
line) of 3-15 lines, following one small instruction of the kinds the speculative
edits are for, chosen from what the function itself offers:

- ``hints``: "Add type hints." (a function with no annotation at all);
- ``rename-parameter``: "Rename the parameter P to N." (its first parameter that is
  not ``self``/``cls``, ``*args`` or ``**kwargs``);
- ``rename-variable``: "Rename the variable V to N." (the first local name it assigns
  that is not a parameter).

N is the first of ``NEW_NAMES`` that is not a word of the function already, so the
rename is a real change and cannot collide. One case per function at most, each
function taking the kind it offers that has had fewest cases so far (so each kind
gets about a third where the functions allow), spread over the files as
``make_cases`` spreads completion cases. A rule, not a
hand-picked list: a workspace's cases are what its functions offer, and the same
seed gives the same cases.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngramd.daemon.bench.cases import BenchCaseError, case_id_prefix, line_starts, workspace_python_files
from ngramd.daemon.protocol.lines import LINE_BREAK
from ngramd.index.workspace import SkipFile, read_text

KINDS = ("hints", "rename-parameter", "rename-variable")
NEW_NAMES = ("value", "item", "result", "data", "entry", "current", "target")
MIN_LINES, MAX_LINES = 3, 15
MAX_TOKENS = 300  # a 15-line function is ~150 tokens: room for an answer twice that long
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class _EditCandidate:
    file: str
    offset: int  # the ``def`` (or ``async``) keyword
    end: int  # after the function's last line break
    kind: str
    instruction: str


def _new_name(function_text: str) -> str | None:
    words = set(_WORD.findall(function_text))
    return next((name for name in NEW_NAMES if name not in words), None)


def _all_args(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    """Every parameter, ``*args`` and ``**kwargs`` included, in the signature's order."""
    args = node.args
    return (args.posonlyargs + args.args + ([args.vararg] if args.vararg else []) + args.kwonlyargs
            + ([args.kwarg] if args.kwarg else []))


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Named parameters to rename: not ``self``/``cls``, ``*args`` or ``**kwargs``."""
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]


# scopes of their own: a name bound inside is not the function's local
_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
               ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _assigned_locals(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Names the function's own scope assigns (not nested scopes', not declared global or
    nonlocal, not parameters), in source order."""
    params = {a.arg for a in _all_args(node)}
    found: list[tuple[int, int, str]] = []
    declared: set[str] = set()

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            declared.update(n.names)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            found.append((n.lineno, n.col_offset, n.id))
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, _OWN_SCOPES):
                visit(child)

    for stmt in node.body:
        if not isinstance(stmt, _OWN_SCOPES):
            visit(stmt)
    seen: list[str] = []
    for _, _, name in sorted(found):
        if name not in params and name not in declared and name != "_" and name not in seen:
            seen.append(name)
    return seen


def _is_annotated(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return node.returns is not None or any(a.annotation is not None for a in _all_args(node))


def _anchor(text: str, offset: int, end: int) -> str:
    """The function's first line, and as many more as make it unique in the file (at most the
    whole function): when the stdlib moves it, the case finds this function, not another
    ``def close(self):``."""
    lines = LINE_BREAK.split(text[offset:end])
    breaks = LINE_BREAK.findall(text[offset:end])
    anchor = lines[0]
    for line, brk in zip(lines[1:], breaks):
        if text.count(anchor) <= 1:
            break
        anchor += brk + line
    return anchor


def _candidates_in(text: str, rel: str) -> list[list[_EditCandidate]]:
    """What each function of this file offers: one list per function (empty ones left out),
    one candidate per instruction kind."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    starts = line_starts(text)
    out: list[list[_EditCandidate]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
            continue
        if not MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES:
            continue
        offset = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno] if node.end_lineno < len(starts) else len(text)
        new = _new_name(text[offset:end])
        offers: list[tuple[str, str]] = []
        if not _is_annotated(node):
            offers.append(("hints", "Add type hints."))
        params = _parameters(node)
        if params and new:
            offers.append(("rename-parameter", f"Rename the parameter {params[0]} to {new}."))
        names = _assigned_locals(node)
        if names and new:
            offers.append(("rename-variable", f"Rename the variable {names[0]} to {new}."))
        if offers:
            out.append([_EditCandidate(rel, offset, end, kind, instruction) for kind, instruction in offers])
    return out


def _pick(functions: list[list[_EditCandidate]], n: int, rng: random.Random) -> list[_EditCandidate]:
    """Up to ``n`` cases, one per function (each a list of its offers), in the given order, few
    per file: one per file first, then up to two, four, any. Each function takes the kind it
    offers that has the fewest cases so far (ties: ``rng``)."""
    picked: list[_EditCandidate] = []
    used: set[int] = set()
    per_file: dict[str, int] = {}
    per_kind = dict.fromkeys(KINDS, 0)
    for cap in (1, 2, 4, 1 << 30):
        for i, offers in enumerate(functions):
            if len(picked) >= n:
                return picked
            file = offers[0].file
            if i in used or per_file.get(file, 0) >= cap:
                continue
            fewest = min(per_kind[c.kind] for c in offers)
            choice = rng.choice([c for c in offers if per_kind[c.kind] == fewest])
            picked.append(choice)
            used.add(i)
            per_file[file] = per_file.get(file, 0) + 1
            per_kind[choice.kind] += 1
    return picked


def make_edit_cases(workspace: str | Path, n: int = 20, seed: int = 0, max_tokens: int = MAX_TOKENS,
                    max_files: int = 300, id_prefix: str | None = None) -> list[dict[str, Any]]:
    """Edit cases from a real workspace, as JSON-ready dicts (see the module doc); fewer than
    ``n`` come back when its functions offer fewer."""
    rng = random.Random(seed)
    root, files = workspace_python_files(workspace, n, max_files, rng)
    texts: dict[str, str] = {}
    functions: list[list[_EditCandidate]] = []  # each function's offers
    for path in files:
        rel = str(path.relative_to(root))
        try:
            rel.encode("utf-8")  # a name that is not UTF-8 cannot be written to the JSONL file
            texts[rel] = read_text(path, 1 << 20)
            functions += _candidates_in(texts[rel], rel)
        except (UnicodeEncodeError, SkipFile, RecursionError, MemoryError):
            continue  # unreadable, binary, or too deeply nested to parse: no cases from it
    if not functions:
        raise BenchCaseError(f"workspace {root}: no function of {MIN_LINES}-{MAX_LINES} lines to edit")
    rng.shuffle(functions)
    ref, prefix = case_id_prefix(root)
    prefix = id_prefix or prefix
    picked = sorted(_pick(functions, n, rng), key=lambda c: (KINDS.index(c.kind), c.file, c.offset))
    return [{"id": f"edit-{prefix}-{c.kind}-{i:02d}", "workspace": ref, "file": c.file, "offset": c.offset,
             "end": c.end, "max_tokens": max_tokens, "mode": "edit", "instruction": c.instruction,
             "anchor": _anchor(texts[c.file], c.offset, c.end)}
            for i, c in enumerate(picked)]
