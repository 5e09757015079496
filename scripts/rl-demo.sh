#!/usr/bin/env bash
# Self-play RL demo (docs/rl.md): seed a small TRM on executor traces for 4 minutes, then
# 4 minutes of propose / solve / critique self-play with TR-RPG, every answer checked by
# executing the code in the sandbox; prints the held-out solve rate (by execution) of both.
# The full recipe is 15 minutes of seeding and 30 of self-play (MINUTES_SEED / MINUTES_RL).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRMKIT=.venv/bin/trmkit
STAMP=$(date +%Y%m%d-%H%M%S)
SEED=runs/rl-demo-seed-$STAMP
RL=runs/rl-demo-selfplay-$STAMP
$TRMKIT rl seed configs/selfplay-laptop.yaml run.dir="$SEED" train.max_minutes="${MINUTES_SEED:-4}"
$TRMKIT rl train configs/selfplay-laptop.yaml --init "$SEED" run.dir="$RL" train.max_minutes="${MINUTES_RL:-4}"
echo "== held-out solve rate by execution: seeded, then after self-play =="
$TRMKIT rl eval "$SEED"
$TRMKIT rl eval "$RL"
$TRMKIT report "$RL" >/dev/null && echo "curves per role (rewards, solve rate, agreement, KL, entropy): $RL/report/"
