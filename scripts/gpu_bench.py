"""GPU measurements that need no download: the verify-cost curve and projected speedups.

What it measures (run by scripts/gpu_bench.sh on a GPU machine):

1. The *verify-cost curve*: ms per forward pass over n new tokens (n = 1..64)
   after ctx cached tokens (ctx = 128..8k: the traces' passes are at 118-1267), for random-weight
   fp32 models (as the daemon runs them) with the
   shapes of real code models (Qwen2.5-Coder 1.5B and 7B). The time of a pass
   does not depend on the weights' values; they are random normal, never zeros.
2. *Exactness* of the same models: the logits of one k-token pass against k one-token
   passes over the same tokens, through the daemon's own forward (``ModelRuntime.forward``,
   its in-place KV cache (the fast paths are CPU-only), scripts/measure_pass_drift.py's ``drift_at``): the
   largest absolute difference, the smallest top-2 gap, and whether the argmax agrees at
   every position. Random weights give far flatter logits than a trained model (tiny top-2
   gaps), so the difference is the figure to read; a disagreement here is no verdict.
3. *Projections*: the speedup over plain decoding that this curve implies for
   acceptance traces recorded on the CPU with the real (small) model
   (bench/traces_cpu.json, written from ``ngramd bench --json`` with
   ``--write-traces``). A trace lists, per speculative forward pass, the context
   length, the tokens verified (n = 1 pending + drafted) and the tokens committed.
   Projected plain time = prefill + generated x cost(1); projected ngramd time =
   prefill + sum of cost(n) over the trace's passes. These are projections, not
   measurements: the drafts were sized by the CPU's cost curve and accepted by a
   135M model; a GPU's flatter curve would let the engine draft more.

    python scripts/gpu_bench.py [--dry-run] [--traces bench/traces_cpu.json] [--out results.json]
    python scripts/gpu_bench.py --write-traces bench.json [--traces bench/traces_cpu.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

# Shapes of Qwen2.5-Coder-1.5B and -7B (their config.json), as Qwen2Config kwargs.
MODELS = {
    "qwen2.5-coder-1.5b-shape": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                     num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                     tie_word_embeddings=True, rope_theta=1e6, max_position_embeddings=32768),
    "qwen2.5-coder-7b-shape": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                   num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                                   tie_word_embeddings=False, rope_theta=1e6, max_position_embeddings=32768),
}
DRY_MODELS = {"tiny-dry-run": dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                   max_position_embeddings=4096)}
CTX = (128, 256, 512, 1024, 2048, 4096, 8192)
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
DRY_CTX, DRY_SIZES = (64, 256), (1, 4, 16)
# the exactness check: (k tokens per pass, context tokens before them, random sequences)
EXACTNESS, DRY_EXACTNESS = (16, 512, 4), (8, 48, 2)
# errors of a transformers that does not accept the in-place cache (an old Cache API); a
# RuntimeError (a CUDA out-of-memory error is one) is a failure of the measurement instead
UNSUPPORTED_CACHE_ERRORS = (ImportError, TypeError, AttributeError, NotImplementedError)


# --------------------------------------------------------------------------- model and timing


def build_model(shape: dict[str, Any], device: str, dtype: Any) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)  # layer norms at their usual value: keeps activations finite
            else:
                p.normal_(0.0, 0.02, generator=gen)  # random data, never zeros
    model.eval()
    return model


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def verify_cost_curve(model: Any, device: str, ctxs: tuple[int, ...], sizes: tuple[int, ...],
                      repeats: int) -> dict[str, Any]:
    """{"cache", "cache_note", "prefill_ms": {ctx: ms}, "ms": {ctx: {n: ms}}}: minimum over ``repeats`` after a warm-up.

    The cache is the daemon's in-place one (daemon/runtime/kv_cache.py) when this transformers
    accepts it, else transformers' ``DynamicCache``, decided at the first prefill and kept
    for the whole curve (``cache`` says which, ``cache_note`` why not in-place). Sizes are
    timed round-robin and the minimum kept, as ``CostModel.calibrate`` does.
    """
    import torch

    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)
    out: dict[str, Any] = {"cache": None, "cache_note": None, "prefill_ms": {}, "ms": {}}
    for ctx in ctxs:
        ids = torch.randint(0, vocab, (1, ctx + max(sizes)), generator=gen).to(device)
        with torch.inference_mode():
            times: list[float] = []  # prefill twice: the first warms up
            if out["cache"] is None:
                _, out["cache"], out["cache_note"] = _first_prefill(model, ids[:, :ctx], device, times)
            else:
                _prefilled(model, ids[:, :ctx], device, times, out["cache"])
            cache = _prefilled(model, ids[:, :ctx], device, times, out["cache"])
            out["prefill_ms"][ctx] = round(times[-1], 3)
            per_size: dict[int, list[float]] = {n: [] for n in sizes}
            for _ in range(repeats + 1):  # round 0 warms up
                for n in sizes:
                    _sync(device)
                    t0 = time.perf_counter()
                    model(input_ids=ids[:, ctx:ctx + n], use_cache=True, **{_cache_kwarg(model): cache})
                    _sync(device)
                    per_size[n].append((time.perf_counter() - t0) * 1000)
                    # negative: remove that many (transformers 5.2x refuses a positive max length)
                    cache.crop(-(cache.get_seq_length() - ctx))
            out["ms"][ctx] = {n: round(min(t[1:]), 3) for n, t in per_size.items()}
    return out


def _cache_kwarg(model: Any) -> str:
    """The forward's name for the KV cache: ``cache`` in newer transformers, where
    ``past_key_values`` is deprecated (as daemon/runtime/model.py decides)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _first_prefill(model: Any, ids: Any, device: str, times: list[float]) -> tuple[Any, str, str | None]:
    """(cache, kind, note) of the curve's first prefill: the in-place cache, or ``DynamicCache``
    where this transformers does not accept it (only ``UNSUPPORTED_CACHE_ERRORS``: any other
    error, an out-of-memory one included, is the measurement's and propagates)."""
    try:
        return _prefilled(model, ids, device, times, "inplace"), "inplace", None
    except UNSUPPORTED_CACHE_ERRORS as exc:
        note = f"the in-place cache is not supported here ({type(exc).__name__}: {exc}); DynamicCache timed instead"
        print(f"gpu_bench: {note}", file=sys.stderr)
        return _prefilled(model, ids, device, times, "dynamic"), "dynamic", note


