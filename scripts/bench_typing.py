"""The typing replay: standard-library functions written again, keystroke by keystroke.

    .venv/bin/python scripts/bench_typing.py [--modules json,email,asyncio] [--functions 3]
        [--lines 6] [--runtime auto|torch|llamacpp] [--seed 0] [--sample 12] [--out run.json]

A seeded user (daemon/bench/typing_replay.py, docs/design/typing-replay.md) types the body of
each chosen function back into its file, accepts matching suggestions with Tab, and pauses at
line ends. The same keystrokes go, one configuration after another in this one process, to:

- ngramd: speculation, the answer cache (typing through a suggestion costs no pass) and the
  next suggestion decoded in idle time, with the index of the function's folder;
- baseline: the same engine without speculation, answer cache or prefetch, with KV prefix
  reuse (what a llama.cpp server's prompt cache gives an editor);
- llamacpp_plain: llama-cpp-python's own ``Llama`` on the same GGUF, greedy, with its prompt
  cache (daemon/bench/llamacpp_typing.py), where llama.cpp is installed: the peer an editor
  would otherwise run.

It prints one JSON object: per configuration and file, latency from keystroke to suggestion
p50/p95/p99, requests superseded, forward passes per keystroke, the share of answers with no
pass, characters accepted against typed, and whether a seeded sample of the shown answers is
identical to a cold plain request at the same place.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Function:
    path: Path
    text: str
    body_start: int  # offset of the first body line's start
    body_end: int  # offset just after the function's last line


def functions_in(path: Path, min_lines: int, max_lines: int) -> list[Function]:
    """Functions (methods too) with ``min_lines`` to ``max_lines`` non-blank body lines."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    if "\r" in text:
        return []
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
            continue
        first, last = node.body[0].lineno - 1, node.end_lineno - 1  # 0-based lines
        if first <= node.lineno - 1 or last + 1 >= len(starts):
            continue  # a one-line def, or a function ending the file without a newline
        lines = sum(1 for i in range(first, last + 1) if text[starts[i]:starts[i + 1]].strip())
        if min_lines <= lines <= max_lines:
            found.append(Function(path, text, starts[first], starts[last + 1]))
    return found


