"""``ngramd complete FILE --line L --col C``: one completion, in-process.

Loads the model, indexes the file itself (and ``--workspace`` folders when the
index package is available), completes at the position and prints the text and
its statistics, or one JSON object (``CompletionResult.to_dict()`` plus the
model and the position) with ``--json``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from daemon.requests import CompletionRequest, SamplingParams


class UsageError(ValueError):
    pass


def line_col_to_offset(text: str, line: int, col: int) -> int:
    """Char offset of 0-based (line, col); col counts characters. Raises UsageError when out of range."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        raise UsageError(f"--line {line} is out of range: the file has {len(lines)} lines (0-based)")
    if not 0 <= col <= len(lines[line]):
        raise UsageError(f"--col {col} is out of range: line {line} has {len(lines[line])} characters")
    return sum(len(x) + 1 for x in lines[:line]) + col


def _read(path: Path) -> str:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    data = path.read_bytes()
    if not data:
        raise UsageError(f"{path} is empty: there is no text to complete from")
    if b"\0" in data[:8192]:
        raise UsageError(f"{path} looks binary")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text: {exc}") from exc


def _make_index(runtime: Any, workspaces: list[str]) -> Any | None:
    try:
        from index.store import IndexConfig, NgramIndex
    except ImportError:
        logging.getLogger("ngramd").info("index package not available: drafting from the prompt only")
        return None
    index = NgramIndex(runtime.tokenize_batch, IndexConfig())
    for root in workspaces:
        counts = index.index_workspace(root)
        print(f"ngramd: indexed {root}: {counts}", file=sys.stderr)
    return index


def run(args: Any) -> int:
    from daemon.model import ModelLoadError

    try:
        path = Path(args.file)
        text = _read(path)
        offset = line_col_to_offset(text, args.line, args.col)
        if args.max_tokens < 1:
            raise UsageError("--max-tokens must be at least 1")
        for ws in args.workspace:
            if not Path(ws).is_dir():
                raise UsageError(f"--workspace {ws}: not a directory")
        from daemon.completer import Completer
        from daemon.model import load_runtime

        runtime = load_runtime(args.model, args.device)
    except (UsageError, ModelLoadError) as exc:
        print(f"ngramd complete: error: {exc}", file=sys.stderr)
        return 2
    index = _make_index(runtime, list(args.workspace))
    completer = Completer(runtime, index)
    req = CompletionRequest(
        uri=path.resolve().as_uri(), text=text, offset=offset, max_tokens=args.max_tokens,
        multiline=not getattr(args, "single_line", False),
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed),
        speculate=not args.no_speculation)
    t0 = time.perf_counter()
    try:
        result = completer.complete(req)
    except ValueError as exc:
        print(f"ngramd complete: error: {exc}", file=sys.stderr)
        return 2
    wall = (time.perf_counter() - t0) * 1000
    if args.json:
        out = result.to_dict()
        out.update(model=runtime.name, device=str(runtime.device), file=str(path), line=args.line,
                   col=args.col, offset=offset, speculate=req.speculate)
        print(json.dumps(out))
        return 0
    s = result.stats
    print(result.text)
    print(f"--- {s.generated} tokens in {wall:.0f} ms ({s.forward_passes} passes, "
          f"{s.tokens_per_pass:.2f} tokens/pass; drafted {s.drafted}, accepted {s.accepted}; "
          f"first token {s.first_token_ms:.0f} ms; prefill {s.prefill_tokens}, reused {s.reused_tokens}; "
          f"stop: {result.stop_reason}; {'speculative' if req.speculate else 'plain'}; {runtime.name} "
          f"on {runtime.device})", file=sys.stderr)
    return 0
