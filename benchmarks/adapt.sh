#!/usr/bin/env bash
# The tables of docs/adapt.md: `trmkit adapt` learns a new source from a checker, measured one-shot before and after.
#
#   bash benchmarks/adapt.sh                       # every arm at the full sizes (hours on 2 cores)
#   ARMS=latin OUT=/tmp/adapt bash benchmarks/adapt.sh
#   ARMS=maze MAZE_RUN=runs/maze-trace MAZE_SIZE=45 MAZE_ADAPT_MIN=25 bash benchmarks/adapt.sh
#   ARMS=sudoku SUDOKU_RUN=runs/sudoku-deep bash benchmarks/adapt.sh
#   ARMS=small SMALL_MIN=30 SMALL_ARMS="pseudo continue" bash benchmarks/adapt.sh   # a laptop-size Sudoku
#   ARMS=sudoku SUDOKU_RUN=runs/sudoku-deep SUDOKU_SRC=missed SUDOKU_NEW=474 SUDOKU_MORE="tr-rpg vote" bash benchmarks/adapt.sh
#
# One section per arm below (latin, maze, sudoku, small; the controls and the TR-RPG arm go in sections of their
# own).
# Every step whose output exists is skipped, so a stopped run goes on where it was. Everything runs under
# `nice -n $NICE` with one thread (run.threads=1, OMP_NUM_THREADS=1), so the arms compare at equal CPU time;
# the CPU is printed first. Figures are the lines "== ARM: ..." at the end of each section (and docs/adapt.md).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-bench/adapt}          # data, runs and logs
ARMS=${ARMS:-latin,maze}
NICE=${NICE:-10}
TRMKIT=${TRMKIT:-.venv/bin/trmkit}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
mkdir -p "$OUT/runs" "$OUT/logs"
echo "adapt.sh: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

step() {  # step NAME MADE COMMAND...: run COMMAND, logged to $OUT/logs/NAME.log, unless it succeeded before
  local name=$1 made=$2  # MADE: what it makes (a run's summary.json, a store), or - ; there already: skipped
  shift 2
  if [ -e "$OUT/logs/$name.ok" ] || { [ "$made" != - ] && [ -e "$made" ]; }; then
    echo "-- $name: done before, skipped"; return
  fi
  echo "-- $name: $*"
  nice -n "$NICE" "$@" > "$OUT/logs/$name.log" 2>&1 || { tail -20 "$OUT/logs/$name.log"; exit 1; }
  touch "$OUT/logs/$name.ok"
}

metric() {  # metric LOG KEY: KEY of the last JSON result an eval printed (or "-")
  grep -o "\"$2\": [0-9.e-]*" "$1" 2>/dev/null | tail -1 | sed 's/.*: //' | grep . || echo "-"
}

selected() {  # selected LOG: the exact accuracy of an eval's --select pick (or "-")
  sed -n 's/.*, select: exact_accuracy \([0-9.]*\).*/\1/p' "$1" 2>/dev/null | tail -1 | grep . || echo "-"
}

summary() {  # summary RUN KEY: a key of the run's summary.json
  "$PY" -c "import json, sys; print(f\"{json.load(open(sys.argv[1] + '/summary.json')).get(sys.argv[2], float('nan')):.3f}\")" \
    "$1" "$2" 2>/dev/null || echo "-"
}

heldout_one_shot() {  # heldout_one_shot RUN ROUND: adapt/heldout_one_shot of the first (0) or last (-1) round
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl") if "adapt/round" in line]
print(f"{rows[int(sys.argv[2])]['adapt/heldout_one_shot']:.3f} ({rows[0]['adapt/heldout_problems']} problems)"
      if rows else "-")
EOF
}

