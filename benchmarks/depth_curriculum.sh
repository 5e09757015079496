#!/usr/bin/env bash
# Time to accuracy with a depth curriculum (train.depth_curriculum, CGAR): two arms of a preset trained
# side by side by `trmkit bench --learn MINUTES` on the task's fixed set, THREADS threads each (default 1:
# two arms on a 2-core machine get the same resources), each with its lr schedule fitted to the budget:
#   base        the preset as it is;
#   curriculum  train.depth_curriculum=$STAGES (default 0.3,0.6: CGAR's three stages).
# Held-out accuracy every EVERY minutes of training (evaluation time not counted); the table gives each
# arm's minutes to TARGET (the first evaluation that reached it; both arms run the whole budget, so
# neither gets the machine to itself) and its last point.
# Usage: bash benchmarks/depth_curriculum.sh [OUT_DIR]          (default runs/depth-<stamp>)
#        MINUTES=20 EVERY=2.5 TARGET=exact_accuracy=0.4 bash benchmarks/depth_curriculum.sh
#        EXTRA="model.H_cycles=3 model.L_cycles=6" bash benchmarks/depth_curriculum.sh   (CGAR's depth)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/depth-$(date +%Y%m%d-%H%M%S)}
MINUTES=${MINUTES:-20}
EVERY=${EVERY:-2.5}
THREADS=${THREADS:-1}
CFG=${CFG:-configs/sudoku-laptop.yaml}
TASK=${TASK:-sudoku}
TARGET=${TARGET:-exact_accuracy=0.4}
STAGES=${STAGES:-0.3,0.6}
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$OUT"
learn() {  # NAME [override ...]
  local name=$1; shift
  $TRMKIT bench --learn "$MINUTES" "$CFG" --task "$TASK" --every "$EVERY" --json \
    run.threads="$THREADS" "${EXTRA[@]}" "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
}
learn base &
sleep 60   # the first arm builds the task's fixed set once; the second then reuses it
learn curriculum train.depth_curriculum="$STAGES" &
wait
.venv/bin/python - "$OUT" "$TARGET" <<'PY'
import json, sys
from pathlib import Path
out, (key, want) = Path(sys.argv[1]), sys.argv[2].split("=")
for arm in ("base", "curriculum"):
    points = json.loads((out / f"{arm}.json").read_text())
    value = lambda p: p.get(key, p.get("task_metrics", {}).get(key))
    hit = next((p for p in points if value(p) >= float(want)), None)
    last = points[-1]
    print(f"{arm:10s}  {key} >= {want}: " + (f"{hit['minutes']:.2f} min (step {hit['steps']})" if hit else "not reached")
          + f"  |  last: {value(last):.3f} at {last['minutes']:.2f} min, step {last['steps']}, lr {last['lr']:.2g}")
PY
