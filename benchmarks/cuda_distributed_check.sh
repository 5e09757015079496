#!/usr/bin/env bash
# The distributed path with NCCL, on a machine with NVIDIA GPUs (one process per GPU; one GPU is enough).
#
#   bash benchmarks/cuda_distributed_check.sh [OUT_DIR]
#
# Uses whatever python3 holds a CUDA build of torch (>= 2.4) and runs trmkit from this checkout
# (PYTHONPATH=.), so nothing is installed. Steps, each of which must succeed:
#   1. generate a small Sudoku set (CPU)
#   2. torchrun, one process per GPU: the laptop preset for 40 steps, a checkpoint every 20
#      (the log must say backend nccl and device cuda)
#   3. torchrun --resume to step 60: the per-rank state comes back from the checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/cuda_dist}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
N=${NPROC:-$($PY -c 'import torch; print(torch.cuda.device_count())')}
W=$(mktemp -d)
RUN="$PY -m torch.distributed.run --standalone --nproc-per-node $N -m trmkit train"
$PY -m trmkit.cli data sudoku --source generate --num 600 --givens 34-40 --aug 4 --test-fraction 0.1 \
  --out "$W/data" > "$OUT/data.log" 2>&1
$RUN configs/sudoku-laptop.yaml run.dir="$W/run" data.path="$W/data" train.max_steps=40 \
  train.checkpoint_every=20 train.batch_size=$((64 * N)) > "$OUT/train.log" 2>&1
grep -E "^distributed:|^plan: (device|dtype|accumulation)|^final:" "$OUT/train.log" | tee "$OUT/summary.txt"
grep -q "backend cpu:gloo,cuda:nccl" "$OUT/train.log"
$RUN --resume "$W/run" train.max_steps=60 > "$OUT/resume.log" 2>&1
grep -E "^resumed from|^final:" "$OUT/resume.log" | tee -a "$OUT/summary.txt"
echo "NCCL check passed with $N process(es)" | tee -a "$OUT/summary.txt"
