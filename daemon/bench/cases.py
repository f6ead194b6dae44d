"""Bench cases: the JSONL format ``ngramd bench`` reads, and ``--make-cases``.

One case a line (shared/DESIGN.md, extended here)::

    {"id": "json-encoder-3", "workspace": "stdlib:json", "file": "encoder.py",
     "offset": 9120, "max_tokens": 48, "mode": "complete", "kind": "repeat",
     "cut": 410, "anchor": "        if self.check_circular:"}

Fields:

- ``id`` (str, unique in the file).
- ``workspace``: a directory. Three spellings:
    * ``"stdlib:"`` is the Python standard library's root (``sysconfig`` "stdlib");
    * ``"stdlib:NAME"`` is the directory of the stdlib *package* NAME (dotted names
      allowed: ``"stdlib:email.mime"``). Committed cases use this, never an absolute
      path, so that they run on every machine (no import happens);
    * anything else is a path; a relative one is relative to the cases file's directory.
- ``file``: the document, relative to the workspace.
- ``offset``: the cursor, in characters (``str`` indices) of the file's text
  (of ``buffer`` when given). The text is the file's bytes decoded as UTF-8, line
  endings kept as they are (a CRLF file's ``\r`` characters count), as the
  workspace index and ``--make-cases`` read it.
- ``max_tokens`` (int >= 1), ``mode``: ``"complete"`` or ``"edit"``.
- ``buffer`` (optional str): the document's text, replacing the file's text on disk.
- ``cut`` (optional int >= 0, default 0): characters removed right after the cursor
  before the case runs: the document becomes ``text[:offset] + text[offset+cut:]``.
  Made cases cut the rest of the enclosing function, so that the code the model is
  asked to write is not sitting after the cursor (which would make every case a
  repeat). The original file on disk is left out of the workspace index for the
  same reason.
- ``anchor`` (optional str): the text expected at ``offset`` in the file. The stdlib
  differs between Python versions; when the anchor is not at ``offset`` the case is
  moved to the anchor's nearest occurrence, and rejected if there is none.
- ``kind`` (optional, default ``"ordinary"``): ``"ordinary"`` (a code line inside a
  function body), ``"repeat"`` (the code after the cursor largely repeats text
  elsewhere in the buffer or workspace) or ``"norepeat"`` (text with almost no
  repeated n-grams). The summary groups speedups by kind.
- ``overlap`` (optional float): the measured repeat score, for information.
- edit mode only: ``instruction`` (str) and ``end`` (int, offset <= end <= len(text)):
  ``text[offset:end]`` is the range rewritten; ``cut`` must be 0 there.

Loading resolves the workspace, reads the text, applies anchor and cut, and checks
every field; a malformed case raises ``BenchCaseError`` naming the file and line.
"""

from __future__ import annotations

import ast
import json
import random
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ngramd.daemon.protocol.lines import LINE_BREAK
from ngramd.index.workspace import SkipFile, read_text

KINDS = ("ordinary", "repeat", "norepeat")
MODES = ("complete", "edit")
STDLIB_PREFIX = "stdlib:"

_REQUIRED = {"id": str, "workspace": str, "file": str, "offset": int, "max_tokens": int, "mode": str}
_OPTIONAL = {"buffer": str, "cut": int, "anchor": str, "kind": str, "overlap": (int, float),
             "instruction": str, "end": int, "note": str}


class BenchCaseError(ValueError):
    """A malformed case; the message names the file, line and field."""


@dataclass(frozen=True)
class BenchCase:
    """One case, resolved: ``text`` is the document exactly as the engine sees it."""

    id: str
    workspace: Path  # resolved directory
    workspace_ref: str  # as written in the case
    file: str  # relative to workspace
    offset: int  # cursor in ``text`` (after anchor relocation)
    max_tokens: int
    mode: str
    text: str  # the document after ``buffer``/``cut``
    kind: str = "ordinary"
    end: int | None = None  # edit mode: end of the rewritten range in ``text``
    instruction: str | None = None
    overlap: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.workspace / self.file


# --------------------------------------------------------------------------- workspace


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


_MODULE_NAME = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")


