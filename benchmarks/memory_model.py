"""Calibration measurements of the planner's memory model (not part of the test run).

Runs real training steps (trmkit.train.step.train_step, the second step so Adam's state
exists during backward) in fresh processes and compares their peak RSS with
`trmkit.plan.memory_model.estimate_memory`; then times one network call at float32 and bf16.

    python benchmarks/memory_model.py                 # the table in docs/planning.md
    python benchmarks/memory_model.py --quick         # laptop model only
    python benchmarks/memory_model.py --speed-only

Run it on a quiet machine: timings of 2-thread OpenMP kernels collapse when other
processes compete for the cores (memory numbers do not).
"""

from __future__ import annotations

import argparse

import torch

from trmkit.bench.memory import measure_real_step
from trmkit.config import ModelConfig
from trmkit.plan.measure import measure_speed
from trmkit.plan.memory_model import estimate_memory

MiB = 1 << 20
SUDOKU = dict(vocab_size=11, seq_len=81, num_puzzle_ids=1)
# (name, model overrides, global batch, micro-batch, grad checkpointing, dtype)
CASES = [
    ("laptop D=128", dict(hidden_size=128), 8, 8, False, "float32"),
    ("laptop D=128", dict(hidden_size=128), 32, 32, False, "float32"),
    ("laptop D=128", dict(hidden_size=128), 64, 64, False, "float32"),
    ("laptop D=128", dict(hidden_size=128), 256, 16, False, "float32"),
    ("paper D=512", dict(hidden_size=512), 8, 8, False, "float32"),
    ("paper D=512", dict(hidden_size=512), 32, 32, False, "float32"),
    ("paper D=512", dict(hidden_size=512), 64, 64, False, "float32"),
    ("paper D=512", dict(hidden_size=512), 64, 64, True, "float32"),
]


def memory_table(cases: list, h_cycles: int, threads: int) -> None:
    print(f"{'model':<14}{'batch':>6}{'micro':>6}{'ckpt':>6}{'dtype':>9}{'estimated':>11}{'measured':>10}"
          f"{'error':>8}{'time':>8}")
    for name, kw, batch, micro, ckpt, dtype in cases:
        m = ModelConfig(**kw, H_cycles=h_cycles, **SUDOKU)
        measured = measure_real_step(m, batch, micro, ckpt=ckpt, dtype=dtype, threads=threads)
        est = estimate_memory(m, batch, micro, dtype=dtype, grad_checkpointing=ckpt,
                                   baseline=measured["baseline"])
        err = est.train_peak / measured["peak"] - 1
        print(f"{name:<14}{batch:>6}{micro:>6}{'on' if ckpt else 'off':>6}{dtype:>9}"
              f"{est.train_peak / MiB:>8.0f} MiB{measured['peak'] / MiB:>6.0f} MiB{err:>+8.1%}"
              f"{measured['seconds']:>7.1f}s", flush=True)


def speed_table(threads: int) -> None:
    print(f"\none network call (forward + backward) at 8 slots, {threads} threads, torch {torch.__version__}")
    for name, hidden in (("laptop D=128", 128), ("paper D=512", 512)):
        m = ModelConfig(hidden_size=hidden, **SUDOKU)
        t = {dt: measure_speed(m, 8, dt, threads, repeats=3) for dt in ("float32", "bfloat16")}
        print(f"{name:<14} float32 {t['float32']['train'] * 1e3:7.1f} ms (forward {t['float32']['forward'] * 1e3:6.1f})"
              f"   bf16 {t['bfloat16']['train'] * 1e3:7.1f} ms (forward {t['bfloat16']['forward'] * 1e3:6.1f})"
              f"   bf16 speed-up {t['float32']['train'] / t['bfloat16']['train']:.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="laptop model only")
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--h-cycles", type=int, default=1,
                        help="cycles per step (memory does not depend on it; 1 is fastest)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    if not args.speed_only:
        cases = [c for c in CASES if not args.quick or c[0].startswith("laptop")]
        memory_table(cases, args.h_cycles, args.threads)
    speed_table(args.threads)


if __name__ == "__main__":
    main()
