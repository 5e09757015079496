#!/usr/bin/env bash
# Self-play RL demo (docs/rl.md). Two policies, one trainer:
#   RL_POLICY=lm (the default): a causal language model of random weights (the `tiny` shape, 279,616 parameters,
#     byte tokenizer; configs/selfplay-lm-tiny.yaml) is seeded on the game's examples, then plays propose / solve /
#     critique on the built-in generated programs written as Python text, every answer run in the sandbox.
#     Seeding teaches it the answer formats (most held-out answers parse), not the programs: its answers barely
#     depend on the task, so solve rates stay near 0. It shows the LM path end to end, the one a pretrained
#     model from disk runs through (rl.model_path), which is what TR-RPG is for. Timings: docs/results.md.
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
SMALL=(rl.heldout_per_type=30 rl.eval_per_type=5)  # held-out sets: 30 generated tasks per type (runs score 5)
$TRMKIT rl seed $CONFIG run.dir="$SEED" train.max_minutes="${MINUTES_SEED:-4}" "${SMALL[@]}"
$TRMKIT rl train $CONFIG --init "$SEED" run.dir="$RL" train.max_minutes="${MINUTES_RL:-1}" "${SMALL[@]}"
DATA=../shared/data/rl
SEEDS=()
if [ -f $DATA/azr_7b_seed_io.jsonl ]; then
  SEEDS=(--seed-files "$DATA/azr_7b_seed_io.jsonl,$DATA/azr_3b_coder_seed_io.jsonl,$DATA/azr_7b_code_f_seed_io.jsonl")
fi
echo "== held-out solve rate by execution (greedy), per type: seeded, then after self-play =="
$TRMKIT rl eval "$SEED"
$TRMKIT rl eval "$RL" "${SEEDS[@]}"