def resolve_workspace(ref: str, base_dir: Path | None = None) -> Path:
    """``"stdlib:"``/``"stdlib:PKG"``/path -> an existing directory (see module doc)."""
    if ref.startswith(STDLIB_PREFIX):
        name = ref[len(STDLIB_PREFIX):].strip()
        root = stdlib_root()
        if not name:
            return root
        if not _MODULE_NAME.fullmatch(name):
            raise BenchCaseError(f"workspace {ref!r}: not a module name")
        path = root.joinpath(*name.split("."))
        if not path.is_dir():
            raise BenchCaseError(f"workspace {ref!r}: no stdlib package directory {path}")
        return path
    path = Path(ref).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_dir():
        raise BenchCaseError(f"workspace {ref!r}: not a directory ({path})")
    return path.resolve()


def workspace_ref_for(path: Path) -> str:
    """The portable spelling of ``path``: ``stdlib:...`` when inside the stdlib."""
    path = path.resolve()
    root = stdlib_root().resolve()
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    name = ".".join(rel.parts)
    if "site-packages" in rel.parts or (name and not _MODULE_NAME.fullmatch(name)):
        return str(path)  # not a package name (config-3.11-x86_64-linux-gnu): the loader takes the path
    return STDLIB_PREFIX + name


# --------------------------------------------------------------------------- loading


def _relocate(text: str, offset: int, anchor: str) -> int | None:
    """The occurrence of ``anchor`` nearest to ``offset``, or None."""
    if text.startswith(anchor, offset):
        return offset
    best = None
    start = text.find(anchor)
    while start != -1:
        if best is None or abs(start - offset) < abs(best - offset):
            best = start
        start = text.find(anchor, start + 1)
    return best