# ============================================================ arm: latin (your own puzzle, 4 x 4 -> 6 x 6)
# A pairs model trained on 4 x 4 Latin-square completion (symbols drawn from 1..6, on a 6 x 6 canvas), adapted
# to 6 x 6 puzzles with only examples/latin_checker.py; 6 x 6 exact one-shot before and after on held-out
# puzzles whose solutions are built apart (labels), beside the ceiling: the same base trained as long on
# labelled 6 x 6 puzzles. The model is the pairs preset with the conv mixer: one with learned positions
# (mlp_t, the preset's) never trains the cells outside the 4 x 4 corner and scored 0.000 on 6 x 6 even with
# 2 blanks, so adapt found nothing to keep (0 of 320 solved: docs/adapt.md, Another size).
LATIN_NUM=${LATIN_NUM:-3000}            # 4 x 4 training puzzles, and labelled 6 x 6 ones for the ceiling
LATIN_NEW=${LATIN_NEW:-400}             # unlabelled 6 x 6 puzzles adapt learns from (a fifth held out)
LATIN_HELDOUT=${LATIN_HELDOUT:-300}     # labelled 6 x 6 puzzles scored before and after
LATIN_TRAIN_MIN=${LATIN_TRAIN_MIN:-8}   # the base run's minutes
LATIN_ADAPT_MIN=${LATIN_ADAPT_MIN:-10}  # adapt's minutes, and the ceiling's
LATIN_BLANKS4=${LATIN_BLANKS4:-2-10}    # blanks of a 4 x 4 puzzle (a range: drawn per puzzle)
LATIN_BLANKS6=${LATIN_BLANKS6:-2-18}    # blanks of a 6 x 6 one: a pile of easy and hard puzzles
LATIN_MODEL=${LATIN_MODEL:-model.mixer=conv model.puzzle_emb_len=0}  # overrides of configs/pairs-laptop.yaml
LATIN_AUG=${LATIN_AUG:-}                # e.g. "--aug 4 --transforms shift": 4 x 4 copies all over the 6 x 6 canvas
LATIN_ADAPT_ARGS=${LATIN_ADAPT_ARGS:-}  # overrides of adapt, e.g. adapt.reblank=true (docs/adapt.md, Another size)
latin_arm() {  # shellcheck disable=SC2086 (LATIN_MODEL: several overrides)
  local L=$OUT R=$OUT/runs
  local gen="$PY examples/latin_squares.py --symbols 6"
  step latin-gen-l4 "$L/l4.jsonl" $gen --size 4 --num "$LATIN_NUM" --blanks "$LATIN_BLANKS4" --seed 0 --out "$L/l4.jsonl"
  step latin-gen-l6in "$L/l6in.jsonl" $gen --size 6 --num "$LATIN_NEW" --blanks "$LATIN_BLANKS6" --seed 1 --inputs-only \
    --out "$L/l6in.jsonl"
  step latin-gen-l6lab "$L/l6lab.jsonl" $gen --size 6 --num "$LATIN_HELDOUT" --blanks "$LATIN_BLANKS6" --seed 2 \
    --out "$L/l6lab.jsonl"
  step latin-gen-l6train "$L/l6train.jsonl" $gen --size 6 --num "$LATIN_NUM" --blanks "$LATIN_BLANKS6" --seed 3 \
    --out "$L/l6train.jsonl"
  step latin-data-l4 "$L/p-l4" "$TRMKIT" data pairs --source "$L/l4.jsonl" --out "$L/p-l4" --canvas 6x6 \
    --symbols 0-6 --blank 0 $LATIN_AUG
  step latin-data-l6in "$L/p-l6in" "$TRMKIT" data pairs --source "$L/l6in.jsonl" --out "$L/p-l6in" \
    --symbols 0-6 --test-fraction 0.5
  step latin-data-l6lab "$L/p-l6lab" "$TRMKIT" data pairs --source "$L/l6lab.jsonl" --out "$L/p-l6lab" \
    --symbols 0-6 --blank 0 --test-fraction 1
  step latin-data-l6train "$L/p-l6train" "$TRMKIT" data pairs --source "$L/l6train.jsonl" --out "$L/p-l6train" \
    --symbols 0-6 --blank 0
  step latin-base "$R/latin4/summary.json" "$TRMKIT" train configs/pairs-laptop.yaml data.path="$L/p-l4" \
    run.dir="$R/latin4" run.threads=1 train.max_minutes="$LATIN_TRAIN_MIN" train.fit_to_time=true $LATIN_MODEL
  step latin-before - "$TRMKIT" eval "$R/latin4" --data "$L/p-l6lab" run.threads=1
  step latin-adapt "$R/latin4-adapted/summary.json" "$TRMKIT" adapt "$R/latin4" --data "$L/p-l6in" \
    --checker examples/latin_checker.py:is_latin_square --minutes "$LATIN_ADAPT_MIN" --out "$R/latin4-adapted" \
    run.threads=1 $LATIN_ADAPT_ARGS
  step latin-after - "$TRMKIT" eval "$R/latin4-adapted" --data "$L/p-l6lab" \
    run.threads=1
  step latin-ceiling "$R/latin4-ceiling/summary.json" "$TRMKIT" train configs/pairs-laptop.yaml \
    data.path="$L/p-l6train" run.dir="$R/latin4-ceiling" train.init_from="$R/latin4" run.threads=1 \
    train.max_minutes="$LATIN_ADAPT_MIN" train.fit_to_time=true $LATIN_MODEL
  step latin-ceiling-eval - "$TRMKIT" eval "$R/latin4-ceiling" \
    --data "$L/p-l6lab" run.threads=1
  local lg=$OUT/logs
  echo "== latin: 6 x 6 exact one-shot on $LATIN_HELDOUT held-out puzzles (labels): before $(metric \
"$lg/latin-before.log" exact_accuracy), after adapt $(metric "$lg/latin-after.log" exact_accuracy) \
($LATIN_ADAPT_MIN min), labelled 6 x 6 ceiling $(metric "$lg/latin-ceiling-eval.log" exact_accuracy) (same minutes)"
  echo "== latin: adapt's held-out part by the checker: before $(heldout_one_shot "$R/latin4-adapted" 0), after \
$(heldout_one_shot "$R/latin4-adapted" -1); 4 x 4 held-out exact: base $(summary "$R/latin4" exact_accuracy), \
adapted $(summary "$R/latin4-adapted" exact_accuracy)"
}

