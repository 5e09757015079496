#!/usr/bin/env bash
# Hard Sudoku per CPU-hour (issue 28). The shared 17-clue collection (49,158 puzzles) is rated by the
# solver's guesses; its 1,000 highest-rated puzzles are held out (never trained on) and the rest are
# trained on with x8 augmentation, in two arms side by side with one thread each (the same resources):
#   store       the training split in shuffled epochs (no curriculum);
#   curriculum  data.stream=curriculum: easiest 20% of the puzzles first, all of them by mid-run.
# Held-out exact accuracy is logged every ~quarter of the run (per rating band in metrics.jsonl); at
# the end each arm is evaluated one-shot, with more supervision steps (--steps) and with votes over
# symmetric variants (--vote), reported apart.
# Usage: bash benchmarks/sudoku_hard.sh [OUT_DIR]        (default runs/sudoku-hard-<stamp>)
#        MINUTES=120 CFG=configs/sudoku-laptop.yaml ARMS="store curriculum" bash benchmarks/sudoku_hard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/sudoku-hard-$(date +%Y%m%d-%H%M%S)}
MINUTES=${MINUTES:-120}
CFG=${CFG:-configs/sudoku-laptop.yaml}
DATA=${DATA:-data/sudoku17-hard}
SRC=${SRC:-../shared/data/sudoku/tdoku_17_clue.txt}
ARMS=${ARMS:-"store curriculum"}
EVAL_STEPS=${EVAL_STEPS:-4,8,16}   # the preset trains N_sup=4
VOTE=${VOTE:-1,2,4,8,16}
if [ ! -d "$DATA" ]; then
  $TRMKIT data sudoku --source "$SRC" --test-hardest 1000 --aug 8 --out "$DATA"
fi
mkdir -p "$OUT"
# the lr cosine should end with the budget: the planner's step time at one thread sets train.max_steps
STEP_S=$($TRMKIT plan "$CFG" data.path="$DATA" run.threads=1 --json 2>/dev/null |
         .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['step_seconds'])")
read -r STEPS EVERY HALF < <(.venv/bin/python -c "
s = $MINUTES * 60 / $STEP_S
print(int(s), max(1, int(s / 4)), int(s * 64 / 2))")
echo "sudoku-hard: ~$STEP_S s/step at one thread -> train.max_steps=$STEPS, evaluated every $EVERY steps"
COMMON=(data.path="$DATA" run.threads=1 train.max_minutes="$MINUTES" train.max_steps="$STEPS"
        train.eval_every="$EVERY" train.checkpoint_every=0)
pids=()
for arm in $ARMS; do
  extra=()
  [ "$arm" = curriculum ] && extra=(data.stream=curriculum data.curriculum_samples="$HALF")
  $TRMKIT train "$CFG" "${COMMON[@]}" "${extra[@]}" run.dir="$OUT/$arm" > "$OUT/$arm.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
# test-time compute, each arm on its own thread: more supervision steps; votes at the trained N_sup
pids=()
for arm in $ARMS; do
  ( $TRMKIT eval "$OUT/$arm" run.threads=1 --steps "$EVAL_STEPS" > "$OUT/$arm/steps.json" 2> "$OUT/$arm/steps.log"
    $TRMKIT eval "$OUT/$arm" run.threads=1 --vote "$VOTE" > "$OUT/$arm/vote.json" 2> "$OUT/$arm/vote.log" ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
.venv/bin/python - "$OUT" $ARMS <<'PY'
import json, sys
from pathlib import Path
out, arms = Path(sys.argv[1]), sys.argv[2:]
print(f"held out: the 1,000 highest-rated 17-clue puzzles; exact accuracy ({out})")
for arm in arms:
    for k, m in json.loads((out / arm / "steps.json").read_text())["steps"].items():
        bands = ", ".join(f"{b.split('/')[1]} {v:.3f}" for b, v in m.items() if b.startswith("exact_by_rating/"))
        print(f"{arm:10s} one-shot, K={k:>3} supervision steps: {m['exact_accuracy']:.3f} ({m['seconds']:.0f} s) [{bands}]")
    for n, v in json.loads((out / arm / "vote.json").read_text())["vote"].items():
        print(f"{arm:10s} vote over {n:>2} variants (trained K): {v['exact_accuracy']:.3f} ({v['seconds']:.0f} s)")
PY