def parse_case(obj: Any, base_dir: Path | None = None, where: str = "case") -> BenchCase:
    """Validate one decoded JSON object and resolve it into a ``BenchCase``."""
    if not isinstance(obj, dict):
        raise BenchCaseError(f"{where}: a case is a JSON object, got {type(obj).__name__}")
    for key in _REQUIRED:
        if key not in obj:
            raise BenchCaseError(f"{where}: missing field {key!r}")
    for key, value in obj.items():
        typ = _REQUIRED.get(key) or _OPTIONAL.get(key)
        if typ is None:
            continue  # unknown fields are kept in ``extra`` (e.g. "python", "line")
        # bool is an int subclass; a case with "offset": true is a mistake
        if not isinstance(value, typ) or isinstance(value, bool):
            raise BenchCaseError(f"{where}: field {key!r} must be {_typename(typ)}, got {value!r:.60}")
    if not obj["id"]:
        raise BenchCaseError(f"{where}: empty id")
    mode = obj["mode"]
    if mode not in MODES:
        raise BenchCaseError(f"{where}: mode must be one of {MODES}, got {mode!r}")
    kind = obj.get("kind", "ordinary")
    if kind not in KINDS:
        raise BenchCaseError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    if obj["max_tokens"] < 1:
        raise BenchCaseError(f"{where}: max_tokens must be >= 1")
    if obj["offset"] < 0:
        raise BenchCaseError(f"{where}: offset must be >= 0")
    cut = obj.get("cut", 0)
    if cut < 0:
        raise BenchCaseError(f"{where}: cut must be >= 0")

    try:
        workspace = resolve_workspace(obj["workspace"], base_dir)
    except BenchCaseError as exc:
        raise BenchCaseError(f"{where}: {exc}") from None
    rel = Path(obj["file"])
    if rel.is_absolute() or ".." in rel.parts:
        raise BenchCaseError(f"{where}: file must be relative to the workspace, got {obj['file']!r}")
    if "buffer" in obj:
        text = obj["buffer"]
    else:
        path = workspace / rel
        if not path.is_file():
            raise BenchCaseError(f"{where}: no file {path}")
        try:  # bytes, not read_text: universal newlines would drop the \r that offsets count;
            # utf-8-sig: a leading byte order mark is not text (editors, the CLI and the index drop it)
            text = path.read_bytes().decode("utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise BenchCaseError(f"{where}: cannot read {path}: {exc}") from exc

    offset = obj["offset"]
    if "anchor" in obj and obj["anchor"]:
        moved = _relocate(text, offset, obj["anchor"])
        if moved is None:
            raise BenchCaseError(f"{where}: anchor {obj['anchor']!r} not found in {obj['file']}")
        offset = moved
    if offset > len(text):
        raise BenchCaseError(f"{where}: offset {offset} past the end of the text ({len(text)} chars)")

    end = instruction = None
    if mode == "edit":
        if "instruction" not in obj or "end" not in obj:
            raise BenchCaseError(f"{where}: an edit case needs 'instruction' and 'end'")
        if cut:
            raise BenchCaseError(f"{where}: an edit case cannot have a cut")
        end = obj["end"] + (offset - obj["offset"])  # moves with the anchor
        if not offset <= end <= len(text):
            raise BenchCaseError(f"{where}: end {obj['end']} outside [offset, len(text)]")
        instruction = obj["instruction"]
    elif "instruction" in obj or "end" in obj:  # a complete case would silently ignore them
        raise BenchCaseError(f"{where}: 'instruction' and 'end' belong to edit cases (mode 'edit')")
    if cut:
        if offset + cut > len(text):
            raise BenchCaseError(f"{where}: cut {cut} runs past the end of the text "
                                 f"({len(text) - offset} chars after the cursor)")
        text = text[:offset] + text[offset + cut:]

    extra = {k: v for k, v in obj.items() if k not in _REQUIRED and k not in _OPTIONAL}
    return BenchCase(id=obj["id"], workspace=workspace, workspace_ref=obj["workspace"], file=str(rel),
                     offset=offset, max_tokens=obj["max_tokens"], mode=mode, text=text, kind=kind,
                     end=end, instruction=instruction, overlap=obj.get("overlap"), extra=extra)


def _typename(typ: Any) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__


def load_cases(path: str | Path) -> list[BenchCase]:
    """Read a JSONL cases file; blank lines and lines starting with ``#`` are skipped."""
    path = Path(path)
    try:
        # "\n" only: str.splitlines() also splits at U+2028, U+0085 ... which JSON strings hold raw
        lines = path.read_bytes().decode("utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchCaseError(f"cannot read cases file {path}: {exc}") from exc
    cases: list[BenchCase] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchCaseError(f"{where}: not valid JSON ({exc.msg}: column {exc.colno})") from exc
        case = parse_case(obj, path.parent, where)
        if case.id in seen:
            raise BenchCaseError(f"{where}: duplicate id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise BenchCaseError(f"{path}: no cases")
    return cases


# --------------------------------------------------------------------------- making cases

_WORD = re.compile(r"\w+|[^\w\s]")
NGRAM = 4  # word n-gram size of the repeat score
TARGET_WORDS = 32  # ~48 model tokens of code
REPEAT_MIN = 0.6  # overlap >= this: "repeat"
NOREPEAT_MAX = 0.1  # overlap <= this: candidate "norepeat"


def _grams(text: str) -> set[int]:
    words = _WORD.findall(text)
    return {hash(tuple(words[i:i + NGRAM])) for i in range(len(words) - NGRAM + 1)}


def overlap_score(target: str, elsewhere: set[int]) -> float:
    """Fraction of ``target``'s first word 4-grams that occur in ``elsewhere``.

    ``target`` is the text the model is expected to write (the first
    ``TARGET_WORDS`` words are scored); 1.0 means every 4-gram of it exists
    somewhere else, so an n-gram draft could in principle cover it.
    """
    words = _WORD.findall(target)[:TARGET_WORDS]
    grams = [hash(tuple(words[i:i + NGRAM])) for i in range(len(words) - NGRAM + 1)]
    if not grams:
        return 0.0
    return sum(g in elsewhere for g in grams) / len(grams)


@dataclass
class _Candidate:
    file: str
    offset: int
    cut: int
    prose: bool  # a docstring line, not code
    overlap: float = 0.0
    anchor: str = ""




def line_starts(text: str) -> list[int]:
    """The offset of every line's first character (any line break ends a line, as for ``ast``)."""
    starts = [0]
    for m in LINE_BREAK.finditer(text):
        starts.append(m.end())
    return starts


def _candidates_in(text: str, rel: str) -> list[_Candidate]:
    """Cursors after the indentation of code lines inside function bodies (and
    of docstring lines, as prose); each cuts the rest of its function."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    starts = line_starts(text)
    out: list[_Candidate] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
            continue
        func_end = starts[node.end_lineno] if node.end_lineno < len(starts) else len(text)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            doc = body[0]
            # prose: lines 2.. of a multi-line docstring, cut to the docstring's end
            for lineno in range(doc.lineno + 1, (doc.end_lineno or doc.lineno)):
                line = text[starts[lineno - 1]:starts[lineno]]
                if len(line.strip()) > 20:
                    offset = starts[lineno - 1] + len(line) - len(line.lstrip())
                    doc_end = starts[doc.end_lineno - 1] if doc.end_lineno else offset
                    out.append(_Candidate(rel, offset, max(doc_end - offset, 0), prose=True))
            body = body[1:]
        for stmt in body:
            # statements at any depth inside this function, not in nested defs
            for sub in _statements(stmt):
                line_start = starts[sub.lineno - 1]
                line = text[line_start:starts[sub.lineno] if sub.lineno < len(starts) else len(text)]
                if not line.strip() or line[:sub.col_offset].strip():
                    continue  # not the first statement on its line
                offset = line_start + sub.col_offset
                out.append(_Candidate(rel, offset, func_end - offset, prose=False))
    # a line inside nested functions is found once per enclosing def: keep the innermost cut
    best: dict[int, _Candidate] = {}
    for c in out:
        if c.offset not in best or c.cut < best[c.offset].cut:
            best[c.offset] = c
    return list(best.values())


def _statements(stmt: ast.stmt) -> Iterable[ast.stmt]:
    yield stmt
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return  # nested defs are visited on their own
    for name in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(stmt, name, ()) or ():
            if isinstance(child, ast.stmt):
                yield from _statements(child)
            elif isinstance(child, ast.ExceptHandler):
                for grand in child.body:
                    yield from _statements(grand)


def python_files(root: Path, limit: int, rng: random.Random) -> list[Path]:
    """The workspace's ``.py`` files (no hidden folders, caches or site-packages), sorted;
    ``limit`` of them drawn with ``rng`` when there are more."""
    files = sorted(p for p in root.rglob("*.py")
                   if p.is_file() and not any(part.startswith(".") or part in ("__pycache__", "site-packages")
                                              for part in p.relative_to(root).parts))
    if len(files) > limit:
        files = sorted(rng.sample(files, limit))
    return files


def workspace_python_files(workspace: str | Path, n: int, max_files: int,
                           rng: random.Random) -> tuple[Path, list[Path]]:
    """For ``--make-cases``: the workspace's resolved root and its Python files (``python_files``);
    BenchCaseError for ``n`` < 1, a workspace that is not a directory or has no Python file."""
    if n < 1:
        raise BenchCaseError("--n must be >= 1")
    root = Path(workspace).expanduser()
    if not root.is_dir():
        raise BenchCaseError(f"workspace {workspace}: not a directory")
    root = root.resolve()
    files = python_files(root, max_files, rng)
    if not files:
        raise BenchCaseError(f"workspace {root}: no Python files")
    return root, files


def case_id_prefix(root: Path) -> tuple[str, str]:
    """The workspace's portable spelling (``workspace_ref_for``) and the prefix of its case ids:
    the stdlib package's name, else the folder's."""
    ref = workspace_ref_for(root)
    return ref, (ref[len(STDLIB_PREFIX):] if ref.startswith(STDLIB_PREFIX) else root.name) or "stdlib"


def make_cases(workspace: str | Path, n: int = 20, seed: int = 0, max_tokens: int = 48,
               max_files: int = 300, id_prefix: str | None = None) -> list[dict[str, Any]]:
    """Cases from a real workspace, as JSON-ready dicts (see the module doc).

    Quotas: about a quarter ``repeat`` (overlap >= 0.6), a sixth ``norepeat``
    (overlap <= 0.1, prose first), the rest ``ordinary`` (random code lines whose
    overlap is in between). A stratum that runs short is filled from the others;
    fewer than ``n`` cases come back when the workspace has fewer cursors.
    """
    rng = random.Random(seed)
    root, files = workspace_python_files(workspace, n, max_files, rng)
    texts: dict[str, str] = {}
    skipped: dict[str, int] = {}  # reason -> files, for the message when nothing is left
    for path in files:
        rel = str(path.relative_to(root))
        try:
            rel.encode("utf-8")  # a name that is not UTF-8 cannot be written to the JSONL file
            texts[rel] = read_text(path, 1 << 20)
        except UnicodeEncodeError:
            skipped["file name not UTF-8"] = skipped.get("file name not UTF-8", 0) + 1
        except SkipFile as exc:
            reason = "not UTF-8 or binary" if exc.reason == "binary" else exc.reason
            skipped[reason] = skipped.get(reason, 0) + 1
    grams = {rel: _grams(text) for rel, text in texts.items()}
    counts: dict[int, int] = {}  # in how many files each gram occurs
    for g in grams.values():
        for h in g:
            counts[h] = counts.get(h, 0) + 1

    scored: list[_Candidate] = []
    for rel, text in texts.items():
        try:
            cands = _candidates_in(text, rel)
        except (RecursionError, MemoryError):  # ast.parse on a very deep expression: skip the file
            skipped["too deeply nested to parse"] = skipped.get("too deeply nested to parse", 0) + 1
            continue
        rng.shuffle(cands)
        own = grams[rel]
        for c in cands[:40]:  # bounded work per file
            target = text[c.offset:c.offset + c.cut] if c.cut else text[c.offset:c.offset + 400]
            if len(_WORD.findall(target)) < NGRAM + 4:
                continue  # too little left to write
            buffer_grams = _grams(text[:c.offset] + text[c.offset + c.cut:])
            # grams elsewhere: in the cut buffer, or in another file of the workspace
            elsewhere = buffer_grams | {h for h in _grams(target) if counts.get(h, 0) > (h in own)}
            c.overlap = round(overlap_score(target, elsewhere), 3)
            line_end = LINE_BREAK.search(text, c.offset)  # the anchor never holds a \r
            c.anchor = text[c.offset:line_end.start() if line_end else len(text)][:60]
            if c.anchor.strip():
                scored.append(c)
    if not scored:
        why = "; ".join(f"{count} skipped: {reason}" for reason, count in sorted(skipped.items()))
        raise BenchCaseError(f"workspace {root}: no cursor inside a function body"
                             + (f" ({len(texts)} files read; {why})" if skipped else ""))

    code = [c for c in scored if not c.prose]
    repeat = [c for c in code if c.overlap >= REPEAT_MIN]
    norepeat = sorted((c for c in scored if c.overlap <= NOREPEAT_MAX),
                      key=lambda c: (not c.prose, c.overlap, rng.random()))
    ordinary = [c for c in code if NOREPEAT_MAX < c.overlap < REPEAT_MIN]
    rng.shuffle(repeat)
    rng.shuffle(ordinary)
    want_repeat, want_norepeat = round(n / 4), max(1, round(n / 6)) if n >= 3 else 0
    picked: list[tuple[str, _Candidate]] = []
    picked += [("repeat", c) for c in _spread(repeat, want_repeat)]
    picked += [("norepeat", c) for c in _spread(norepeat, want_norepeat)]
    used = {(c.file, c.offset) for _, c in picked}
    picked += [("ordinary", c) for c in _spread([c for c in ordinary if (c.file, c.offset) not in used],
                                                n - len(picked))]
    # a stratum that ran short: fill up with what is left, each under its true kind
    used = {(c.file, c.offset) for _, c in picked}
    left = [c for c in repeat + norepeat if (c.file, c.offset) not in used]
    picked += [("repeat" if c.overlap >= REPEAT_MIN else "norepeat", c) for c in _spread(left, n - len(picked))]

    ref, prefix = case_id_prefix(root)
    prefix = id_prefix or prefix
    cases = []
    for i, (kind, c) in enumerate(sorted(picked, key=lambda kc: (KINDS.index(kc[0]), kc[1].file, kc[1].offset))):
        cases.append({"id": f"{prefix}-{kind}-{i:02d}", "workspace": ref, "file": c.file, "offset": c.offset,
                      "max_tokens": max_tokens, "mode": "complete", "kind": kind, "cut": c.cut,
                      "anchor": c.anchor, "overlap": c.overlap})
    return cases


def _spread(pool: list[_Candidate], k: int) -> list[_Candidate]:
    """Up to ``k`` candidates, at most a few per file so that one file does not dominate."""
    out: list[_Candidate] = []
    per_file: dict[str, int] = {}
    for cap in (1, 2, 4, 1 << 30):
        for c in pool:
            if len(out) >= k:
                return out
            if c in out or per_file.get(c.file, 0) >= cap:
                continue
            out.append(c)
            per_file[c.file] = per_file.get(c.file, 0) + 1
    return out


def dump_cases(cases: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
