#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check trmkit tests benchmarks   # the linter configured in pyproject.toml
exec .venv/bin/python -m pytest -q "$@"
