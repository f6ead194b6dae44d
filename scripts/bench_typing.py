"""Completion latency while typing: a function written line by line, as an editor asks.

    .venv/bin/python scripts/bench_typing.py [--modules json,email,asyncio] [--functions 6]
        [--lines 10] [--max-tokens 64] [--seed 0] [--rows rows.jsonl]

``ngramd bench`` measures every case cold (no KV cache kept between runs), as a first
request on a file would be. In an editor the daemon answers request after request on
the same document, and its KV cache of the common prefix is reused, so a request
prefills only what was typed since the previous one. This script measures that regime.

Method: functions of at least ``--lines`` body lines are drawn (seeded) from the
standard library modules. For each, the body is removed from the file and "typed"
back one line at a time; before each line, after its indentation (where an editor's
inline completion asks), one completion is requested with the daemon's defaults
(``maxTokens`` 64, multi-line). Two engines share the loaded model:

- ngramd: speculation, the index of the module's folder (the file's on-disk copy
  replaced by the buffer being typed, given to the index before each request and
  untimed, as the daemon's keystroke updates are), history of its own answers;
- plain: the same engine with ``speculate=False`` and no index.

Each keeps its own KV caches (reuse on, as in the daemon); the two alternate which
goes first at each request. Every answer is checked token-identical to plain.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Function:
    path: Path
    text: str
    body_start: int  # offset of the first body line's start
    body_end: int  # offset just after the function's last line
    line_starts: list[int]  # offsets of the body lines to type, in order


def line_offsets(text: str) -> list[int]:
    """Offset of each line's start (lines split on "\\n" only)."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def functions_in(path: Path, min_lines: int) -> list[Function]:
    """Functions (methods too) whose body has at least ``min_lines`` non-blank lines."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    if "\r" in text:
        return []
    starts = line_offsets(text)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
            continue
        first, last = node.body[0].lineno - 1, node.end_lineno - 1  # 0-based lines
        if first <= node.lineno - 1 or last + 1 >= len(starts):
            continue  # a one-line def, or a function ending the file without a newline
        body = [starts[i] for i in range(first, last + 1) if text[starts[i]:starts[i + 1]].strip()]
        if len(body) >= min_lines:
            found.append(Function(path, text, starts[first], starts[last + 1], body))
    return found


def typing_steps(fn: Function, max_lines: int) -> list[tuple[str, int]]:
    """(buffer, cursor offset) before each of the first ``max_lines`` body lines is typed."""
    tail = fn.text[fn.body_end:]
    steps = []
    for start in fn.line_starts[:max_lines]:
        line = fn.text[start:fn.text.index("\n", start)]
        typed = fn.text[fn.body_start:start] + line[: len(line) - len(line.lstrip())]
        steps.append((fn.text[:fn.body_start] + typed + tail, fn.body_start + len(typed)))
    return steps


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", default="json,email,asyncio", help="standard library packages (folders)")
    ap.add_argument("--functions", type=int, default=6)
    ap.add_argument("--lines", type=int, default=10, help="body lines typed per function")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", help="write one JSON line per request here")
    args = ap.parse_args()

    from daemon.engine.completer import Completer
    from daemon.engine.loop import EngineConfig
    from daemon.runtime.model import load_runtime
    from daemon.protocol.requests import CompletionRequest
    from index.store import IndexConfig, NgramIndex

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    rng = random.Random(args.seed)
    runtime = load_runtime(None, device="cpu")
    plain = Completer(runtime, None, EngineConfig(add_history=False))
    rows = []
    fns_by_module = {}
    for module in args.modules.split(","):
        folder = stdlib / module
        fns = [f for p in sorted(folder.glob("*.py")) for f in functions_in(p, args.lines)]
        fns_by_module[module] = (folder, fns)
    chosen = []
    for i in range(args.functions):  # round-robin over the modules, a seeded draw within each
        module = list(fns_by_module)[i % len(fns_by_module)]
        folder, fns = fns_by_module[module]
        left = [f for f in fns if f not in [c[2] for c in chosen]]
        if left:
            chosen.append((module, folder, rng.choice(left)))

    # one-time costs (the verify-cost calibration, first-call allocations) before any measurement
    warm_text = "def f(x):\n    return x\n\n\ndef g(y):\n    "
    for completer, speculate in ((plain, False), (Completer(runtime, None, EngineConfig()), True)):
        completer.complete(CompletionRequest(uri="untitled:warm-up", text=warm_text, offset=len(warm_text),
                                             max_tokens=8, speculate=speculate))
    indexes = {}
    t_start = time.perf_counter()
    for n_fn, (module, folder, fn) in enumerate(chosen):
        if folder not in indexes:
            index = NgramIndex(runtime.tokenize_batch, IndexConfig())
            index.index_workspace(str(folder))
            # the daemon feeds the index keystroke by keystroke, outside the request: here the
            # buffer is given to the index before each request, untimed (sync_buffers=False)
            indexes[folder] = (index, Completer(runtime, index, EngineConfig(sync_buffers=False)))
        index, spec = indexes[folder]
        index.remove_file(str(fn.path))  # the buffer being typed replaces the file on disk
        uri = fn.path.as_uri()
        name = f"{fn.path.relative_to(stdlib)}:{fn.text.count(chr(10), 0, fn.body_start)}"
        for step, (buffer, offset) in enumerate(typing_steps(fn, args.lines)):
            index.open_buffer(uri, buffer)
            results = {}
            order = ("spec", "plain") if step % 2 == 0 else ("plain", "spec")
            for which in order:
                completer = spec if which == "spec" else plain
                req = CompletionRequest(uri=uri, text=buffer, offset=offset, max_tokens=args.max_tokens,
                                        speculate=which == "spec")
                results[which] = completer.complete(req)
            s, p = results["spec"], results["plain"]
            row = {"function": name, "step": step, "tokens": len(p.token_ids),
                   "identical": s.token_ids == p.token_ids,
                   "ms": round(s.stats.ms, 1), "plain_ms": round(p.stats.ms, 1),
                   "first_ms": round(s.stats.first_token_ms, 1), "plain_first_ms": round(p.stats.first_token_ms, 1),
                   "prefill": s.stats.prefill_tokens, "reused": s.stats.reused_tokens,
                   "passes": s.stats.forward_passes, "plain_passes": p.stats.forward_passes,
                   "accepted": s.stats.accepted, "drafted": s.stats.drafted}
            rows.append(row)
            print(f"[{n_fn + 1}/{len(chosen)}] {name} step {step}: {row['tokens']} tok, "
                  f"{row['ms']:.0f} vs {row['plain_ms']:.0f} ms, prefill {row['prefill']} "
                  f"(reused {row['reused']}), {'same' if row['identical'] else 'DIFFERENT'}",
                  file=sys.stderr, flush=True)
        spec.drop_cache(uri)
        plain.drop_cache(uri)
        index.close_buffer(uri)
        index.index_file(str(fn.path))

    if args.rows:
        Path(args.rows).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    warm = [r for r in rows if r["step"] > 0]
    print(f"{len(chosen)} functions, {len(rows)} requests, {time.perf_counter() - t_start:.0f} s; "
          f"identical to plain: {sum(r['identical'] for r in rows)}/{len(rows)}")
    print("| requests | ngramd median | plain median | median ratio | total ratio | "
          "first token (ngramd / plain) | prefilled tokens median | passes (plain / ngramd) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, group in (("all", rows), ("after the first of each function", warm)):
        if not group:
            continue
        ratio = median([r["plain_ms"] / r["ms"] for r in group])
        total = sum(r["plain_ms"] for r in group) / sum(r["ms"] for r in group)
        passes = sum(r["plain_passes"] for r in group) / max(1, sum(r["passes"] for r in group))
        print(f"| {label} ({len(group)}) | {median([r['ms'] for r in group]):,.0f} ms "
              f"| {median([r['plain_ms'] for r in group]):,.0f} ms | {ratio:.2f}x | {total:.2f}x "
              f"| {median([r['first_ms'] for r in group]):,.0f} / {median([r['plain_first_ms'] for r in group]):,.0f} ms "
              f"| {median([r['prefill'] for r in group]):,.0f} | {passes:.2f}x |")
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
