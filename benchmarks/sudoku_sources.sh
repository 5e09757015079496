#!/usr/bin/env bash
# Hard Sudoku beyond its source: read a trained Sudoku run one-shot at K supervision steps (no vote,
# no verifier) on its own held-out set and on rated sets of other structures it never trained on,
# each built once under data/:
#   sudoku-gen-fit   500 generated puzzles, 22-26 givens (seed 7; the set --select's source is fitted on)
#   sudoku-gen-hard  the 200 highest-rated of 4,000 generated puzzles with 22-26 givens (seed 48)
#   serg             tdoku_serg_benchmark.txt: 10,000 puzzles of 34-35 givens with several solutions each
#                    (--allow-multiple; scored by valid_solution_accuracy, any solution counts)
# and prints a table with exact accuracy, valid solutions and seconds.
# Usage: bash benchmarks/sudoku_sources.sh RUN_DIR              (e.g. a run of benchmarks/sudoku_hard.sh)
#        K=32 THREADS=2 SETS="held sudoku-gen-hard" bash benchmarks/sudoku_sources.sh runs/x/curriculum
#        EXTRA="data.eval_limit=1000" bash benchmarks/sudoku_sources.sh RUN   (the first 1,000 of each set)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
RUN=${1:?usage: bash benchmarks/sudoku_sources.sh RUN_DIR}
K=${K:-16}
THREADS=${THREADS:-2}
SETS=${SETS:-"held sudoku-gen-fit sudoku-gen-hard serg"}
SHARED=${SHARED:-../shared/data/sudoku}
read -r -a extra <<< "${EXTRA:-}"
[ -d data/sudoku-gen-fit ] ||
  $TRMKIT data sudoku --source generate --num 500 --givens 22-26 --test-fraction 1 --seed 7 --out data/sudoku-gen-fit
[ -d data/sudoku-gen-hard ] ||
  $TRMKIT data sudoku --source generate --num 4000 --givens 22-26 --test-hardest 200 --seed 48 --out data/sudoku-gen-hard
[ -d data/serg ] ||
  $TRMKIT data sudoku --source "$SHARED/tdoku_serg_benchmark.txt" --allow-multiple --test-fraction 1 --out data/serg
for set in $SETS; do
  data=(); [ "$set" = held ] || data=(--data "data/$set")
  start=$(date +%s)
  $TRMKIT eval "$RUN" "${data[@]}" --steps "$K" run.threads="$THREADS" "${extra[@]}" > "$RUN/sources-$set.json" 2> "$RUN/sources-$set.log"
  echo $(( $(date +%s) - start )) > "$RUN/sources-$set.seconds"
done
SETS="$SETS" .venv/bin/python - "$RUN" "$K" <<'PY'
import json, os, sys
run, k = sys.argv[1], sys.argv[2]
print(f"{run}: one-shot at K = {k}, no vote, no verifier")
print("| set | puzzles | exact | valid solutions | exact by rating band | seconds |")
print("| --- | --- | --- | --- | --- | --- |")
for name in os.environ["SETS"].split():
    r = json.load(open(f"{run}/sources-{name}.json"))
    bands = ", ".join(f"{key.split('/')[1]}: {v:.3f} ({r['puzzles_by_rating/' + key.split('/')[1]]})"
                      for key, v in r.items() if key.startswith("exact_by_rating/"))
    print(f"| {name} | {r['samples']} | {r['exact_accuracy']:.3f} | {r['valid_solution_accuracy']:.3f} | {bands} | "
          f"{open(f'{run}/sources-{name}.seconds').read().strip()} |")
PY
