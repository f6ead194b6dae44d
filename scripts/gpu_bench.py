"""GPU measurements that need no download: the verify-cost curve and projected speedups.

What it measures (run by scripts/gpu_bench.sh on a GPU machine):

1. The *verify-cost curve*: ms per forward pass over n new tokens (n = 1..64)
   after ctx cached tokens (ctx = 1k..8k), for random-weight fp32 models (as the daemon runs them) with the
   shapes of real code models (Qwen2.5-Coder 1.5B and 7B). The time of a pass
   does not depend on the weights' values; they are random normal, never zeros.
2. *Projections*: the speedup over plain decoding that this curve implies for
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
import json
import statistics
import sys
import time
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
CTX = (1024, 2048, 4096, 8192)
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
DRY_CTX, DRY_SIZES = (64, 256), (1, 4, 16)


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
    """{"cache", "prefill_ms": {ctx: ms}, "ms": {ctx: {n: ms}}}: minimum over ``repeats`` after a warm-up.

    The cache is the daemon's in-place one (daemon/kv_cache.py) when this transformers
    accepts it, else transformers' ``DynamicCache`` (``cache`` says which). Sizes are
    timed round-robin and the minimum kept, as ``CostModel.calibrate`` does.
    """
    import torch

    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)
    out: dict[str, Any] = {"cache": None, "prefill_ms": {}, "ms": {}}
    for ctx in ctxs:
        ids = torch.randint(0, vocab, (1, ctx + max(sizes)), generator=gen).to(device)
        with torch.inference_mode():
            times = []
            for _ in range(2):  # prefill twice: the first warms up
                cache, out["cache"] = _prefilled(model, ids[:, :ctx], device, times, out["cache"])
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
    ``past_key_values`` is deprecated (as daemon/model.py decides)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _prefilled(model: Any, ids: Any, device: str, times: list[float], kind: str | None) -> tuple[Any, str]:
    """A cache holding ``ids``, its prefill time appended to ``times``: the in-place cache
    unless it already failed (``kind`` "dynamic") or fails now on this transformers."""
    for k in (("inplace", "dynamic") if kind in (None, "inplace") else ("dynamic",)):
        if k == "inplace":
            from daemon.kv_cache import InPlaceCache as make_cache
        else:
            from transformers import DynamicCache as make_cache
        try:
            cache = make_cache()
            _sync(device)
            t0 = time.perf_counter()
            model(input_ids=ids, use_cache=True, logits_to_keep=1, **{_cache_kwarg(model): cache})
            _sync(device)
        except Exception as exc:
            if k == "dynamic":
                raise
            print(f"gpu_bench: the in-place cache failed ({type(exc).__name__}: {exc}); "
                  "timing DynamicCache", file=sys.stderr)
            continue
        times.append((time.perf_counter() - t0) * 1000)
        return cache, k
    raise AssertionError("unreachable")


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
    dtype = torch.float32  # as the daemon runs every model (daemon/model.py resolve_device: bf16 is not exact)
    repeats = 1 if args.dry_run else args.repeats
    try:
        traces = json.loads(Path(args.traces).read_text())
    except (OSError, ValueError) as exc:
        print(f"gpu_bench: no traces ({exc}); measuring the cost curve only", file=sys.stderr)
        traces = {"cases": []}

    results: dict[str, Any] = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                               "torch": torch.__version__, "dtype": str(dtype), "dry_run": args.dry_run,
                               "traces_model": traces.get("model"), "models": {}}
    for name, shape in models.items():
        t0 = time.perf_counter()
        model = build_model(shape, device, dtype)
        params = sum(p.numel() for p in model.parameters())
        print(f"gpu_bench: {name}: {params / 1e9:.2f}B parameters built in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        curve = verify_cost_curve(model, device, ctxs, sizes, repeats)
        proj = project(traces, Cost(curve)) if traces["cases"] else []
        results["models"][name] = {"params": params, "curve": curve, "projection": proj,
                                   "projection_summary": summarize_projection(proj)}
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(render(results, ctxs, sizes))
    return 0


def _device_kind(device: str) -> str:
    """"GPU" or "CPU", for the heading: a --dry-run on a CPU measured the CPU."""
    return "CPU" if str(device).startswith("cpu") else "GPU"


def render(results: dict[str, Any], ctxs: tuple[int, ...], sizes: tuple[int, ...]) -> str:
    lines = [f"verify cost on {results['device']} ({results['dtype'].replace('torch.', '')}, random weights): "
             "ms per forward pass over n new tokens after ctx cached tokens"]
    show = [n for n in sizes if n in (1, 4, 8, 16, 32, 64)] or list(sizes)
    for name, res in results["models"].items():
        lines.append(f"{name} ({res['curve'].get('cache')} cache)  " + "  ".join(f"n={n:<3}" for n in show)
                     + "  prefill")
        for ctx in ctxs:
            row = res["curve"]["ms"][ctx]
            lines.append(f"  ctx={ctx:<6} " + "  ".join(f"{row[n]:6.2f}" for n in show)
                         + f"  {res['curve']['prefill_ms'][ctx]:8.1f}")
    lines.append("PROJECTED speedup over plain decoding (CPU acceptance traces of "
                 f"{results.get('traces_model')}, {_device_kind(results['device'])} cost curve above; "
                 "a projection, not a measurement):")
    for name, res in results["models"].items():
        if not res["projection_summary"]:
            lines.append(f"  {name}: no traces")
        for kind, s in res["projection_summary"].items():
            lines.append(f"  {name} {kind:<9} cases={s['cases']:<3} decode {s['median_decode_speedup']:.2f}x"
                         f"  with prefill {s['median_speedup_with_prefill']:.2f}x (medians)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
