#!/usr/bin/env bash
# Does self-play learn? The protocol of docs/rl.md, for each run seed in SEEDS:
#   1. seed: `trmkit rl seed` for SEED_MINUTES (15);
#   2. self-play from that seed for RL_MINUTES (30);
#   3. control: seeding continued from the same seed for the same time;
#   4. the held-out solve rate (by execution) of all three, and the mean over the seeds: the headline is
#      solve_rate/nontrivial (shortcut tasks left out, docs/rl.md); then self-play - control per seed,
#      paired on the same tasks, with its bootstrap standard error (`trmkit rl compare`).
# The two arms of a seed run one after the other on all cores, or with PARALLEL=1 side by side
# with one thread each (the same resources for both, half the wall time).
# Usage: bash benchmarks/rl_learning.sh [OUT_DIR]   (default runs/rl-learning-<stamp>)
#        SEEDS="0 1" SEED_MINUTES=15 RL_MINUTES=30 PARALLEL=0 bash benchmarks/rl_learning.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/rl-learning-$(date +%Y%m%d-%H%M%S)}
CFG=configs/selfplay-laptop.yaml
SEEDS=${SEEDS:-"0 1"}
THREADS=$([ "${PARALLEL:-0}" = 1 ] && echo 1 || echo 0)
for s in $SEEDS; do
  D="$OUT/seed$s"
  if [ ! -f "$D/seed/weights.safetensors" ]; then
    $TRMKIT rl seed $CFG run.seed="$s" run.dir="$D/seed" train.max_minutes="${SEED_MINUTES:-15}"
  fi
  arm_rl=($TRMKIT rl train $CFG --init "$D/seed" run.seed="$s" run.dir="$D/selfplay" run.threads=$THREADS
          train.max_minutes="${RL_MINUTES:-30}")
  arm_sft=($TRMKIT rl seed $CFG --init "$D/seed" run.seed="$s" run.dir="$D/sft-control" run.threads=$THREADS
           train.max_minutes="${RL_MINUTES:-30}")
  if [ "${PARALLEL:-0}" = 1 ]; then
    "${arm_rl[@]}" > "$D/selfplay.log" 2>&1 & pid=$!
    "${arm_sft[@]}" > "$D/sft-control.log" 2>&1
    wait $pid
  else
    "${arm_rl[@]}"
    "${arm_sft[@]}"
  fi
  for run in seed selfplay sft-control; do
    $TRMKIT rl eval "$D/$run" --json > "$D/$run/heldout.json"
  done
done
.venv/bin/python - "$OUT" $SEEDS <<'PY'
import json, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2:]
keys = ["solve_rate/nontrivial", "solve_rate", "solve_rate/deduction/nontrivial", "solve_rate/abduction/nontrivial",
        "solve_rate/induction/nontrivial", "solve_rate/depth3+", "critique/balanced_accuracy", "format_rate"]
print("| seed | run | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 2) + "|")
rows = {}
for s in seeds:
    for run in ("seed", "selfplay", "sft-control"):
        r = json.loads((out / f"seed{s}" / run / "heldout.json").read_text())
        rows.setdefault(run, []).append(r)
        print(f"| {s} | {run} | " + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys) + " |")
for run, rs in rows.items():
    print(f"| mean | {run} | " + " | ".join(f"{sum(r.get(k, float('nan')) for r in rs) / len(rs):.3f}"
                                           for k in keys) + " |")
PY
for s in $SEEDS; do  # paired differences on the same tasks, with their bootstrap standard errors
  echo "run seed $s: self-play (after) against the SFT control (before)"
  $TRMKIT rl compare "$OUT/seed$s/sft-control/heldout.json" "$OUT/seed$s/selfplay/heldout.json" |
    grep -E "^(group|all|nontrivial|deduction/nontrivial|abduction/nontrivial|induction/nontrivial|depth3\+) "
done
