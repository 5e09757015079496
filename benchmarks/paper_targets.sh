#!/usr/bin/env bash
# The speed and memory targets of the paper Sudoku config (mlp_t, D=512, 2 layers, T=3, n=6,
# batch 32, 2 threads), one `trmkit bench` each, one after another on a quiet machine:
#   eager-bf16     bf16 autocast, no compile                       (target: MFU >= 0.70)
#   ckpt-bf16      the same with per-block gradient checkpointing  (target: <= 15 MB per slot)
#   compile-cold   whole-model torch.compile, empty compile cache  (targets: MFU >= 0.85, warm-up <= 60 s)
#   compile-warm   the same again, reusing that cache              (warm-up on a second run)
#   compile-net    torch.compile of model.net only (what `trmkit train` compiles), its own cache
#   eager-fp32     float32, the path of CPUs without fast bf16
#
#   bash benchmarks/paper_targets.sh [OUT_DIR]      # ~15 min on 2 cores; JSON per run in OUT_DIR
#
# The bench reads samples of the right shape from the --learn set (built once, ~20 s), not the
# paper's 1000 x 1000 augmentations. `uptime` before and after each run records the load.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-results}
mkdir -p "$OUT"
T=${TRMKIT:-.venv/bin/trmkit}
.venv/bin/python -c "from trmkit import learn; learn.ensure_dataset(learn.FIXED_SET, learn.DEFAULT_DATA_DIR)"
BASE=(configs/sudoku-paper.yaml train.batch_size=32 data.path=data/learn-sudoku run.threads=2)
CACHE=$(mktemp -d); CACHE_NET=$(mktemp -d)
bench() {  # name, then bench arguments
  local name=$1; shift
  echo "== $name: load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$T" bench "${BASE[@]}" "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "   done: load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/python - "$OUT/$name.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
mem = f"{r['mb_per_slot']:.1f} MB/slot" if r["mb_per_slot"] is not None else "memory not probed"
comp = f", compile {r['compile_seconds']:.1f} s" if r["compile_seconds"] is not None else ""
print(f"   {r['samples_per_s']:.2f} samples/s, MFU {r['mfu']:.3f} (median; fastest step "
      f"{r['mfu_best']:.3f}), {mem}{comp}")
EOF
}
bench eager-bf16 run.dtype=bfloat16 run.compile=off --steps 7 --warmup 1
bench ckpt-bf16 run.dtype=bfloat16 run.compile=off run.grad_checkpointing=on --steps 7 --warmup 1
TORCHINDUCTOR_CACHE_DIR=$CACHE bench compile-cold run.dtype=bfloat16 run.compile=on \
  --compile-target model --steps 7 --warmup 2 --no-memory
TORCHINDUCTOR_CACHE_DIR=$CACHE bench compile-warm run.dtype=bfloat16 run.compile=on \
  --compile-target model --steps 7 --warmup 2 --no-memory
TORCHINDUCTOR_CACHE_DIR=$CACHE_NET bench compile-net run.dtype=bfloat16 run.compile=on \
  --compile-target net --steps 7 --warmup 2 --no-memory
bench eager-fp32 run.dtype=float32 run.compile=off --steps 5 --warmup 1
rm -rf "$CACHE" "$CACHE_NET"
