#!/usr/bin/env bash
# Hard Sudoku per CPU-hour. The shared 17-clue collection (49,158 puzzles) is rated by the
# solver's guesses; its 1,000 highest-rated puzzles are held out (never trained on) and the rest are
# trained on with x8 augmentation, in arms side by side with THREADS threads each (default 1: two arms on
# a 2-core machine get the same resources):
#   store       the training split in shuffled epochs (no curriculum);
#   curriculum  data.stream=curriculum: easiest 20% of the puzzles first, all of them by mid-run.
# Held-out exact accuracy is logged EVALS times over the run (per rating band in metrics.jsonl); at
# the end each arm is evaluated one-shot, with more supervision steps (--steps) and with votes over
# symmetric variants (--vote at VOTE_K supervision steps), and with selection without a verifier (--select,
# its source fixed on generated puzzles), each reported apart; then every kept checkpoint
# (one per evaluation) at VOTE_K steps, one-shot and with a vote of SNAP_VOTE (the curve over time
# with test-time compute; ~3 min each on 2 threads).
# Usage: bash benchmarks/sudoku_hard.sh [OUT_DIR]        (default runs/sudoku-hard-<stamp>)
#        MINUTES=120 CFG=configs/sudoku-laptop.yaml ARMS="store curriculum" bash benchmarks/sudoku_hard.sh
#        MINUTES=120 ARMS=curriculum THREADS=2 EVALS=8 bash benchmarks/sudoku_hard.sh   (one arm on 2 cores)
# STEPS=N sets train.max_steps (the lr cosine's length) when the planner's step time is known to be off.
# EXTRA="key=value ..." adds config overrides to every arm (a lever: EXTRA="model.H_cycles=3 model.L_cycles=6").
set -euo pipefail
cd "$(dirname "$0")/.."
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
OUT=${1:-runs/sudoku-hard-$(date +%Y%m%d-%H%M%S)}
MINUTES=${MINUTES:-120}
CFG=${CFG:-configs/sudoku-laptop.yaml}
DATA=${DATA:-data/sudoku17-hard}
SRC=${SRC:-../shared/data/sudoku/tdoku_17_clue.txt}
ARMS=${ARMS:-"store curriculum"}
THREADS=${THREADS:-1}
EVALS=${EVALS:-4}
EVAL_STEPS=${EVAL_STEPS:-4,8,16,32}   # the preset trains N_sup=4
VOTE=${VOTE:-1,2,4,8,16}
VOTE_K=${VOTE_K:-16}
if [ ! -d "$DATA" ]; then
  $TRMKIT data sudoku --source "$SRC" --test-hardest 1000 --aug 8 --out "$DATA"
fi
mkdir -p "$OUT"
# the lr cosine should end with the budget: the planner's step time sets train.max_steps unless STEPS is given
EXTRA=${EXTRA:-}
# shellcheck disable=SC2086  # EXTRA is a list of overrides
STEP_S=$($TRMKIT plan "$CFG" data.path="$DATA" run.threads="$THREADS" $EXTRA --json 2>/dev/null |
         .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['step_seconds'])")