# ============================================================ arm: maze (11 x 11 -> a larger grid)
# The maze-trace preset trained on 11 x 11 (MAZE_RUN; trained here for MAZE_TRAIN_MIN when absent), then
# adapted on MAZE_ADAPT unlabelled MAZE_SIZE x MAZE_SIZE mazes (the task's own checker); one-shot `--steps auto`
# valid shortest paths on MAZE_HELDOUT other mazes of that size before and after, and on 30 x 30 ones.
MAZE_RUN=${MAZE_RUN:-$OUT/runs/maze-trace}
MAZE_TRAIN_MIN=${MAZE_TRAIN_MIN:-60}
MAZE_SIZE=${MAZE_SIZE:-61}
MAZE_ADAPT=${MAZE_ADAPT:-200}
MAZE_HELDOUT=${MAZE_HELDOUT:-100}
MAZE_ADAPT_MIN=${MAZE_ADAPT_MIN:-90}
MAZE_CAP=${MAZE_CAP:-auto:256}  # one-shot: think until the answer is stable, at most 256 steps
# The rounds: 2 tries of each unsolved maze (itself and a symmetric variant), each thinking until its answer is
# stable, at most MAZE_STEPS supervision steps (a 61 x 61 route needs up to ~90 steps of the trace). No held-out
# part of the adapt source (the MAZE_HELDOUT mazes are). train.lr: a tenth of the base's last rate (2e-3 x
# lr_min_ratio 0.1): at that rate, batch 8 wore the skill down (docs/adapt.md, the runs at 61 x 61). Re-solving
# the unsolved mazes every 3,000 steps (a 61 x 61 round of 110 takes about 11 minutes on 2 threads).
MAZE_STEPS=${MAZE_STEPS:-auto:128}
MAZE_THREADS=${MAZE_THREADS:-1}  # run.threads of this arm's runs (2 when it runs alone on 2 cores)
MAZE_ADAPT_ARGS=${MAZE_ADAPT_ARGS:-adapt.heldout=0 adapt.trajectories=2 adapt.steps=$MAZE_STEPS \
adapt.round_steps=3000 train.lr=2e-5 train.warmup_steps=10}
maze_arm() {
  local D=$OUT/data R=$OUT/runs n=$MAZE_SIZE
  mkdir -p "$D"
  if [ ! -e "$MAZE_RUN/summary.json" ]; then  # the base: the preset's 11 x 11 training
    step maze-data-11 "$D/maze-11" "$TRMKIT" data maze --size 11 --num 500 --test-fraction 1 --seed 11 \
      --out "$D/maze-11"
    step maze-base "$MAZE_RUN/summary.json" "$TRMKIT" train configs/maze-trace.yaml data.path="$D/maze-11" \
      run.dir="$MAZE_RUN" run.threads="$MAZE_THREADS" --minutes "$MAZE_TRAIN_MIN"
  fi
  step maze-data-new "$D/maze-$n-new" "$TRMKIT" data maze --size "$n" --num "$MAZE_ADAPT" --test-fraction 1 \
    --seed 1"$n" --out "$D/maze-$n-new"
  step maze-data-heldout "$D/maze-$n" "$TRMKIT" data maze --size "$n" --num "$MAZE_HELDOUT" --test-fraction 1 \
    --seed "$n" --out "$D/maze-$n"
  step maze-data-30 "$D/maze-30" "$TRMKIT" data maze --size 30 --num "$MAZE_HELDOUT" --test-fraction 1 \
    --seed 30 --out "$D/maze-30"
  step maze-before - "$TRMKIT" eval "$MAZE_RUN" --data "$D/maze-$n" --steps "$MAZE_CAP" \
    run.threads="$MAZE_THREADS"
  step maze-before-30 - "$TRMKIT" eval "$MAZE_RUN" --data "$D/maze-30" \
    --steps "$MAZE_CAP" run.threads="$MAZE_THREADS"
  # shellcheck disable=SC2086
  step maze-adapt "$R/maze-adapted/summary.json" "$TRMKIT" adapt "$MAZE_RUN" --data "$D/maze-$n-new" \
    --minutes "$MAZE_ADAPT_MIN" --out "$R/maze-adapted" run.threads="$MAZE_THREADS" $MAZE_ADAPT_ARGS
  step maze-after - "$TRMKIT" eval "$R/maze-adapted" --data "$D/maze-$n" \
    --steps "$MAZE_CAP" run.threads="$MAZE_THREADS"
  if [ "$n" != 30 ]; then
    step maze-after-30 - "$TRMKIT" eval "$R/maze-adapted" --data "$D/maze-30" --steps "$MAZE_CAP" run.threads="$MAZE_THREADS"
  else
    cp "$OUT/logs/maze-after.log" "$OUT/logs/maze-after-30.log"
  fi
  local lg=$OUT/logs
  echo "== maze: $n x $n one-shot valid shortest paths on $MAZE_HELDOUT held-out mazes: before $(metric \
"$lg/maze-before.log" valid_path_accuracy), after adapt $(metric "$lg/maze-after.log" valid_path_accuracy) \
($MAZE_ADAPT_MIN min on $MAZE_ADAPT unlabelled); 30 x 30: before $(metric "$lg/maze-before-30.log" \
valid_path_accuracy), after $(metric "$lg/maze-after-30.log" valid_path_accuracy)"
}

