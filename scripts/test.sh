#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint and run the whole test suite.
#   bash scripts/test.sh                 # the suite (under 10 minutes on 2 quiet cores)
#   bash scripts/test.sh --under-load    # the same beside a CPU hog on every core, as a busy laptop runs it
# Other arguments go to pytest (e.g. bash scripts/test.sh tests/train -x).
# The tests run in one pytest-xdist worker per usable core (at most 4; TEST_WORKERS=N sets it, 0 runs
# them in this process), a test file per worker at a time, the longest files first (tests/conftest.py): on 2
# cores 7.2 min instead of 10.6 (docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check trmkit tests benchmarks examples   # the linter configured in pyproject.toml
workers=${TEST_WORKERS:-$(.venv/bin/python -c "import os; print(min(4, len(os.sched_getaffinity(0))))")}
parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)  # longest files first: tests/conftest.py
[ "$workers" = 0 ] && parallel=()
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
  .venv/bin/python -m pytest -q "${parallel[@]}" "$@"
  exit $?
fi
exec .venv/bin/python -m pytest -q "${parallel[@]}" "$@"
