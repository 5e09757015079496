#!/usr/bin/env bash
# More self-play arms from the seeds `benchmarks/rl_learning.sh` left (measured: docs/results.md, "Self-play RL").
# Each arm is NAME:SEED:OVERRIDES[:COMMAND] (overrides joined by commas; COMMAND `train`, the default, or
# `seed` for continued SFT), run as `trmkit rl COMMAND` from SEEDS_FROM/seed<SEED>/seed for RL_MINUTES (30)
# under EXTRA (the scarce-label protocol by default), two arms side by side with one thread each; each
# arm's last checkpoint is then scored on the whole held-out set (final.json), and its best one
# (best.json) where EXTRA names a validation pool (`rl.pool_val`: without one a run's evaluations score
# held-out tasks, so its "best" would be chosen on them), and compared, paired, with the arm BASE names
# in the same seed directory of SEEDS_FROM (its final.json where there is one, else its heldout.json).
# Usage: ARMS="selfplay-drop:0:rl.shortcut_tasks=drop expert-drop:0:rl.shortcut_tasks=drop,rl.baseline=expert" \
#          bash benchmarks/rl_arms.sh runs/rl-arms
#        SEEDS_FROM=runs/rl-scarce BASE=sft-control RL_MINUTES=30 EXTRA="..." (the defaults below)
#        labels free (no pool): EXTRA="" SEEDS_FROM=runs/rl-free BASE=selfplay \
#          ARMS="anchor-only:0:rl.weight_solve=0,rl.weight_propose=0,rl.weight_critique=0 sft-canonical:0:rl.sft_label=canonical:seed"
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/rl-arms-$(date +%Y%m%d-%H%M%S)}
CFG=configs/selfplay-laptop.yaml
FROM=${SEEDS_FROM:-runs/rl-scarce}
BASE=${BASE:-sft-control}
read -r -a EXTRA <<< "${EXTRA-rl.seed_pool=1000 rl.pool_val=100 train.restore_best=true}"
read -r -a ARMS <<< "${ARMS:?name the arms: ARMS=\"NAME:SEED:key=value,key=value ...\"}"

arm() {  # NAME SEED OVERRIDES COMMAND: train, then score the last (and the best) checkpoint on the held-out set
  local name=$1 s=$2 D="$OUT/seed$2/$1" last
  mkdir -p "$OUT/seed$s"
  IFS=, read -r -a over <<< "$3"
  local again=()  # a rerun continues a killed arm: --resume from a saved checkpoint, else afresh with --force
  if compgen -G "$D/checkpoints/step-*" > /dev/null; then again=(--resume "$D")
  elif [ -d "$D" ]; then again=(--force); fi
  [ -f "$D/weights.safetensors" ] || $TRMKIT rl "${4:-train}" $CFG "${again[@]}" --init "$FROM/seed$s/seed" run.seed="$s" \
    run.threads=1 train.max_minutes="${RL_MINUTES:-30}" "${EXTRA[@]}" "${over[@]}" run.dir="$D" > "$D.log" 2>&1
  last=$(find "$D/checkpoints" -maxdepth 1 -name 'step-*' | sort | tail -1 | sed 's/.*step-0*//')
  $TRMKIT rl eval "$D" --step "$last" --json > "$D/final.json" 2> /dev/null
  case " ${EXTRA[*]} " in
    *" rl.pool_val="*) $TRMKIT rl eval "$D" --step best --json > "$D/best.json" 2> /dev/null ;;
  esac
}

pids=()
for spec in "${ARMS[@]}"; do
  IFS=: read -r name s over command <<< "$spec"
  arm "$name" "$s" "${over:-}" "${command:-train}" & pids+=($!)
  if [ ${#pids[@]} = 2 ]; then wait "${pids[0]}" "${pids[1]}"; pids=(); fi
done
for p in "${pids[@]}"; do wait "$p"; done

.venv/bin/python - "$OUT" "$FROM" "$BASE" "${ARMS[@]}" <<'PY'
import json, sys
from pathlib import Path
out, base_dir, base, arms = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
keys = ["solve_rate/nontrivial", "solve_rate", "solve_rate/deduction/nontrivial", "solve_rate/abduction/nontrivial",
        "solve_rate/induction/nontrivial", "solve_rate/abduction+induction/nontrivial", "solve_rate/depth3+", "solve_rate/shortcut", "critique/balanced_accuracy",
        "format_rate"]
print("| seed | arm | weights | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 3) + "|")
named = [spec.split(":")[:2] for spec in arms]  # (name, seed) per NAME:SEED:OVERRIDES
runs = [(s, base, base_dir) for s in sorted({s for _, s in named})] + [(s, name, out) for name, s in named]
rows = [(s, name, w, root / f"seed{s}" / name / f"{w}.json") for s, name, root in runs for w in ("final", "best")]
for s, name, w, path in rows:
    if path.is_file() and path.stat().st_size:
        r = json.loads(path.read_text())
        cells = [f"{r[k]:.3f}" + (f" ± {r[k + '/se']:.3f}" if k + "/se" in r and k == keys[0] else "")
                 if k in r else "-" for k in keys]
        print(f"| {s} | {name} | {w} | " + " | ".join(cells) + " |")
PY
for spec in "${ARMS[@]}"; do  # the headline, and the paired difference with BASE on the same tasks
  IFS=: read -r name s _ <<< "$spec"
  base="$FROM/seed$s/$BASE/final.json"
  [ -f "$base" ] || base="$FROM/seed$s/$BASE/heldout.json"
  for w in final best; do
    [ -f "$OUT/seed$s/$name/$w.json" ] || continue
    echo "seed $s: $name ($w weights) against $BASE ($base)"
    $TRMKIT rl compare "$base" "$OUT/seed$s/$name/$w.json" |
      grep -E "^(group|all|nontrivial|deduction/nontrivial|abduction/nontrivial|induction/nontrivial|abduction\+induction/nontrivial|depth3\+) "
  done
done
