#!/usr/bin/env bash
# Set up, build a generated Sudoku set, train a small TRM for a few minutes, evaluate, answer the example
# puzzles (examples/sudoku-puzzles.txt), report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRMKIT=.venv/bin/trmkit
DATA=data/sudoku-easy
if [ ! -f "$DATA/train/meta.json" ]; then
  $TRMKIT data sudoku --source generate --num 1100 --givens 34-40 --aug 4 --test-fraction 0.09 --out "$DATA"
fi
RUN=runs/demo-$(date +%Y%m%d-%H%M%S)
$TRMKIT train configs/sudoku-laptop.yaml run.dir="$RUN" data.path="$DATA"
echo "== evaluation of $RUN on $DATA/test (EMA weights, all N_sup steps) =="
$TRMKIT eval "$RUN"
echo "== answers of $RUN for examples/sudoku-puzzles.txt (ANSWER<TAB>valid, or invalid and why) =="
$TRMKIT predict "$RUN" examples/sudoku-puzzles.txt
$TRMKIT report "$RUN" >/dev/null && echo "plots and summary: $RUN/report/report.md"
