"""run_bench on the paper's Sudoku config (mlp_t, D=512, 2 layers, T=3, n=6, S=16+81) at batch 32.

Runs float32 and bfloat16 autocast one after the other in this process
(each with its own matmul peak, measured within seconds of its steps) and
writes one JSON result per dtype, usable as `trmkit bench --compare` baselines.

    python benchmarks/paper_sudoku.py --threads 2 --warmup 1 --steps 5 --out bench-results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trmkit import bench
from trmkit.config import Config, ModelConfig, RunConfig, TrainConfig


def paper_config(dtype: str, threads: int, batch: int, mixer: str) -> Config:
    # ModelConfig's defaults are the paper's Sudoku-Extreme settings; the dataset fills V=11, L=81, 1 id
    return Config(run=RunConfig(dtype=dtype, threads=threads, compile="off"),
                  model=ModelConfig(vocab_size=11, seq_len=81, num_puzzle_ids=1, mixer=mixer),
                  train=TrainConfig(batch_size=batch))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--mixer", default="mlp_t")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-memory", action="store_true", help="skip the two memory-probe subprocesses")
    p.add_argument("--out", default="bench-results", help="directory for one JSON per dtype")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for dtype in args.dtypes:
        cfg = paper_config(dtype, args.threads, args.batch, args.mixer)
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        r = bench.run_bench(cfg, steps=args.steps, warmup=args.warmup, memory=not args.no_memory, log=log)
        print("\n".join(bench.format_lines(r)), flush=True)
        path = out / f"paper-sudoku-{args.mixer}-b{args.batch}-{dtype}-t{args.threads}.json"
        bench.save_result(r, path)
        print(f"-> {path}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
