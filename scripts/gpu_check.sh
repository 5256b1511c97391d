#!/usr/bin/env bash
# The GPU acceptance in one offline command of at most 9 minutes on one H100, for a CUDA node with
# torch, transformers, accelerate and peft (scripts/cuda_image.txt) and no internet. It prints its
# plan first, installs the wheel folder written by scripts/offline_wheels.sh with no index into a
# private target, then runs, each step killed at its limit:
#   install, then side by side:
#   lane A: p. vpo demo --preset smollm2 (SmolLM2-135M from --model, all four methods x 2 seeds; its
#              report and checks, and each process's reserved GPU memory against its estimate);
#   lane B: d. vpo demo --preset paper-maze (the same for the 9x9 mazes; its table); a. the tests
#              marked gpu;
#   lane C: b. a warm-up of the preset's model, then vpo train (bf16, 20 steps): fails unless the
#              reward moves; c. vpo eval --device cuda, and bf16 against fp32 pools: fails beyond the
#              stated tolerance; m. the KV-cache and allocator settings measured.
# gpu_check.md (a table to paste into docs/gpu.md) is written before the first step, after each,
# and when the check is killed. Only Python and coreutils are needed (scripts/gpu_check.py runs it).
#
#   scripts/gpu_check.sh [--wheels wheels] [--out gpu_check] [--dry-run] [--wheel-list MANIFEST.txt] [--model GGUF]
#                        [--only p|b,c|...]
#
# --dry-run prints the plan, checks the wheel folder (or only its listing, --wheel-list) and the
# image's packages, and runs nothing heavy. --only runs the named steps (names or letters) after install,
# with the steps they need: a rerun when little device time is left. Exit status: 0 when every step passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
case "${1:-}" in
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
esac
exec "$PYTHON" "$ROOT/scripts/gpu_check.py" run "$@"