# ============================================================ arm: sudoku (another source)
# The sudoku-deep preset trained on the 17-clue collection with the rating curriculum (SUDOKU_RUN; trained here,
# SUDOKU_STEPS steps on SUDOKU_THREADS threads, when absent: over an hour on 2 threads), then adapted for
# SUDOKU_ADAPT_MIN minutes on SUDOKU_NEW puzzles of another source, one-shot at K=SUDOKU_K on SUDOKU_HELDOUT
# others of it before and after (valid_solution_accuracy: by the rules and the givens), the same with --select 16
# (the model's own pick, no checker; the first SUDOKU_SELECT of them), and the 1,000 hardest 17-clue puzzles
# (exact). The source: puzzles the generator rates hardest (SUDOKU_SRC=generate: 24-26 givens, at least
# SUDOKU_RATING solver guesses each; the two sets from seeds 101 and 102), or a text collection (its first
# SUDOKU_NEW lines and the next SUDOKU_HELDOUT; built with --allow-multiple, as the serg benchmark's puzzles
# have several solutions each: the base completed 0.987 of 1,000 of them validly one-shot, nothing to learn), or
# SUDOKU_SRC=missed: the generator's hardest that SUDOKU_RUN answers wrong one-shot at K=SUDOKU_K (SUDOKU_POOL
# generated, seeds 103 and 104, a half each; the base then scores 0 on both sets by construction, and the
# control shows how much of a rise any further training gives such borderline puzzles).
# Beside it at equal CPU time, run at the same time on one thread each: continued training on the 17-clue
# collection (--objective continue). Both start at train.lr=2e-4, the base's last rate (2e-3 x lr_min_ratio
# 0.1): the preset's 2e-3 would restart a converged model at its largest rate (adapt lowers the puzzle
# embedding's rate in the same ratio, 1e-2 -> 1e-3, and prints it).
SUDOKU_RUN=${SUDOKU_RUN:-$OUT/runs/sudoku-deep}
SUDOKU_STEPS=${SUDOKU_STEPS:-13250}
SUDOKU_THREADS=${SUDOKU_THREADS:-2}
SUDOKU_SRC=${SUDOKU_SRC:-generate}
SUDOKU_RATING=${SUDOKU_RATING:-15}
SUDOKU_POOL=${SUDOKU_POOL:-4000}
SUDOKU_NEW=${SUDOKU_NEW:-300}
SUDOKU_HELDOUT=${SUDOKU_HELDOUT:-250}
SUDOKU_ADAPT_MIN=${SUDOKU_ADAPT_MIN:-30}
SUDOKU_K=${SUDOKU_K:-16}
SUDOKU_SELECT=${SUDOKU_SELECT:-200}
SUDOKU_MORE=${SUDOKU_MORE:-}  # more arms, all at once after those two, a thread each: tr-rpg, vote
SUDOKU_ADAPT_ARGS=${SUDOKU_ADAPT_ARGS:-adapt.trajectories=16 adapt.steps=$SUDOKU_K adapt.heldout=0.1 \
adapt.round_steps=500 train.lr=2e-4 train.warmup_steps=10}
sudoku_source() {  # sudoku_source HALF NUM SEED FIRST_LINE: the store $D/sudoku-HALF of the new source
  local half=$1 num=$2 seed=$3 first=$4 src=(--source generate --num "$2" --min-rating "$SUDOKU_RATING")
  if [ "$SUDOKU_SRC" != generate ]; then  # sed reads to the end (head would end grep early: SIGPIPE)
    grep -v "^#" "$SUDOKU_SRC" | sed -n "${first},$((first + num - 1))p" > "$D/sudoku-$half.txt"
    src=(--source "$D/sudoku-$half.txt" --allow-multiple)
  fi
  step "sudoku-data-$half" "$D/sudoku-$half" "$TRMKIT" data sudoku "${src[@]}" --test-fraction 1 --aug 0 \
    --seed "$seed" --out "$D/sudoku-$half"
}
sudoku_missed() {  # $D/sudoku-missed.txt: the generated puzzles SUDOKU_RUN answers wrong one-shot at K
  [ -e "$D/sudoku-missed.txt" ] && return
  local seed pid pids=()
  for seed in 103 104; do  # a half of the pool each, at once
    [ -e "$D/pool-$seed.txt" ] || nice -n "$NICE" "$PY" - $((SUDOKU_POOL / 2)) "$seed" "$SUDOKU_RATING" \
      "$D/pool-$seed.txt" > "$OUT/logs/sudoku-pool-$seed.log" 2>&1 <<'EOF' &
import sys
from trmkit.files import write_text
from trmkit.tasks.sudoku.generate import generate_pairs
count, seed, rating, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
write_text(out, "".join("".join(map(str, p.puzzle.tolist())) + "\n"
                         for p in generate_pairs(count, "24-26", seed=seed, min_guesses=rating)))
EOF
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { tail -5 "$OUT"/logs/sudoku-pool-*.log; exit 1; }; done
  cat "$D/pool-103.txt" "$D/pool-104.txt" > "$D/pool.txt"
  step sudoku-pool-answers "$D/pool.answers" "$TRMKIT" predict "$SUDOKU_RUN" "$D/pool.txt" --steps "$SUDOKU_K" \
    --out "$D/pool.answers"
  paste "$D/pool.txt" "$D/pool.answers" | awk -F'\t' '$3 != "valid" {print $1}' > "$D/sudoku-missed.tmp"
  echo "-- sudoku-missed: $(wc -l < "$D/sudoku-missed.tmp") of $(wc -l < "$D/pool.txt") answered wrong one-shot"
  mv "$D/sudoku-missed.tmp" "$D/sudoku-missed.txt"
}
sudoku_at_once() {  # sudoku_at_once ARM...: adapt SUDOKU_RUN to the new source in each ARM's way, all at
  local arm run how pids=()  # once at a thread each (adapt: its default; continue, tr-rpg: --objective; vote: --keep)
  for arm in "$@"; do
    how=(--objective "$arm")
    [ "$arm" = adapt ] && how=()
    [ "$arm" = vote ] && how=(--keep vote)
    run=$R/sudoku-$arm
    [ "$arm" = adapt ] && run=$R/sudoku-adapted
    # shellcheck disable=SC2086
    step "sudoku-$arm" "$run/summary.json" "$TRMKIT" adapt "$SUDOKU_RUN" --data "$D/sudoku-new" "${how[@]}" \
      --minutes "$SUDOKU_ADAPT_MIN" --out "$run" run.threads=1 $SUDOKU_ADAPT_ARGS &
    pids+=($!)
  done
  for arm in "${pids[@]}"; do wait "$arm"; done
}
sudoku_arm() {
  local D=$OUT/data R=$OUT/runs lg=$OUT/logs
  mkdir -p "$D"
  step sudoku-data-17 "$D/sudoku17-hard" "$TRMKIT" data sudoku --source ../shared/data/sudoku/tdoku_17_clue.txt \
    --test-hardest 1000 --aug 8 --out "$D/sudoku17-hard"
  step sudoku-base "$SUDOKU_RUN/summary.json" "$TRMKIT" train configs/sudoku-deep.yaml data.path="$D/sudoku17-hard" \
    run.dir="$SUDOKU_RUN" run.threads="$SUDOKU_THREADS" train.max_steps="$SUDOKU_STEPS" train.max_minutes=0 \
    data.stream=curriculum data.curriculum_samples=$((SUDOKU_STEPS * 32))
  if [ "$SUDOKU_SRC" = missed ]; then sudoku_missed; SUDOKU_SRC=$D/sudoku-missed.txt; fi
  sudoku_source new "$SUDOKU_NEW" 101 1
  sudoku_source heldout "$SUDOKU_HELDOUT" 102 $((SUDOKU_NEW + 1))
  local run name more=() arm
  for arm in $SUDOKU_MORE; do more+=("$R/sudoku-$arm"); done
  for run in "$SUDOKU_RUN" "$R/sudoku-adapted" "$R/sudoku-continue" "${more[@]}"; do
    name=$(basename "$run")
    if [ "$run" = "$R/sudoku-adapted" ]; then sudoku_at_once adapt continue; fi
    # shellcheck disable=SC2086
    if [ "$run" = "${more[0]:-}" ]; then sudoku_at_once $SUDOKU_MORE; fi
    step "sudoku-$name-new" - "$TRMKIT" eval "$run" --data "$D/sudoku-heldout" --steps "$SUDOKU_K" run.threads=2
    step "sudoku-$name-select" - "$TRMKIT" eval "$run" --data "$D/sudoku-heldout" --steps "$SUDOKU_K" --select 16 \
      --select-from variants --limit "$SUDOKU_SELECT" run.threads=2
    step "sudoku-$name-17" - "$TRMKIT" eval "$run" --steps "$SUDOKU_K" run.threads=2
  done
  local b a c
  b=$(basename "$SUDOKU_RUN") a=sudoku-adapted c=sudoku-continue
  echo "== sudoku: $SUDOKU_HELDOUT held-out puzzles of $(basename "$SUDOKU_SRC"), valid one-shot at K=$SUDOKU_K: \
before $(metric "$lg/sudoku-$b-new.log" valid_solution_accuracy), after adapt $(metric "$lg/sudoku-$a-new.log" \
valid_solution_accuracy), continue $(metric "$lg/sudoku-$c-new.log" valid_solution_accuracy) ($SUDOKU_ADAPT_MIN min, \
a thread each); --select 16 on $SUDOKU_SELECT: $(selected "$lg/sudoku-$b-select.log") -> \
$(selected "$lg/sudoku-$a-select.log") (continue $(selected "$lg/sudoku-$c-select.log")); \
17-clue hardest 1,000 exact: $(metric "$lg/sudoku-$b-17.log" exact_accuracy) -> \
$(metric "$lg/sudoku-$a-17.log" exact_accuracy) (continue $(metric "$lg/sudoku-$c-17.log" exact_accuracy))"
  echo "== sudoku: adapt's held-out tenth by the checker, first -> last round: $(heldout_one_shot "$R/$a" 0) -> \
$(heldout_one_shot "$R/$a" -1); continue $(heldout_one_shot "$R/$c" -1)"
  for arm in $SUDOKU_MORE; do
    echo "== sudoku: the $arm arm ($SUDOKU_ADAPT_MIN min): one-shot $(metric "$lg/sudoku-sudoku-$arm-new.log" \
valid_solution_accuracy), --select 16 $(selected "$lg/sudoku-sudoku-$arm-select.log"), 17-clue hardest \
$(metric "$lg/sudoku-sudoku-$arm-17.log" exact_accuracy); its held-out tenth, last round: \
$(heldout_one_shot "$R/sudoku-$arm" -1)"
  done
}

