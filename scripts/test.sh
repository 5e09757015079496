#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint and run the whole test suite.
#   bash scripts/test.sh                 # the suite (under 10 minutes on 2 quiet cores)
#   bash scripts/test.sh --under-load    # the same beside a CPU hog on every core, as a busy laptop runs it
# Other arguments go to pytest (e.g. bash scripts/test.sh tests/train -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check trmkit tests benchmarks examples   # the linter configured in pyproject.toml
if [ "${1:-}" = "--under-load" ]; then
  shift
  cores=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)))")
  hogs=()
  for _ in $(seq "$cores"); do
    .venv/bin/python -c "while True: pass" &
    hogs+=($!)
  done
  trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
  echo "under load: $cores busy-loop processes beside the tests (pids ${hogs[*]})"
  .venv/bin/python -m pytest -q "$@"
  exit $?
fi
exec .venv/bin/python -m pytest -q "$@"
