#!/usr/bin/env bash
# Mazes far larger than trained on: arms of the maze preset trained side by side by
# `trmkit bench --learn MINUTES` (15 x 15 at most, the fixed held-out 500 of data/learn-maze), THREADS
# threads each, then each arm evaluated one-shot - no vote, no verifier - on its 15 x 15 held-out set and
# on generated 30 x 30, 45 x 45 and 61 x 61 sets (hardness scaled as `trmkit data maze` does by default:
# paths >= 110 / 165 / 224 steps; ties allowed past 30 x 30, the metric accepts any shortest path):
# a K curve in one pass (--steps K1,K2,...) and the halting rule (--steps auto:CAP), its valid paths also by
# the length of the shortest path (the scorer's bands).
# ARMS is a list of NAME=override[,override...] ("base" alone: the preset as it is).
# An arm whose run directory OUT_DIR/NAME exists is not trained again, only evaluated.
# Usage: bash benchmarks/maze_extrapolation.sh [OUT_DIR]     (default runs/maze-extrap-<stamp>)
#        MINUTES=60 THREADS=1 ARMS="base prog=train.progressive_loss=0.5" bash benchmarks/maze_extrapolation.sh
#        MINUTES=60 THREADS=2 ARMS="base" bash benchmarks/maze_extrapolation.sh       (one arm on 2 cores)
#        MINUTES=60 ARMS="base long=maze.hardness=56" bash benchmarks/maze_extrapolation.sh   (longer routes)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/maze-extrap-$(date +%Y%m%d-%H%M%S)}
MINUTES=${MINUTES:-60}
THREADS=${THREADS:-1}
ARMS=${ARMS:-"base prog=train.progressive_loss=0.5"}
CFG=${CFG:-configs/maze-laptop.yaml}
SIZES=${SIZES:-"30 45 61"}
CAP=${CAP:-128}
mkdir -p "$OUT"
for n in $SIZES; do   # the evaluation sets: seeds apart from training's stream (seed 0) and from each other
  num=100; [ "$n" -gt 50 ] && num=50
  [ -d "data/maze-$n" ] || $TRMKIT data maze --size "$n" --num "$num" --test-fraction 1 --seed "$n" --out "data/maze-$n"
done
first=1
for spec in $ARMS; do   # side by side; the first builds data/learn-maze, the others wait for it
  name=${spec%%=*}; overrides=(); [ "$spec" != "$name" ] && IFS=, read -r -a overrides <<< "${spec#*=}"
  [ -d "$OUT/$name" ] && continue   # trained already: only evaluate it again
  $TRMKIT bench --learn "$MINUTES" "$CFG" --task maze --every $((MINUTES / 4)) --keep "$OUT/$name" \
    run.threads="$THREADS" run.compile=off "${overrides[@]}" > "$OUT/$name.log" 2>&1 &
  if [ "$first" = 1 ]; then
    first=0
    pid=$!
    until grep -q "^learn: [0-9]* min of training" "$OUT/$name.log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; do
      sleep 5
    done
  fi
done
wait
for spec in $ARMS; do
  name=${spec%%=*}; run=$OUT/$name
  ( $TRMKIT eval "$run" --data data/learn-maze --steps 8,32 run.threads="$THREADS" > "$run-15.json" 2> "$run-15.log"
    $TRMKIT eval "$run" --data data/learn-maze --steps auto run.threads="$THREADS" > "$run-15-auto.json" 2>> "$run-15.log"
    for n in $SIZES; do
      $TRMKIT eval "$run" --data "data/maze-$n" --steps 8,16,32,64,$CAP run.threads="$THREADS" \
        > "$run-$n.json" 2> "$run-$n.log"
      $TRMKIT eval "$run" --data "data/maze-$n" --steps auto:$CAP run.threads="$THREADS" \
        > "$run-$n-auto.json" 2>> "$run-$n.log"
    done ) &
done
wait
SIZES="$SIZES" .venv/bin/python - "$OUT" $ARMS <<'PY'
import json, os, sys
from pathlib import Path
out, arms = Path(sys.argv[1]), [a.split("=")[0] for a in sys.argv[2:]]
def auto(path):
    r = json.loads(path.read_text())
    bands = [k.removeprefix("valid_by_length/") for k in r if k.startswith("valid_by_length/")]
    bands = " ".join(f"{b}: {r['valid_by_length/' + b]:.2f} (n={r['mazes_by_length/' + b]})" for b in bands)
    return r["valid_path_accuracy"], r["steps_used_mean"], bands
for arm in arms:
    rows = []
    for n, f in [(15, "15")] + [(int(s), s) for s in os.environ["SIZES"].split()]:
        curve = json.loads((out / f"{arm}-{f}.json").read_text())["steps"]
        ks = " ".join(f"K={k}: {v['valid_path_accuracy']:.3f}" for k, v in curve.items())
        acc, used, bands = auto(out / f"{arm}-{f}-auto.json")
        rows.append(f"  {n} x {n}: {ks} | auto: {acc:.3f} ({used:.1f} steps on average) | by path length: {bands}")
    print(arm, *rows, sep="\n")
PY
