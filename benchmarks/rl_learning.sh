#!/usr/bin/env bash
# Does self-play learn? The protocol of docs/rl.md:
#   1. seed: `trmkit rl seed` for SEED_MINUTES (15) on all cores;
#   2. self-play from the seed for RL_MINUTES (30) on all cores;
#   3. control: seeding continued from the same seed for the same time, on all cores;
#   4. the held-out solve rate (by execution) of all three, side by side.
# Runs 2 and 3 run one after the other, so each has the machine to itself.
# Usage: bash benchmarks/rl_learning.sh [OUT_DIR]   (default runs/rl-learning-<stamp>)
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/rl-learning-$(date +%Y%m%d-%H%M%S)}
CFG=configs/selfplay-laptop.yaml
if [ ! -f "$OUT/seed/weights.safetensors" ]; then
  $TRMKIT rl seed $CFG run.dir="$OUT/seed" train.max_minutes="${SEED_MINUTES:-15}"
fi
$TRMKIT rl train $CFG --init "$OUT/seed" run.dir="$OUT/selfplay" train.max_minutes="${RL_MINUTES:-30}"
$TRMKIT rl seed $CFG --init "$OUT/seed" run.dir="$OUT/sft-control" train.max_minutes="${RL_MINUTES:-30}"
for run in seed selfplay sft-control; do
  $TRMKIT rl eval "$OUT/$run" --json > "$OUT/$run/heldout.json"
done
.venv/bin/python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
keys = ["solve_rate", "solve_rate/deduction", "solve_rate/abduction", "solve_rate/induction",
        "solve_rate/len<=3", "solve_rate/len>3", "format_rate"]
print("| run | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 1) + "|")
for run in ("seed", "selfplay", "sft-control"):
    r = json.loads((out / run / "heldout.json").read_text())
    print(f"| {run} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |")
PY
