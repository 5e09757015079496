#!/usr/bin/env bash
# Create .venv and install trmkit with what its tests need. Safe to run again.
# TORCH_SPEC picks the torch build: the default pin is the local CPU build of
# this project's machines; on a Mac or a CUDA box set e.g. TORCH_SPEC="torch>=2.4".
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install --quiet "$TORCH_SPEC"
fi
.venv/bin/pip install --quiet -e ".[test]"
.venv/bin/python -c "import torch, trmkit; print(f'trmkit {trmkit.__version__}, torch {torch.__version__}')"
echo "ready: run 'source .venv/bin/activate' once per shell, then 'trmkit --help' (or call .venv/bin/trmkit directly)"
