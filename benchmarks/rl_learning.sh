#!/usr/bin/env bash
# Does self-play learn? The protocol of docs/rl.md, for each run seed in SEEDS:
#   1. seed: `trmkit rl seed` for SEED_MINUTES (15);
#   2. self-play from that seed for RL_MINUTES (30);
#   3. control: seeding continued from the same seed for the same time;
#   4. the held-out solve rate (by execution) of all three, and the mean over the seeds: the headline is
#      solve_rate/nontrivial (shortcut tasks left out, docs/rl.md); then self-play - control per seed,
#      paired on the same tasks, with its bootstrap standard error (`trmkit rl compare`).
# EXTRA holds overrides given to every run: the scarce-label regime is
#   EXTRA="rl.seed_pool=1000 rl.pool_val=100" (the seed, the control and self-play's anchor see only the
#   pool's 900 labelled traces; every run's evaluations, hence its best checkpoint, score the pool's other 100).
# With PARALLEL=1 two runs go side by side with one thread each (the seeds of two run seeds, then a
# seed's two arms: the same resources for both, half the wall time); else one after the other on all cores.
# Usage: bash benchmarks/rl_learning.sh [OUT_DIR]   (default runs/rl-learning-<stamp>)
#        SEEDS="0 1" SEED_MINUTES=15 RL_MINUTES=30 PARALLEL=0 EXTRA="" bash benchmarks/rl_learning.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/rl-learning-$(date +%Y%m%d-%H%M%S)}
CFG=configs/selfplay-laptop.yaml
SEEDS=${SEEDS:-"0 1"}
read -r -a EXTRA <<< "${EXTRA:-}"
THREADS=$([ "${PARALLEL:-0}" = 1 ] && echo 1 || echo 0)
mkdir -p "$OUT"

again() {  # a rerun continues a killed run (never done unasked): --resume RUN from a saved checkpoint; a run
  # killed before its first save (no checkpoints/step-*, or only a half-written .tmp- one) starts afresh: --force
  if compgen -G "$1/checkpoints/step-*" > /dev/null; then echo "--resume $1"; elif [ -d "$1" ]; then echo "--force"; fi
}
two_at_a_time() {  # run the given commands (one per argument, as strings), two at once with PARALLEL=1
  local pids=()
  for cmd in "$@"; do
    if [ "${PARALLEL:-0}" = 1 ]; then
      bash -c "$cmd" & pids+=($!)
      if [ ${#pids[@]} = 2 ]; then wait "${pids[0]}"; wait "${pids[1]}"; pids=(); fi
    else
      bash -c "$cmd"
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

seeds=()
for s in $SEEDS; do
  D="$OUT/seed$s"
  mkdir -p "$D"
  [ -f "$D/seed/weights.safetensors" ] || seeds+=("$TRMKIT rl seed $CFG $(again "$D/seed") run.seed=$s run.dir=$D/seed run.threads=$THREADS \
train.max_minutes=${SEED_MINUTES:-15} ${EXTRA[*]} > $D/seed.log 2>&1")
done
two_at_a_time "${seeds[@]}"
for s in $SEEDS; do
  D="$OUT/seed$s"
  common="--init $D/seed run.seed=$s run.threads=$THREADS train.max_minutes=${RL_MINUTES:-30} ${EXTRA[*]}"
  two_at_a_time "$TRMKIT rl train $CFG $(again "$D/selfplay") $common run.dir=$D/selfplay > $D/selfplay.log 2>&1" \
                "$TRMKIT rl seed $CFG $(again "$D/sft-control") $common run.dir=$D/sft-control > $D/sft-control.log 2>&1"
  two_at_a_time "$TRMKIT rl eval $D/seed --json > $D/seed/heldout.json" \
                "$TRMKIT rl eval $D/selfplay --json > $D/selfplay/heldout.json" \
                "$TRMKIT rl eval $D/sft-control --json > $D/sft-control/heldout.json"
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
