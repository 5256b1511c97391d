#!/usr/bin/env bash
# The GPU acceptance in one offline command, for a CUDA node with torch, transformers, accelerate
# and peft (scripts/cuda_image.txt) and no internet: installs the wheel folder written by
# scripts/offline_wheels.sh with no index into a private target, then runs
#   a. the tests marked gpu, b. vpo train (20 steps, bf16, 9x9 maze, 27M-parameter Llama),
#   c. vpo eval --device cuda (pool of 30; the same pool on CPU for a few mazes),
#   d. vpo demo --preset paper-maze,
# each timed, with its peak GPU memory read from torch; a failed step is recorded and the next
# one runs. Ends by writing <out>/gpu_check.md, a table to paste into docs/gpu.md.
#
#   scripts/gpu_check.sh [--wheels wheels] [--out gpu_check] [--dry-run] [--wheel-list MANIFEST.txt]
#
# --dry-run prints the plan, checks the wheel folder (or only its listing, --wheel-list) and the
# image's packages, and runs nothing heavy. Exit status: 0 when every step passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WHEELS=wheels
OUT=gpu_check
DRY=0
LISTING=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --wheel-list) LISTING=${2:?--wheel-list needs a MANIFEST.txt}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$LISTING" ] && [ "$DRY" = 0 ]; then
  echo "gpu_check.sh: --wheel-list checks a listing only; it needs --dry-run (a run installs from --wheels)" >&2
  exit 2
fi
HELPER="$ROOT/scripts/gpu_check.py"
"$PYTHON" "$HELPER" plan
PLAN_OK=$?
if [ -n "$LISTING" ]; then
  "$PYTHON" "$HELPER" check-wheels --wheel-list "$LISTING"
else
  "$PYTHON" "$HELPER" check-wheels --wheels "$WHEELS"
fi
WHEELS_OK=$?
"$PYTHON" "$HELPER" check-image
IMAGE_OK=$?
if [ "$DRY" = 1 ]; then
  echo "dry run: plan $([ $PLAN_OK = 0 ] && echo within || echo OVER) budget, wheels $([ $WHEELS_OK = 0 ] && echo ok || echo NOT ok), image $([ $IMAGE_OK = 0 ] && echo ok || echo 'NOT ok (a run would go on; see the lines above)'); nothing was run"
  [ $PLAN_OK = 0 ] && [ $WHEELS_OK = 0 ]
  exit $?
fi
[ $WHEELS_OK = 0 ] || { echo "gpu_check.sh: fix the wheel folder first" >&2; exit 1; }

mkdir -p "$OUT/logs" "$OUT/peaks"
OUT=$(cd "$OUT" && pwd)
WHEELS=$(cd "$WHEELS" && pwd)
: > "$OUT/steps.tsv"
"$PYTHON" "$HELPER" write-hook "$OUT/hooks"
"$PYTHON" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" \
  > "$OUT/gpu.txt" 2>/dev/null || echo "no GPU (torch did not import)" > "$OUT/gpu.txt"
export PYTHONPATH="$OUT/hooks:$OUT/site" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VERL_LOGGING_LEVEL=WARN
export PYTHONNOUSERSITE=1

# run_step NAME LIMIT_MINUTES COMMAND...: time it, record its exit status and its processes' peaks
run_step() {
  local name=$1 limit=$2; shift 2
  echo "[$(date +%H:%M:%S)] $name: $*"
  local start end rc
  start=$(date +%s.%N)
  VPO_GPU_PEAK_FILE="$OUT/peaks/$name.jsonl" timeout "${limit}m" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(echo "$end - $start" | bc)" >> "$OUT/steps.tsv"
  echo "[$(date +%H:%M:%S)] $name: exit $rc (log $OUT/logs/$name.log)"
}

run_step install 3 bash -c "'$PYTHON' -m pip install --no-index --no-deps --no-warn-script-location -q \
  --target '$OUT/site' '$WHEELS'/*.whl && '$PYTHON' -c 'import datasets, matplotlib, pytest, trl, vpo; \
  from vpo.integrations.trl import VPOTrainer; print(vpo.__file__, trl.__version__, datasets.__version__)'"
cd "$ROOT"
GPU_TESTS=$(grep -l "pytest.mark.gpu" tests/test_*.py | tr '\n' ' ')
run_step a-gpu-tests 4 "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu -rs $GPU_TESTS
run_step b-train 5 bash -c "'$PYTHON' '$HELPER' build-model '$OUT/model' && '$PYTHON' -m vpo train --task maze \
  --model '$OUT/model' --method vpo --answers 3 --examples 160 --max-steps 20 --num-generations 8 \
  --per-device-train-batch-size 64 --bf16 --out '$OUT/train'"
run_step c-eval 4 bash -c "'$PYTHON' -m vpo eval --task maze --model '$OUT/train' --device cuda --pool 30 \
  --answers 3 --examples 100 --out '$OUT/eval/cuda' --no-progress \
  && for run in 'cuda bfloat16 cuda-bf16-small' 'cuda float32 cuda-fp32-small' 'cpu float32 cpu-fp32-small'; do \
    set -- \$run; '$PYTHON' -m vpo eval --task maze --model '$OUT/train' --device \$1 --dtype \$2 --seeding chain \
    --pool 30 --answers 3 --examples 4 --out '$OUT/eval/'\$3 --no-progress || exit 1; done"
run_step d-demo 18 "$PYTHON" -m vpo demo --preset paper-maze --out "$OUT/demo" --no-progress
"$PYTHON" "$HELPER" summarize "$OUT"
! grep -qv "	0	" "$OUT/steps.tsv"