read -r STEPS EVERY HALF < <(.venv/bin/python -c "
s = ${STEPS:-0} or int($MINUTES * 60 / $STEP_S)
print(s, max(1, s // $EVALS), s * 64 // 2)")
echo "sudoku-hard: planner ~$STEP_S s/step at $THREADS thread(s); train.max_steps=$STEPS, evaluated every $EVERY steps"
COMMON=(data.path="$DATA" run.threads="$THREADS" train.max_minutes="$MINUTES" train.max_steps="$STEPS"
        train.eval_every="$EVERY" train.checkpoint_every="$EVERY" train.checkpoint_minutes=0
        train.keep_checkpoints="$EVALS")
pids=()
for arm in $ARMS; do
  extra=()
  [ "$arm" = curriculum ] && extra=(data.stream=curriculum data.curriculum_samples="$HALF")
  # a rerun continues an arm (train never does unasked): --resume from a saved checkpoint; an arm killed before
  # its first save (no checkpoints/step-*, or only a half-written .tmp- one) starts afresh with --force
  if compgen -G "$OUT/$arm/checkpoints/step-*" > /dev/null; then extra+=(--resume "$OUT/$arm")
  elif [ -d "$OUT/$arm" ]; then extra+=(--force); fi
  # shellcheck disable=SC2086
  $TRMKIT train "$CFG" "${COMMON[@]}" "${extra[@]}" $EXTRA run.dir="$OUT/$arm" > "$OUT/$arm.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
# test-time compute, each arm on its own threads: more supervision steps; votes at VOTE_K steps
pids=()
for arm in $ARMS; do
  ( $TRMKIT eval "$OUT/$arm" run.threads="$THREADS" --steps "$EVAL_STEPS" > "$OUT/$arm/steps.json" 2> "$OUT/$arm/steps.log"
    $TRMKIT eval "$OUT/$arm" run.threads="$THREADS" --steps "$VOTE_K" --vote "$VOTE" > "$OUT/$arm/vote.json" \
      2> "$OUT/$arm/vote.log" ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
# selection without a verifier (--select SELECT at VOTE_K steps, the halting head choosing): each source of
# trajectories in SELECT_FROM on FIT (generated puzzles, disjoint from the held-out set) and on the held-out
# set; the summary names the source that did best on FIT, so the held-out figure is not chosen on itself.
# SELECT=0 skips it.
SELECT=${SELECT:-16}
SELECT_FROM=${SELECT_FROM:-"variants noise both"}
FIT=${FIT:-data/sudoku-gen-fit}
if [ "$SELECT" != 0 ]; then
  if [ ! -d "$FIT" ]; then
    $TRMKIT data sudoku --source generate --num 500 --givens 22-26 --test-fraction 1 --seed 7 --out "$FIT"
  fi
  for arm in $ARMS; do
    for from in $SELECT_FROM; do
      for set in fit held; do
        data=(); [ "$set" = fit ] && data=(--data "$FIT")
        $TRMKIT eval "$OUT/$arm" run.threads="$THREADS" "${data[@]}" --steps "$VOTE_K" --select "$SELECT" \
          --select-from "$from" > "$OUT/$arm/select-$from-$set.json" 2> "$OUT/$arm/select-$from-$set.log"
      done
    done
  done
fi
# the curve with test-time compute: each kept checkpoint (one per evaluation) at VOTE_K steps, one-shot
# and with a vote of SNAP_VOTE variants; SNAP_VOTE=0 skips it
SNAP_VOTE=${SNAP_VOTE:-16}
if [ "$SNAP_VOTE" != 0 ]; then
  for arm in $ARMS; do
    for ckpt in "$OUT/$arm"/checkpoints/step-*; do
      [ -d "$ckpt" ] || continue  # no checkpoint kept: the glob stays as written
      step=$((10#${ckpt##*step-}))
      $TRMKIT eval "$OUT/$arm" run.threads="$THREADS" --checkpoint "$step" --steps "$VOTE_K" --vote "1,$SNAP_VOTE" \
        > "$OUT/$arm/snapshot-$step.json" 2> "$OUT/$arm/snapshot-$step.log"
    done
  done
fi
.venv/bin/python - "$OUT" "$VOTE_K" $ARMS <<'PY'
import json, sys
from pathlib import Path
out, vote_k, arms = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
print(f"held out: the 1,000 highest-rated 17-clue puzzles; exact accuracy ({out})")
for arm in arms:
    steps = json.loads((out / arm / "steps.json").read_text())
    curve = steps["steps"] if isinstance(steps["steps"], dict) else {str(steps["steps"]): steps}  # one K: flat
    for k, m in curve.items():
        bands = ", ".join(f"{b.split('/')[1]} {v:.3f}" for b, v in m.items() if b.startswith("exact_by_rating/"))
        print(f"{arm:10s} one-shot, K={k:>3} supervision steps: {m['exact_accuracy']:.3f} ({m['seconds']:.0f} s) [{bands}]")
    for n, v in json.loads((out / arm / "vote.json").read_text())["vote"].items():
        print(f"{arm:10s} vote over {n:>2} variants (K={vote_k}): {v['exact_accuracy']:.3f} ({v['seconds']:.0f} s)")
    picks = {}
    for fit in sorted(out.glob(f"{arm}/select-*-fit.json")):
        source = fit.stem.split("-")[1]
        r_fit, r_held = json.loads(fit.read_text()), json.loads((out / arm / f"select-{source}-held.json").read_text())
        picks[source] = r_fit["select/exact_accuracy"]
        for name, r in (("generated (fit)", r_fit), ("held out", r_held)):
            print(f"{arm:10s} --select {r['select/N']} from {source:8s} (K={vote_k}) on {name:15s}: halting head "
                  f"{r['select/exact_accuracy']:.3f} ({r['select/seconds']:.0f} s), plurality "
                  f"{r['plurality/exact_accuracy']:.3f}, one-shot {r['exact_accuracy']:.3f}")
    if picks:
        best = max(picks, key=picks.get)
        print(f"{arm:10s} the source chosen on the generated puzzles: {best} ({picks[best]:.3f} there)")
    evals = {r["step"]: r for r in map(json.loads, (out / arm / "metrics.jsonl").read_text().splitlines())
             if "eval/exact_accuracy" in r}
    for snap in sorted(out.glob(f"{arm}/snapshot-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        step, r = int(snap.stem.split("-")[1]), json.loads(snap.read_text())
        minutes = evals[step]["wall"] / 60  # since the run began: training, its evaluations, compile
        votes = ", ".join(f"vote {n}: {v['exact_accuracy']:.3f}" for n, v in r["vote"].items() if n != "1")
        print(f"{arm:10s} step {step:>6} ({minutes:.0f} min): one-shot K=4 {evals[step]['eval/exact_accuracy']:.3f}, "
              f"K={vote_k} {r['exact_accuracy']:.3f}, {votes}")
PY
