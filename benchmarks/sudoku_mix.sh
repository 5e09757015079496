#!/usr/bin/env bash
# Hard Sudoku from two sources against one: the 17-clue collection mixed with 10,000 generated puzzles of
# 22-26 givens (rated 2-81 guesses: below the held-out 1,000's 82+, so --test-hardest holds out the very same
# 1,000 hardest 17-clue puzzles), trained like the single-source run and read on the same sets.
# The generated puzzles come in two halves, one per core (seeds 901 and 902), written once under data/; the
# mixed store is data/sudoku17-mix. Then benchmarks/sudoku_hard.sh trains on it with DATA set (its other
# settings as given here) and benchmarks/sudoku_sources.sh reads the run.
# Usage: bash benchmarks/sudoku_mix.sh [OUT_DIR]            (default runs/sudoku-mix-<stamp>)
#        CFG=configs/sudoku-deep.yaml MINUTES=90 ARMS=curriculum THREADS=2 EVALS=2 STEPS=13250 SNAP_VOTE=0 \
#        VOTE=1 SELECT=0 EVAL_STEPS=16 bash benchmarks/sudoku_mix.sh runs/deep-mix   (docs/results.md)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/sudoku-mix-$(date +%Y%m%d-%H%M%S)}
SRC=${SRC:-../shared/data/sudoku/tdoku_17_clue.txt}
MIX=${MIX:-data/sudoku17-mix}
pids=()
for half in 1 2; do
  file=data/gen-mix-$half.txt
  [ -f "$file" ] && continue
  mkdir -p data
  .venv/bin/python - $((900 + half)) 5000 "$file" <<'PY' &
import os, sys
from trmkit.tasks.sudoku.generate import generate_pairs
seed, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(out + ".part", "w") as f:  # written whole, then renamed: never a half file under the final name
    for pair in generate_pairs(count, "22-26", seed=seed, min_guesses=2, max_guesses=81):
        f.write("".join(str(int(v)) if v else "." for v in pair.puzzle) + "\n")
os.replace(out + ".part", out)
PY
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
if [ ! -d "$MIX" ]; then
  $TRMKIT data sudoku --source "$SRC" --source data/gen-mix-1.txt --source data/gen-mix-2.txt \
    --test-hardest 1000 --aug 8 --out "$MIX"
fi
if [ -d data/sudoku17-hard ]; then  # the single-source store: the held-out split must be the same puzzles
  .venv/bin/python - "$MIX" <<'PY'
import sys
import numpy as np
for name in ("inputs", "labels"):
    a, b = (np.load(f"{d}/test/{name}.npy") for d in ("data/sudoku17-hard", sys.argv[1]))
    if a.shape != b.shape or not (a == b).all():
        sys.exit(f"{sys.argv[1]}: its held-out {name} differ from data/sudoku17-hard's; the comparison would not hold")
print("held-out split: the same 1,000 puzzles as data/sudoku17-hard")
PY
fi
DATA="$MIX" bash benchmarks/sudoku_hard.sh "$OUT"
for arm in ${ARMS:-store curriculum}; do
  EXTRA="data.eval_limit=1000" bash benchmarks/sudoku_sources.sh "$OUT/$arm"
done
