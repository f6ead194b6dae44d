"""``ngramd bench``: speculation vs plain decoding vs transformers' prompt lookup (torch) or
llama.cpp's own plain and prompt-lookup decoding (``--runtime llamacpp``).

    ngramd bench --cases bench/cases/stdlib.jsonl [--repeat 3] [--json] [--plot out.png] [--no-hf]
                 [--prepared [--typed-instruction]] [--rows rows.jsonl] [--runtime auto|torch|llamacpp]
    ngramd bench --make-cases WORKSPACE [--mode complete|edit] [--n 20] [--seed S] [--out cases.jsonl]

The case format is in ``daemon/bench/cases.py``, how each case is run in
``daemon/bench/runner.py``, the report's figures in ``daemon/bench/report.py``.

Exit status: 0 when every case ran and every speculative output was
token-identical to plain decoding; 1 when any case was not identical or failed
(the report still lists every case: a difference is shown, never hidden); 2 for
bad arguments or a malformed cases file. A case whose mode the engine does not
support yet ("unsupported") does not change the status.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ngramd.daemon.bench.cases import BenchCaseError, dump_cases, load_cases, make_cases
from ngramd.daemon.bench.llamacpp_peer import PEER_BATCH


# Options of one use of `ngramd bench` each: given to the other, they would be silently ignored.
MAKE_OPTIONS = ("out", "n", "seed", "mode")
RUN_OPTIONS = ("repeat", "prepared_repeat", "json", "plot", "no_hf", "prepared", "typed_instruction", "rows",
               "model", "device")


def run(args: Any) -> int:
    if args.make_cases:
        if args.cases:  # one or the other: running nothing of what --cases names would look like success
            print("ngramd bench: --make-cases writes cases, --cases runs them: give one of the two", file=sys.stderr)
            return 2
        return _refuse(args, RUN_OPTIONS, "--cases") or _make(args)
    if not args.cases:
        print("ngramd bench: give --cases CASES.jsonl (or --make-cases WORKSPACE)", file=sys.stderr)
        return 2
    if _refuse(args, MAKE_OPTIONS, "--make-cases"):
        return 2
    if args.repeat is None:
        args.repeat = 1
    if args.device is None:
        args.device = "auto"
    if args.repeat < 1:
        print("ngramd bench: --repeat must be >= 1", file=sys.stderr)
        return 2
    if args.prepared_repeat is not None and not args.prepared:
        print("ngramd bench: --prepared-repeat says how often the --prepared variants run: give --prepared too",
              file=sys.stderr)
        return 2
    if args.prepared_repeat is not None and args.prepared_repeat < args.repeat:
        print(f"ngramd bench: --prepared-repeat must be at least --repeat ({args.repeat}): every round runs "
              "the prepared variants after the cold ones", file=sys.stderr)
        return 2
    if args.typed_instruction and not args.prepared:
        print("ngramd bench: --typed-instruction says how --prepared prepares an edit: give --prepared too",
              file=sys.stderr)
        return 2
    try:
        cases = load_cases(args.cases)
    except BenchCaseError as exc:
        print(f"ngramd bench: {exc}", file=sys.stderr)
        return 2
    if args.plot:  # before the run, not after half an hour of it
        from ngramd.daemon.bench.report import PlotUnavailable, check_plot_path

        try:
            check_plot_path(args.plot)
        except PlotUnavailable as exc:
            print(f"ngramd bench: {exc}", file=sys.stderr)
            return 2
    rows_problem = args.rows and _unwritable(args.rows)
    if rows_problem:  # before the model's load, not after it: the file itself is opened after that
        print(f"ngramd bench: cannot write --rows {args.rows}: {rows_problem}", file=sys.stderr)
        return 2
    from ngramd.daemon.runtime.loading import ModelLoadError

    print(f"ngramd bench: loading model {args.model or '(embedded SmolLM2-135M)'}", file=sys.stderr, flush=True)
    try:  # before --rows is opened: a bad model leaves no empty file behind
        runtime = load_runtime(args.model, args.device, getattr(args, "runtime", "auto"),
                               exact_kernels=getattr(args, "exact_kernels", False))
    except ModelLoadError as exc:
        print(f"ngramd bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        rows_file = open(args.rows, "a", encoding="utf-8") if args.rows else None
    except OSError as exc:
        print(f"ngramd bench: cannot write --rows {args.rows}: {exc}", file=sys.stderr)
        return 2

    def save_row(row: dict[str, Any]) -> None:
        nonlocal rows_file
        if rows_file is None:
            return
        try:
            rows_file.write(json.dumps(row) + "\n")
            rows_file.flush()
        except OSError as exc:  # a full disk must not cost the run and its report: warn once, go on
            print(f"ngramd bench: cannot write --rows {args.rows}: {exc}; no more rows are saved",
                  file=sys.stderr)
            _close_quietly(rows_file)
            rows_file = None

    try:
        report = bench(cases, runtime=runtime, repeat=args.repeat, prepared_repeat=args.prepared_repeat,
                       hf=not args.no_hf,
                       cases_file=args.cases, progress=True, on_row=save_row, prepared=args.prepared,
                       typed_instruction=args.typed_instruction)
    finally:
        if rows_file is not None:
            _close_quietly(rows_file)
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        from ngramd.daemon.bench.report import render_text

        render_text(report, sys.stdout)
    if args.plot:
        from ngramd.daemon.bench.report import PlotUnavailable, plot

        try:
            plot(report, args.plot)
            print(f"ngramd bench: plot written to {args.plot}", file=sys.stderr)
        except (PlotUnavailable, OSError, ValueError) as exc:
            print(f"ngramd bench: cannot write the plot: {exc}", file=sys.stderr)
            return 2
    summary = report["summary"]
    return 1 if summary["not_identical"] or summary["errors"] else 0


def load_runtime(model: str | None, device: str, runtime: str = "auto", exact_kernels: bool = False) -> Any:
    """The model the run measures (daemon/runtime/loading.py ``load_runtime``; a seam for the CLI's tests)."""
    from ngramd.daemon.runtime.loading import load_runtime as load

    return load(model, device, runtime, exact_kernels=exact_kernels)


def _unwritable(path: str) -> str:
    """Why appending to ``path`` would fail, as far as known without creating it; "" if it would not."""
    if os.path.isdir(path):
        return "it is a folder"
    if os.path.exists(path):
        return "" if os.access(path, os.W_OK) else "the file is not writable"
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return f"no folder {folder}"
    return "" if os.access(folder, os.W_OK) else f"folder {folder} is not writable"


def _refuse(args: Any, options: tuple[str, ...], belongs_to: str) -> int:
    """2 (with a message) when one of ``options`` was given, which only ``belongs_to`` reads; else 0."""
    given = [name for name in options if getattr(args, name, None) not in (None, False)]
    if not given:
        return 0
    flags = ", ".join("--" + name.replace("_", "-") for name in given)
    print(f"ngramd bench: {flags} only apply with {belongs_to}", file=sys.stderr)
    return 2


def _make(args: Any) -> int:
    n = 20 if args.n is None else args.n
    seed = 0 if args.seed is None else args.seed
    try:
        if args.mode == "edit":
            from ngramd.daemon.bench.edit_cases import make_edit_cases

            cases = make_edit_cases(args.make_cases, n=n, seed=seed)
        else:
            cases = make_cases(args.make_cases, n=n, seed=seed)
    except BenchCaseError as exc:
        print(f"ngramd bench: {exc}", file=sys.stderr)
        return 2
    text = dump_cases(cases)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            print(f"ngramd bench: cannot write --out {args.out}: {exc}", file=sys.stderr)
            return 2
        print(f"ngramd bench: wrote {len(cases)} cases to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _close_quietly(file: Any) -> None:
    try:
        file.close()
    except OSError:
        pass  # every row was flushed already, or its write error was reported


def bench(cases: list, model: str | None = None, device: str = "auto", repeat: int = 1,
          prepared_repeat: int | None = None, hf: bool = True,
          cases_file: str | None = None, progress: bool = False, runtime: Any = None,
          engine_config: Any = None, index_config: Any = None,
          on_row: Callable[[dict[str, Any]], None] | None = None, prepared: bool = False,
          typed_instruction: bool = False) -> dict[str, Any]:
    """Run every case; returns the report object (``meta``, ``cases``, ``summary``).

    ``on_row(row)`` is called with each case's row as soon as it is measured; ``prepared``: also
    the prepared variants (daemon/bench/runner.py), an edit's prepared through its instruction
    with ``typed_instruction``, ``prepared_repeat`` times a case (default ``repeat``)."""
    if prepared_repeat is not None and prepared_repeat < repeat:  # before the model loads, not per case
        raise ValueError(f"prepared_repeat ({prepared_repeat}) must be at least repeat ({repeat})")
    import torch
    import transformers

    from ngramd.daemon.bench.report import build_report
    from ngramd.daemon.bench.runner import BenchRunner

    def log(msg: str) -> None:
        if progress:
            print(f"ngramd bench: {msg}", file=sys.stderr, flush=True)

    if runtime is None:
        from ngramd.daemon.runtime.loading import load_runtime

        log(f"loading model {model or '(embedded SmolLM2-135M)'}")
        runtime = load_runtime(model, device)
    runner = BenchRunner(runtime, engine_config=engine_config, index_config=index_config, hf=hf, log=log,
                         prepared=prepared, typed_instruction=typed_instruction)
    rows: list[dict[str, Any]] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cases), file=sys.stderr, desc="bench", unit="case")
    t0 = time.perf_counter()
    for case in cases:
        if bar is not None:
            bar.set_postfix_str(case.id)
        try:
            rows.append(runner.run_case(case, repeat=repeat, prepared_repeat=prepared_repeat))
        except Exception as exc:  # one broken case must not lose the others' figures
            rows.append({"id": case.id, "kind": case.kind, "mode": case.mode, "status": "error",
                         "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc(limit=6)})
            log(f"case {case.id} failed: {type(exc).__name__}: {exc}")
        if on_row is not None:
            on_row(rows[-1])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    runner.close()
    meta = {
        "model": getattr(runtime, "name", str(model)),
        "runtime": getattr(runtime, "kind", "torch"),
        "device": str(getattr(runtime, "device", device)),
        "dtype": str(getattr(runtime, "dtype", "")).replace("torch.", ""),
        "repeat": repeat,
        "prepared_repeat": (prepared_repeat or repeat) if prepared else None,
        "hf_baseline": runner.hf,
        "hf_skipped": runner.hf_skipped,  # why not, where hf was asked for
        "llamacpp_baselines": runner.peers is not None,
        "prepared": prepared,
        "typed_instruction": typed_instruction,
        "cases_file": cases_file,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "runtime_threads": getattr(runtime, "threads", None),
        "llama_cpp": _llama_cpp_version() if runner.peers is not None else None,
        "exactness": _exactness(runtime),
        # --exact-kernels turns ggml's tiled product off for the whole process: the peers' too
        "llama_cpp_kernels": getattr(runtime, "kernels", None),
        "llama_cpp_exact_gemm": getattr(runtime, "exact_gemm", None),
        "llama_cpp_exact_f16": getattr(runtime, "exact_f16", None),
        "llama_cpp_batch": getattr(runtime, "batch", None),  # ngramd's tokens a llama_decode call
        "llama_cpp_peer_batch": PEER_BATCH if runner.peers is not None else None,  # the baselines'
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "seconds": round(time.perf_counter() - t0, 1),
        "index": runner.index_stats,
        "engine_config": _config_dict(runner.engine_config),  # as run: with the runner's fairness overrides
    }
    return build_report(rows, meta)


def _llama_cpp_version() -> str | None:
    try:
        import llama_cpp

        return llama_cpp.__version__
    except ImportError:
        return None


def _exactness(runtime: Any) -> Any:
    exactness = getattr(runtime, "exactness", None)
    return exactness.to_dict() if hasattr(exactness, "to_dict") else None


def _config_dict(cfg: Any) -> Any:
    if cfg is None:
        return None
    try:
        from dataclasses import asdict

        return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
                for k, v in asdict(cfg).items()}
    except TypeError:
        return str(cfg)
