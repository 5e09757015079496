#!/usr/bin/env bash
# Self-play RL demo (docs/rl.md). Two policies, one trainer:
#   RL_POLICY=lm (the default): a causal language model of 3.3M random parameters (configs/selfplay-lm-tiny.yaml,
#     byte tokenizer) is seeded on the game's examples, then plays propose / solve / critique on the built-in
#     generated programs written as Python text, every answer run in the sandbox; 10 min 7 s on 2 loaded Xeon cores
#     (2026-12-05, seed 3 + self-play 2.5 min then; now 2.5 + 2, the rest evaluation).
#     It shows the LM path end to end (what a pretrained model from disk runs through, rl.model_path); a random
#     model this small learns the answer formats, not the programs: expect solve rates near 0.
#   RL_POLICY=trm: the Tiny Recursive Model on the list language (configs/selfplay-laptop.yaml), which does learn
#     to solve (docs/results.md); 4 + 4 minutes here, 15 + 30 in the full recipe (MINUTES_SEED / MINUTES_RL).
# Both print the held-out solve rate by execution per type, after seeding and after self-play; the LM demo
# scores the held-out AZR seed programs too when the shared data (../shared/data/rl) is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRMKIT=.venv/bin/trmkit
STAMP=$(date +%Y%m%d-%H%M%S)
POLICY=${RL_POLICY:-lm}
SEED=runs/rl-demo-$POLICY-seed-$STAMP
RL=runs/rl-demo-$POLICY-selfplay-$STAMP
if [ "$POLICY" = trm ]; then
  CONFIG=configs/selfplay-laptop.yaml
  $TRMKIT rl seed $CONFIG run.dir="$SEED" train.max_minutes="${MINUTES_SEED:-4}"
  $TRMKIT rl train $CONFIG --init "$SEED" run.dir="$RL" train.max_minutes="${MINUTES_RL:-4}"
  echo "== held-out solve rate by execution: seeded, then after self-play =="
  $TRMKIT rl eval "$SEED"
  $TRMKIT rl eval "$RL"
  $TRMKIT report "$RL" >/dev/null && echo "curves per role (rewards, solve rate, agreement, KL, entropy): $RL/report/"
  exit 0
fi
[ "$POLICY" = lm ] || { echo "RL_POLICY=$POLICY: use lm or trm" >&2; exit 2; }
CONFIG=configs/selfplay-lm-tiny.yaml
SMALL=(rl.heldout_per_type=30 rl.eval_per_type=10)  # the demo's held-out sets: 30 generated tasks per type
$TRMKIT rl seed $CONFIG run.dir="$SEED" train.max_minutes="${MINUTES_SEED:-2.5}" "${SMALL[@]}"
$TRMKIT rl train $CONFIG --init "$SEED" run.dir="$RL" train.max_minutes="${MINUTES_RL:-2}" "${SMALL[@]}"
DATA=../shared/data/rl
SEEDS=()
if [ -f $DATA/azr_7b_seed_io.jsonl ]; then
  SEEDS=(--seed-files "$DATA/azr_7b_seed_io.jsonl,$DATA/azr_3b_coder_seed_io.jsonl,$DATA/azr_7b_code_f_seed_io.jsonl")
fi
echo "== held-out solve rate by execution (greedy), per type: seeded, then after self-play =="
$TRMKIT rl eval "$SEED"
$TRMKIT rl eval "$RL" "${SEEDS[@]}"
