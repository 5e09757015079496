#!/usr/bin/env bash
# Mazes far larger than trained on, one-shot: train configs/maze-trace.yaml
# (11 x 11 mazes labelled with the search's trace) for MINUTES on THREADS threads, then read the kept
# weights with the halting rule alone - `trmkit eval RUN --data D --steps auto:CAP`, no vote, no verifier -
# on generated held-out sets of 11, 15, 21, 30, 45 and 61 cells a side (hardness scaled as `trmkit data
# maze` does by default: paths >= 15 / 28 / 54 / 110 / 165 / 224 steps; past 30 x 30 the generator keeps
# mazes with tied shortest routes, and any shortest route counts). The sets' seeds are apart from
# training's stream and from each other. A finished run directory (summary.json) is not trained again, only
# read; a killed one is finished first (--resume from its last checkpoint, or afresh with --force before one).
# Usage: bash benchmarks/maze_trace.sh [RUN_DIR]        (default runs/maze-trace-<stamp>)
#        MINUTES=60 THREADS=2 SIZES="15 30 61" bash benchmarks/maze_trace.sh runs/mt
#        EXTRA="data.trace=6" bash benchmarks/maze_trace.sh runs/mt6       (a lever: overrides for training)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
RUN=${1:-runs/maze-trace-$(date +%Y%m%d-%H%M%S)}
MINUTES=${MINUTES:-60}
THREADS=${THREADS:-2}
SIZES=${SIZES:-"11 15 21 30 45 61"}
CAP=${CAP:-160}
read -r -a extra <<< "${EXTRA:-}"
for n in 11 $SIZES; do
  num=100; [ "$n" -le 15 ] && num=500; [ "$n" -gt 50 ] && num=50
  [ -d "data/maze-$n" ] || $TRMKIT data maze --size "$n" --num "$num" --test-fraction 1 --seed "$n" --out "data/maze-$n"
done
if [ ! -f "$RUN/summary.json" ]; then
  again=()
  if compgen -G "$RUN/checkpoints/step-*" > /dev/null; then again=(--resume "$RUN")
  elif [ -d "$RUN" ]; then again=(--force); fi
  $TRMKIT train configs/maze-trace.yaml "${again[@]}" --minutes "$MINUTES" run.dir="$RUN" run.threads="$THREADS" \
    "${extra[@]}" >> "$RUN.log" 2>&1
fi
for n in $SIZES; do
  start=$(date +%s)
  $TRMKIT eval "$RUN" --data "data/maze-$n" --steps "auto:$CAP" run.threads="$THREADS" > "$RUN-$n.json" 2> "$RUN-$n.log"
  echo $(( $(date +%s) - start )) > "$RUN-$n.seconds"
done
SIZES="$SIZES" .venv/bin/python - "$RUN" <<'PY'
import json, os, sys
run = sys.argv[1]
summary = json.load(open(f"{run}/summary.json"))
print(f"{run}: {summary.get('steps')} steps of training")
print("| grid | mazes | valid shortest paths | path recall | steps (mean / max) | seconds (whole eval) |")
print("| --- | --- | --- | --- | --- | --- |")
for n in os.environ["SIZES"].split():
    r = json.load(open(f"{run}-{n}.json"))
    print(f"| {n} x {n} | {r['samples']} | {r['valid_path_accuracy']:.3f} | {r['path_recall']:.3f} | "
          f"{r['steps_used_mean']:.1f} / {r['steps_used_max']} | {open(f'{run}-{n}.seconds').read().strip()} |")
PY