# ============================================================ arm: small (a laptop-size Sudoku, every arm)
# The README demo's preset (configs/sudoku-laptop.yaml) trained SMALL_BASE_MIN minutes on generated puzzles with
# 34-40 givens (its schedule fitted to the time, so it ends at its last rate), adapted on 400 generated puzzles
# with 30-33 givens (seed 77; a fifth held out per round), every arm of SMALL_ARMS at --minutes SMALL_MIN, two at
# a time, a thread each. Scored one-shot (`trmkit predict --steps auto`, the adapt rounds' one-shot) on 500 other
# 30-33 puzzles (seed 78), paired against the pseudo arm, and on 500 other 34-40 puzzles (seed 55, exact): old skill.
SMALL_BASE_MIN=${SMALL_BASE_MIN:-8}
SMALL_MIN=${SMALL_MIN:-8}
SMALL_ARMS=${SMALL_ARMS:-pseudo continue vote tr-rpg}
SMALL_ARGS=${SMALL_ARGS:-train.lr=2e-4 adapt.solve_limit=80}
small_arm() {
  local S=$OUT/small R=$OUT/runs lg=$OUT/logs
  mkdir -p "$S"
  step small-data-old "$S/easy" "$TRMKIT" data sudoku --source generate --num 1100 --givens 34-40 --aug 4 \
    --test-fraction 0.09 --out "$S/easy"
  step small-data-new "$S/new" "$TRMKIT" data sudoku --source generate --num 400 --givens 30-33 --test-fraction 0.5 \
    --seed 77 --out "$S/new"
  step small-data-new500 "$S/new500" "$TRMKIT" data sudoku --source generate --num 500 --givens 30-33 \
    --test-fraction 1 --seed 78 --out "$S/new500"
  step small-data-old500 "$S/old500" "$TRMKIT" data sudoku --source generate --num 500 --givens 34-40 \
    --test-fraction 1 --seed 55 --out "$S/old500"
  [ -e "$S/new500.txt" ] || "$PY" -c "import json, numpy as np, sys; v = json.load(open(sys.argv[1] + '/test/meta.json'))['vocab']
open(sys.argv[2], 'w').write(''.join(''.join(v[t] for t in r) + '\n' for r in np.load(sys.argv[1] + '/test/inputs.npy')))" \
    "$S/new500" "$S/new500.txt"
  step small-base "$R/small-base/summary.json" "$TRMKIT" train configs/sudoku-laptop.yaml data.path="$S/easy" \
    run.dir="$R/small-base" run.threads=2 --minutes "$SMALL_BASE_MIN"
  local arm pids=() runs=(small-base)
  for arm in $SMALL_ARMS; do
    local how="--objective $arm"
    [ "$arm" = vote ] && how="--keep vote"
    runs+=("small-$arm")
    # shellcheck disable=SC2086
    step "small-$arm" "$R/small-$arm/summary.json" "$TRMKIT" adapt "$R/small-base" --data "$S/new" $how \
      --minutes "$SMALL_MIN" --out "$R/small-$arm" run.threads=1 $SMALL_ARGS &
    pids+=($!)
    if [ "${#pids[@]}" = 2 ]; then wait "${pids[@]}"; pids=(); fi
  done
  [ "${#pids[@]}" = 0 ] || wait "${pids[@]}"
  for arm in "${runs[@]}"; do
    step "small-$arm-predict" "$S/$arm.tsv" "$TRMKIT" predict "$R/$arm" "$S/new500.txt" --steps auto --out "$S/$arm.tsv"
    step "small-$arm-old" - "$TRMKIT" eval "$R/$arm" --data "$S/old500" run.threads=1
    echo "== small: $arm: old 500 exact $(metric "$lg/small-$arm-old.log" exact_accuracy)"
  done
  "$PY" - "$S" "${runs[@]}" <<'EOF'
import math, sys
where, runs = sys.argv[1], sys.argv[2:]
right = {r: [line.split("\t")[1].startswith("valid") for line in open(f"{where}/{r}.tsv")] for r in runs}
first = "small-pseudo" if "small-pseudo" in runs else runs[0]
for r in runs:
    d = [a - b for a, b in zip(right[first], right[r])]
    m, n = sum(d) / len(d), len(d)
    se = math.sqrt(sum((x - m) ** 2 for x in d) / max(1, n - 1) / n)
    print(f"== small: {r}: one-shot on 500 new {sum(right[r]) / n:.3f}; {first} - {r} {m:+.3f} (SE {se:.3f})")
EOF
}
# ============================================================ end of small