def choose(modules: list[str], n: int, min_lines: int, max_lines: int, seed: int) -> list[Function]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    rng = random.Random(seed)
    pools = [[f for p in sorted((stdlib / m).glob("*.py")) for f in functions_in(p, min_lines, max_lines)]
             for m in modules]
    chosen: list[Function] = []
    for i in range(n):  # round-robin over the modules, a seeded draw within each
        left = [f for f in pools[i % len(pools)] if f not in chosen]
        if left:
            chosen.append(rng.choice(left))
    return chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", default="json,email,asyncio", help="standard library packages (folders)")
    ap.add_argument("--functions", type=int, default=3)
    ap.add_argument("--lines", type=int, default=6, help="most body lines of a chosen function (at least 3)")
    ap.add_argument("--runtime", choices=("auto", "torch", "llamacpp"), default="auto")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=12, help="shown answers per configuration re-run cold")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    from ngramd.daemon.runtime.huge_pages import reexec_with_huge_pages

    reexec_with_huge_pages()  # the model in 2 MB pages, as `ngramd serve` and `ngramd bench` hold it

    from ngramd.daemon.bench.llamacpp_peer import LlamaCppPeers
    from ngramd.daemon.bench.llamacpp_typing import LlamaPeerCompleter
    from ngramd.daemon.bench.typing_engines import CompleterEngine
    from ngramd.daemon.bench.typing_replay import UserModel, replay, summarize
    from ngramd.daemon.engine.completer import Completer
    from ngramd.daemon.engine.loop import EngineConfig
    from ngramd.daemon.protocol.requests import CompletionRequest
    from ngramd.daemon.runtime.loading import load_runtime
    from ngramd.index.store import IndexConfig, NgramIndex

    functions = choose(args.modules.split(","), args.functions, 3, args.lines, args.seed)
    runtime = load_runtime(None, "cpu", args.runtime)
    runtimes = {runtime.kind: runtime}
    if runtime.kind == "torch":
        try:
            runtimes["llamacpp"] = load_runtime(None, "cpu", "llamacpp")
        except Exception as exc:  # llama.cpp not built here: that configuration is left out, said why
            print(f"bench_typing: no llama.cpp configuration: {exc}", file=sys.stderr)
    # llama.cpp's own Llama object on the same GGUF, with its prompt cache (daemon/bench/llamacpp_typing.py)
    peer = (LlamaPeerCompleter(runtimes["llamacpp"], LlamaCppPeers(runtimes["llamacpp"]).llm("llamacpp_plain"))
            if "llamacpp" in runtimes else None)
    user = UserModel()
    indexes: dict[Path, NgramIndex] = {}

    def index_of(fn: Function) -> NgramIndex:
        folder = fn.path.parent
        if folder not in indexes:
            indexes[folder] = NgramIndex(runtime.tokenize_batch, IndexConfig())
            indexes[folder].index_workspace(str(folder))
        return indexes[folder]

    def configurations(fn: Function) -> list[CompleterEngine]:
        index = index_of(fn)
        index.remove_file(str(fn.path))  # the buffer being typed replaces the file on disk
        # one document's KV cache each: a llama.cpp runtime has a few sequences for all its completers
        out = [CompleterEngine("ngramd", Completer(runtime, index, EngineConfig(max_caches=1)), True, True,
                               args.max_tokens),
               CompleterEngine("baseline", Completer(runtime, None, EngineConfig(answer_cache=False, add_history=False,
                                                                               max_caches=1)),
                               False, False, args.max_tokens)]
        if peer is not None:
            out.append(CompleterEngine("llamacpp_plain", peer, False, False, args.max_tokens))
        return out

    for rt in runtimes.values():  # one-time costs (calibration, first allocations) before any measurement
        warm = "def f(x):\n    return x\n\n\ndef g(y):\n    "
        warming = Completer(rt, None, EngineConfig(max_caches=1))
        warming.complete(CompletionRequest("untitled:warm", warm, len(warm), 8))
        warming.pool.clear()  # its llama.cpp sequence back
    if peer is not None:
        peer.complete(CompletionRequest("untitled:warm", warm, len(warm), 8, speculate=False))

    rng = random.Random(args.seed)
    per_config: dict[str, list] = {}
    files = []
    for n, fn in enumerate(functions):
        name = f"{fn.path.relative_to(Path(sysconfig.get_paths()['stdlib']))}:{fn.text.count(chr(10), 0, fn.body_start)}"
        files.append(name)
        for engine in configurations(fn):
            result = replay(engine, fn.path.as_uri(), fn.text, fn.body_start, fn.body_end, user, seed=args.seed + n)
            engine.completer.pool.clear()  # its llama.cpp sequence back for the next configuration
            result.file = name
            per_config.setdefault(engine.name, []).append(result)
            s = summarize([result])
            print(f"[{n + 1}/{len(functions)}] {name} {engine.name}: p50 {s['latency_ms']['p50']} ms, "
                  f"p95 {s['latency_ms']['p95']} ms, {s['passes_per_keystroke']:.2f} passes/key, "
                  f"zero-pass {s['zero_pass_share']:.0%}, accepted {s['accepted_chars']} of "
                  f"{s['accepted_chars'] + s['typed_chars']} chars", file=sys.stderr, flush=True)
        index_of(fn).index_file(str(fn.path))

    # a seeded sample of each configuration's shown answers, re-run cold with plain decoding
    cold = {kind: Completer(rt, None, EngineConfig(answer_cache=False, add_history=False, reuse_kv=False,
                                                   max_caches=1))
            for kind, rt in runtimes.items()}
    report: dict = {"runtime": runtime.kind, "files": files, "user": user.__dict__, "configurations": {}}
    for name, results in per_config.items():
        kind = "llamacpp" if name == "llamacpp_plain" else runtime.kind
        shown = [r for res in results for r in res.requests if r.ready_ms is not None]
        sample = rng.sample(shown, min(args.sample, len(shown)))
        same = sum(cold[kind].complete(CompletionRequest("file:///cold.py", r.text_before, r.offset, args.max_tokens,
                                                          speculate=False)).text == r.answer for r in sample)
        report["configurations"][name] = {
            "total": summarize(results) | {"identical_to_cold": f"{same}/{len(sample)}"},
            "per_file": {res.file: summarize([res]) for res in results},
        }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if all(c["total"]["identical_to_cold"].split("/")[0] == c["total"]["identical_to_cold"].split("/")[1]
                    for c in report["configurations"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
