"""torch.compile on the CPU: compile warm-up and step time for eager, model.net and the whole model.

For each target a fresh session is built (same seed), the first steps are
timed separately (they trace and compile: grad and no-grad graphs of the
network, then the backward), then --steps steps are timed. Compile warm-up =
sum of the warm-up steps minus warm-up x the median step.

    python benchmarks/compile_warmup.py --config configs/bench-tiny.yaml
    python benchmarks/compile_warmup.py --batch 8 --threads 2      # paper Sudoku config
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from paper_sudoku import paper_config
from trmkit.bench import session
from trmkit import config as config_mod


def measure(cfg, target: str, warmup: int, steps: int) -> dict[str, float]:
    cfg = config_mod.replace(cfg, "run", compile="off" if target == "eager" else "on")
    torch._dynamo.reset()  # each target compiles from scratch
    s = session.build_session(cfg, session.bench_settings(cfg), compile_target=target)
    warm = session.timed_steps(s, warmup)
    times = session.timed_steps(s, steps)
    med = statistics.median(times)
    return {"warmup_s": sum(warm), "compile_s": max(0.0, sum(warm) - warmup * med), "median_step_s": med,
            "min_step_s": min(times)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="YAML config (default: the paper Sudoku config)")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--targets", nargs="+", default=["eager", "net", "model"])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    cfg = (config_mod.load(args.config, args.overrides) if args.config
           else paper_config(args.dtype, args.threads, args.batch, "mlp_t"))
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    base = None
    for target in args.targets:
        r = measure(cfg, target, args.warmup, args.steps)
        base = base or (r["median_step_s"] if target == "eager" else None)
        speed = f", {base / r['median_step_s']:.2f}x eager" if base else ""
        print(f"{target:6s} compile warm-up {r['compile_s']:7.1f} s | step {r['median_step_s']:.4f} s "
              f"(min {r['min_step_s']:.4f}){speed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