# ============================================================ arm: controls (TR-RPG and the controls)
# On the latin arm's setting (its data and base run, made first when absent), at the same minutes as its adapt
# run, so every arm spends equal CPU time (the rounds' solving and scoring count in --minutes): the TR-RPG arm
# (--objective tr-rpg: policy gradient from the checker's verdict, KL to the base run), and two controls, each
# named with its reason in its log's first lines: pseudo-labels by plurality vote without the checker
# (--keep vote) and continued training on the original 4 x 4 source (--objective continue). The labelled
# ceiling is the latin arm's. Run with ARMS=latin,controls.
CONTROLS_ARGS=${CONTROLS_ARGS:-}  # more adapt.KEY=VALUE for these arms (e.g. adapt.kl_coef=0.1 adapt.rpg_problems=16)
controls_arm() {
  local L=$OUT R=$OUT/runs lg=$OUT/logs
  [ -e "$R/latin4/summary.json" ] && [ -e "$L/p-l6lab" ] || latin_arm
  local arm
  for arm in tr-rpg vote continue; do
    local how="--objective $arm"
    [ "$arm" = vote ] && how="--keep vote"
    # shellcheck disable=SC2086
    step "controls-$arm" "$R/latin4-$arm/summary.json" "$TRMKIT" adapt "$R/latin4" --data "$L/p-l6in" \
      --checker examples/latin_checker.py:is_latin_square --minutes "$LATIN_ADAPT_MIN" --out "$R/latin4-$arm" \
      $how run.threads=1 $CONTROLS_ARGS
    step "controls-$arm-eval" - "$TRMKIT" eval "$R/latin4-$arm" --data "$L/p-l6lab" run.threads=1
  done
  echo "== controls: 6 x 6 exact one-shot on $LATIN_HELDOUT held-out puzzles (labels), $LATIN_ADAPT_MIN min each: \
adapt $(metric "$lg/latin-after.log" exact_accuracy), tr-rpg $(metric "$lg/controls-tr-rpg-eval.log" \
exact_accuracy), vote $(metric "$lg/controls-vote-eval.log" exact_accuracy), continue $(metric \
"$lg/controls-continue-eval.log" exact_accuracy), labelled ceiling $(metric "$lg/latin-ceiling-eval.log" \
exact_accuracy); before $(metric "$lg/latin-before.log" exact_accuracy)"
  echo "== controls: adapt's held-out part by the checker, first -> last round: tr-rpg $(heldout_one_shot \
"$R/latin4-tr-rpg" 0) -> $(heldout_one_shot "$R/latin4-tr-rpg" -1), vote $(heldout_one_shot "$R/latin4-vote" -1), \
continue $(heldout_one_shot "$R/latin4-continue" -1)"
}
# ============================================================ end of the controls

for arm in ${ARMS//,/ }; do
  "${arm}_arm"
done
