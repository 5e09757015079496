"""Same-process A/B of `run.fused_inference`: one session of the paper Sudoku config,
its steps alternating with the fused no-gradient path off and on (off, on, on, off, ...), so a busy
machine slows both sides alike; the ratio of each round (off time / on time) is printed.

    python benchmarks/fused_ab.py --dtype float32 --threads 2 --batch 32 --rounds 6

The no-gradient calls (the first T-1 cycles of each supervision step: 14 of the 21 network calls at
T=3, n=6) run each SwiGLU as three oneDNN matmuls with SiLU, the gate-up product and the residual add
in their epilogues (trmkit/model/layers.py, SwiGLU.fused_residual). To see what an AVX2-only laptop
would do on a CPU that has more, cap the instruction sets before torch starts:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/fused_ab.py

(the kernels then are the AVX2 ones; the core, its caches and its memory stay this machine's).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB, SEQ, PUZZLE_IDS = 11, 81, 1  # Sudoku: pad + 10 digits, 81 cells, one puzzle identifier


def session(batch: int, dtype: str, config: str):
    sys.path.insert(0, str(ROOT))
    from trmkit import config as config_mod
    from trmkit.bench.session import bench_settings, build_session

    cfg = config_mod.load(ROOT / "configs" / config, [
        f"train.batch_size={batch}", f"train.micro_batch={batch}", f"run.dtype={dtype}", "run.compile=off",
        "run.grad_checkpointing=off", "run.fused_inference=on", "data.path=",
        f"model.vocab_size={VOCAB}", f"model.seq_len={SEQ}", f"model.num_puzzle_ids={PUZZLE_IDS}"])
    return build_session(cfg, bench_settings(cfg), compile_target="model")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--config", default="sudoku-paper.yaml", help="a preset in configs/")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trmkit.train.loop import run_step

    s = session(args.batch, args.dtype, args.config)

    def step(fused: bool) -> float:
        s.model.net.fused_inference = fused
        t0 = time.perf_counter()
        run_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        step(False), step(True)
    times: dict[bool, list[float]] = {False: [], True: []}
    ratios = []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        t = {fused: step(fused) for fused in order}
        for fused in t:
            times[fused].append(t[fused])
        ratios.append(t[False] / t[True])
        print(f"round {r + 1}: off {t[False]:.3f} s, on {t[True]:.3f} s, speed-up {ratios[-1]:.3f}", flush=True)
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    print(f"{args.config} {args.dtype} batch {args.batch}, {args.threads} threads: median step off "
          f"{statistics.median(times[False]):.3f} s, on {statistics.median(times[True]):.3f} s; speed-up median "
          f"{statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}) over {args.rounds} rounds")


if __name__ == "__main__":
    main()