def _prefilled(model: Any, ids: Any, device: str, times: list[float], kind: str) -> Any:
    """A cache of ``kind`` ("inplace" or "dynamic") holding ``ids``; its prefill time appended to ``times``."""
    if kind == "inplace":
        from ngramd.daemon.runtime.kv_cache import InPlaceCache as make_cache
    else:
        from transformers import DynamicCache as make_cache
    cache = make_cache()
    _sync(device)
    t0 = time.perf_counter()
    model(input_ids=ids, use_cache=True, logits_to_keep=1, **{_cache_kwarg(model): cache})
    _sync(device)
    times.append((time.perf_counter() - t0) * 1000)
    return cache


# --------------------------------------------------------------------------- exactness


class _NoTokenizer:
    """What ``ModelRuntime`` asks of a tokenizer when it is only run on token ids."""

    all_special_ids: list[int] = []


def runtime_for(model: Any, device: str, name: str) -> Any:
    """The daemon's ``ModelRuntime`` around a built model (on the CPU, a --dry-run, its first
    forward installs the fast paths, changing the model's linears and attention in place: use it
    after the cost curve)."""
    import torch

    from ngramd.daemon.runtime.model import ModelRuntime

    return ModelRuntime(model=model, tokenizer=_NoTokenizer(), device=torch.device(device),
                        dtype=next(model.parameters()).dtype, name=name)


