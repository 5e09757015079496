#!/usr/bin/env bash
# The CUDA path end to end, on a machine with an NVIDIA GPU (the CPU path is what CI tests).
#
#   bash benchmarks/cuda_check.sh [OUT_DIR]
#
# Uses whatever python3 holds a CUDA build of torch (>= 2.4) and runs trmkit from this
# checkout (PYTHONPATH=.), so nothing is installed. Steps, each of which must succeed:
#   1. trmkit hw: the GPU is seen
#   2. generate a small Sudoku set (CPU)
#   3. train the laptop preset on the GPU (planner: device cuda, bf16), 300 steps
#   4. trmkit eval of that run; accuracy must beat chance (blank-cell accuracy > 0.5, chance 0.11)
#   5. the same preset with gradient checkpointing and a micro-batch (accumulation) for 40 steps,
#      checkpoint at step 20, then --resume to step 60: resume works on the GPU
#   6. 20 steps of the paper Sudoku config at batch 256 (bf16), for its samples/s on this GPU
# A summary goes to OUT_DIR/cuda_check.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/cuda_check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
T="$PY -m trmkit.cli"
W=$(mktemp -d)
say() { echo "== $*" | tee -a "$OUT/cuda_check.txt"; }
: > "$OUT/cuda_check.txt"

say "torch $($PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"
$T hw | tee "$OUT/hw.txt" | grep -i "gpu" | tee -a "$OUT/cuda_check.txt"

say "data"
$T data sudoku --source generate --num 600 --givens 34-40 --aug 4 --test-fraction 0.1 --out "$W/data" \
  > "$OUT/data.log" 2>&1

say "train the laptop preset on the GPU (300 steps)"
$T train configs/sudoku-laptop.yaml run.dir="$W/run" data.path="$W/data" train.max_steps=300 \
  > "$OUT/train.log" 2>&1
grep -E "^plan: (device|dtype|micro_batch|compile)" "$OUT/train.log" | tee -a "$OUT/cuda_check.txt"
tail -n 4 "$OUT/train.log" | tee -a "$OUT/cuda_check.txt"

say "eval"
$T eval "$W/run" > "$OUT/eval.log" 2>&1
tail -n 3 "$OUT/eval.log" | tee -a "$OUT/cuda_check.txt"
$PY - "$W/run/summary.json" <<'EOF' | tee -a "$OUT/cuda_check.txt"
import json, sys
s = json.load(open(sys.argv[1]))
acc = s["final_metrics"].get("eval/blank_accuracy")
print(f"blank accuracy {acc}")
assert acc is not None and acc > 0.5, f"blank accuracy {acc} is not above 0.5"
EOF

say "grad checkpointing + accumulation, checkpoint at 20, resume to 60"
$T train configs/sudoku-laptop.yaml run.dir="$W/ck" data.path="$W/data" train.max_steps=40 \
  run.grad_checkpointing=on train.micro_batch=16 train.checkpoint_every=20 > "$OUT/ckpt.log" 2>&1
$T train --resume "$W/ck" train.max_steps=60 > "$OUT/resume.log" 2>&1
grep -iE "resum|step 60|grad_checkpointing" "$OUT/ckpt.log" "$OUT/resume.log" | tail -n 5 | tee -a "$OUT/cuda_check.txt"

say "paper config, batch 256, 20 steps"
$T train configs/sudoku-paper.yaml run.dir="$W/paper" data.path="$W/data" train.batch_size=256 \
  train.max_steps=20 train.eval_every=0 train.log_every=5 run.compile=off > "$OUT/paper.log" 2>&1
grep -E "^plan: (device|dtype|micro_batch)|samples/s" "$OUT/paper.log" | tail -n 6 | tee -a "$OUT/cuda_check.txt"
say "CUDA check passed"