def _pass_drift() -> Any:
    """scripts/measure_pass_drift.py, beside this file: the measurement the real model gets."""
    spec = importlib.util.spec_from_file_location("measure_pass_drift",
                                                  Path(__file__).with_name("measure_pass_drift.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pass_exactness(rt: Any, k: int, ctx: int, sequences: int) -> dict[str, Any]:
    """One k-token pass against k one-token passes after ``ctx`` tokens, on ``sequences`` random
    token sequences (``drift_at`` makes the inputs on ``rt.device``)."""
    import torch

    drift_at = _pass_drift().drift_at
    gen = torch.Generator(device="cpu").manual_seed(2)
    worst, closest, agrees = 0.0, float("inf"), 0
    for _ in range(sequences):
        ids = torch.randint(0, rt.vocab_size, (ctx + k,), generator=gen).tolist()
        diff, gap, same = drift_at(rt, ids, k)
        worst, closest, agrees = max(worst, diff), min(closest, gap), agrees + same
    return {"k": k, "context": ctx, "sequences": sequences, "path": "ngramd.daemon.runtime.model.ModelRuntime.forward",
            "max_abs_logit_diff": worst, "min_top2_gap": closest, "argmax_agrees": agrees == sequences,
            "sequences_argmax_agrees": agrees}


class Cost:
    """cost(n, ctx) in ms, interpolated linearly in n and in log(ctx) over the measured grid."""

    def __init__(self, curve: dict[str, Any]):
        # JSON turns int keys into strings: normalize
        ms = {int(c): {int(n): float(v) for n, v in row.items()} for c, row in curve["ms"].items()}
        prefill = {int(c): float(v) for c, v in curve["prefill_ms"].items()}
        self.ctxs = sorted(ms)
        self.sizes = sorted(ms[self.ctxs[0]])
        self.grid = np.array([[ms[c][n] for n in self.sizes] for c in self.ctxs])
        self.prefill = np.array([prefill[c] for c in self.ctxs])

    def _at_ctx(self, values: np.ndarray, ctx: int) -> float:
        x = np.log(max(ctx, 1))
        return float(np.interp(x, np.log(self.ctxs), values))

    def __call__(self, n: int, ctx: int) -> float:
        per_ctx = np.array([np.interp(n, self.sizes, row) for row in self.grid])
        return self._at_ctx(per_ctx, ctx)

    def prefill_ms(self, ctx: int) -> float:
        return self._at_ctx(self.prefill, ctx)


# --------------------------------------------------------------------------- traces and projection


def traces_from_report(report: dict[str, Any]) -> dict[str, Any]:
    """The acceptance traces of a CPU bench report (``ngramd bench --json``)."""
    cases = []
    for row in report.get("cases", []):
        if row.get("status") != "ok" or not row.get("trace"):
            continue
        cases.append({"id": row["id"], "kind": row["kind"], "prompt_tokens": row["prompt_tokens"],
                      "generated": row["generated"], "identical": row["identical"],
                      "cpu_speedup_plain": row.get("speedup_plain"),
                      "passes": [[t["ctx"], t["n"], t["committed"]] for t in row["trace"]]})
    meta = report.get("meta", {})
    return {"about": "per speculative forward pass: [context tokens, tokens verified (1 pending + drafted), "
                     "tokens committed (-1: last pass)]; recorded on CPU by ngramd bench",
            "model": meta.get("model"), "device": meta.get("device"), "cases_file": meta.get("cases_file"),
            "cases": cases}


def project(traces: dict[str, Any], cost: Cost) -> list[dict[str, Any]]:
    """Projected speedup over plain decoding per traced case (see the module doc)."""
    rows = []
    for case in traces["cases"]:
        passes = case["passes"]
        if not passes:
            continue
        gen = case["generated"]
        ctx0 = passes[0][0]
        spec = sum(cost(n, ctx) for ctx, n, _ in passes)
        plain = sum(cost(1, ctx0 + i) for i in range(gen))
        prefill = cost.prefill_ms(ctx0)
        rows.append({"id": case["id"], "kind": case["kind"], "generated": gen, "passes": len(passes),
                     "tokens_per_pass": round(gen / len(passes), 2),
                     "projected_decode_speedup": round(plain / spec, 3) if spec else None,
                     "projected_speedup": round((prefill + plain) / (prefill + spec), 3) if spec else None,
                     "cpu_speedup_plain": case.get("cpu_speedup_plain")})
    return rows


def summarize_projection(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        group = [r for r in rows if kind == "all" or r["kind"] == kind]
        vals = [r["projected_decode_speedup"] for r in group if r["projected_decode_speedup"]]
        e2e = [r["projected_speedup"] for r in group if r["projected_speedup"]]
        if vals:
            out[kind] = {"cases": len(group), "median_decode_speedup": round(statistics.median(vals), 2),
                         "median_speedup_with_prefill": round(statistics.median(e2e), 2)}
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny model, small contexts, CPU allowed (a check)")
    ap.add_argument("--traces", default="bench/traces_cpu.json")
    ap.add_argument("--write-traces", metavar="BENCH_JSON", help="write --traces from a CPU bench report, exit")
    ap.add_argument("--out", default=None, help="write all figures as JSON here")
    ap.add_argument("--models", default=None, help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    if args.write_traces:
        report = json.loads(Path(args.write_traces).read_text())
        traces = traces_from_report(report)
        Path(args.traces).write_text(json.dumps(traces, separators=(",", ":")) + "\n")
        print(f"wrote {len(traces['cases'])} traces to {args.traces}")
        return 0

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.dry_run:
        print("gpu_bench: no CUDA device; use --dry-run for a CPU check", file=sys.stderr)
        return 2
    models = DRY_MODELS if args.dry_run else MODELS
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    ctxs, sizes = (DRY_CTX, DRY_SIZES) if args.dry_run else (CTX, SIZES)
    dtype = torch.float32  # as the daemon runs every model (daemon/runtime/model.py resolve_device: bf16 is not exact)
    from ngramd.daemon.runtime.model import exact_float32

    exact_float32()  # as the daemon sets it at load: no TF32
    repeats = 1 if args.dry_run else args.repeats
    try:
        traces = json.loads(Path(args.traces).read_text())
    except (OSError, ValueError) as exc:
        print(f"gpu_bench: no traces ({exc}); measuring the cost curve only", file=sys.stderr)
        traces = {"cases": []}

    results: dict[str, Any] = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                               "torch": torch.__version__, "dtype": str(dtype), "dry_run": args.dry_run,
                               "float32_matmul_precision": torch.get_float32_matmul_precision(),
                               "traces_model": traces.get("model"), "models": {}}
    exactness = DRY_EXACTNESS if args.dry_run else EXACTNESS
    failed = False
    for name, shape in models.items():
        entry = results["models"][name] = {}
        failed |= not measure_model(name, shape, entry, lambda: save_results(args.out, results),
                                    device=device, dtype=dtype, ctxs=ctxs, sizes=sizes, repeats=repeats,
                                    exactness=exactness, traces=traces)
        if device == "cuda":
            torch.cuda.empty_cache()
    print(render(results, ctxs, sizes))
    return 1 if failed else 0


def measure_model(name: str, shape: dict[str, Any], entry: dict[str, Any], save: Any, *, device: str,
                  dtype: Any, ctxs: tuple[int, ...], sizes: tuple[int, ...], repeats: int,
                  exactness: tuple[int, int, int], traces: dict[str, Any]) -> bool:
    """Fill ``entry`` with one model's curve, projection and exactness, calling ``save`` after
    each (a run killed later keeps them). An error is recorded in ``entry`` and on stderr,
    and the next model still runs; returns whether all went well."""
    try:
        t0 = time.perf_counter()
        model = build_model(shape, device, dtype)
        entry["params"] = sum(p.numel() for p in model.parameters())
        print(f"gpu_bench: {name}: {entry['params'] / 1e9:.2f}B parameters built in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        entry["curve"] = verify_cost_curve(model, device, ctxs, sizes, repeats)
        proj = project(traces, Cost(entry["curve"])) if traces["cases"] else []
        entry.update(projection=proj, projection_summary=summarize_projection(proj))
    except Exception as exc:
        entry["error"] = _reported(f"{name}: the cost curve", exc)
        save()
        return False
    save()
    try:
        entry["exactness"] = pass_exactness(runtime_for(model, device, name), *exactness)
    except Exception as exc:
        entry["exactness"] = {"error": _reported(f"{name}: the exactness check", exc)}
        save()
        return False
    save()
    return True


def _reported(what: str, exc: Exception) -> str:
    """``exc`` on stderr with its traceback; returns it in one line."""
    traceback.print_exc()
    message = f"{type(exc).__name__}: {exc}"
    print(f"gpu_bench: {what} failed: {message}", file=sys.stderr, flush=True)
    return message


def save_results(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` to ``path`` whole (a temporary file renamed: a kill mid-write leaves the last one)."""
    if not path:
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, path)


def _device_kind(device: str) -> str:
    """"GPU" or "CPU", for the heading: a --dry-run on a CPU measured the CPU."""
    return "CPU" if str(device).startswith("cpu") else "GPU"


def render(results: dict[str, Any], ctxs: tuple[int, ...], sizes: tuple[int, ...]) -> str:
    lines = [f"verify cost on {results['device']} ({results['dtype'].replace('torch.', '')}, random weights): "
             "ms per forward pass over n new tokens after ctx cached tokens"]
    show = [n for n in sizes if n in (1, 4, 8, 16, 32, 64)] or list(sizes)
    for name, res in results["models"].items():
        if "curve" not in res:
            lines.append(f"{name}: FAILED: {res.get('error')}")
            continue
        curve = res["curve"]
        label = curve.get("cache") + (" (in-place not supported)" if curve.get("cache_note") else "")
        lines.append(f"{name} ({label} cache)  " + "  ".join(f"n={n:<3}" for n in show) + "  prefill")
        for ctx in ctxs:
            row = curve["ms"][ctx]
            lines.append(f"  ctx={ctx:<6} " + "  ".join(f"{row[n]:6.2f}" for n in show)
                         + f"  {curve['prefill_ms'][ctx]:8.1f}")
    lines += render_exactness(results)
    lines.append("PROJECTED speedup over plain decoding (CPU acceptance traces of "
                 f"{results.get('traces_model')}, {_device_kind(results['device'])} cost curve above; "
                 "a projection, not a measurement):")
    for name, res in results["models"].items():
        if not res.get("projection_summary"):
            lines.append(f"  {name}: " + ("no traces" if "curve" in res else "no curve"))
        for kind, s in res.get("projection_summary", {}).items():
            lines.append(f"  {name} {kind:<9} cases={s['cases']:<3} decode {s['median_decode_speedup']:.2f}x"
                         f"  with prefill {s['median_speedup_with_prefill']:.2f}x (medians)")
    return "\n".join(lines)


def render_exactness(results: dict[str, Any]) -> list[str]:
    lines = ["exactness: one k-token pass against k one-token passes (ModelRuntime.forward, random weights: "
             "flat logits, tiny top-2 gaps):"]
    for name, res in results["models"].items():
        ex = res.get("exactness")
        if ex is None:
            continue
        if "error" in ex:
            lines.append(f"  {name}: FAILED: {ex['error']}")
            continue
        lines.append(f"  {name} k={ex['k']} after {ex['context']} tokens x {ex['sequences']}: max |logit diff| "
                     f"{ex['max_abs_logit_diff']:.2e}, smallest top-2 gap {ex['min_top2_gap']:.2e}, argmax "
                     + ("agrees everywhere" if ex["argmax_agrees"] else
                        f"DIFFERS ({ex['sequences'] - ex['sequences_argmax_agrees']} sequences)"))
    return lines if len(lines) > 1 else []


if __name__ == "__main__":
    sys.exit(main())
