"""Where the time of one training step goes: phases, and torch.profiler's top ops.

Phases (wall time, median over --reps, after one warm-up step):
  no-grad cycles   embed + the first T-1 recursion cycles under torch.no_grad
  grad forward     the last cycle (n+1 network calls) + lm_head + q head
  loss             stable-max cross-entropy + halting loss (float64)
  backward         (loss / B).backward()
  optimizer        dense Adam-atan2 (or AdamW) + sparse sign-SGD + EMA update
The phases re-run TRM.forward's steps by hand (embed, latent_recursion, heads),
so keep them in step with trmkit/model/trm.py. Then one whole step (the loop's run_step) runs
under torch.profiler and the top ops by self CPU time are printed.

    python benchmarks/step_breakdown.py --dtype float32 --threads 2 --batch 32
    python benchmarks/step_breakdown.py --config configs/bench-tiny.yaml
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from paper_sudoku import paper_config
from trmkit import config as config_mod
from trmkit.bench.session import BenchSession, bench_settings, build_session
from trmkit.model.losses import act_loss
from trmkit.train.loop import run_step
from trmkit.train.step import apply_updates, refill


def phase_times(s: BenchSession) -> dict[str, float]:
    """One step split into phases (seconds); the carry is not advanced."""
    model, st, cfg = s.model, s.state, s.model.cfg
    refill(model, st, s.stream, s.ctx)
    B = st.carry.z_H.shape[0]
    marks = [time.perf_counter()]
    with s.ctx.autocast():
        x, reads = model.embed_input(st.inputs, st.puzzle_ids)
        positions = model._positions(x.shape[1])
        z_H, z_L = st.carry.z_H, st.carry.z_L
        with torch.no_grad():
            for _ in range(cfg.H_cycles - 1):
                z_H, z_L = model.latent_recursion(z_H, z_L, x, positions)
        marks.append(time.perf_counter())
        z_H, z_L = model.latent_recursion(z_H, z_L, x, positions)
        logits = model.output(z_H, reads)
        q = model.halt_logit(z_H)
    marks.append(time.perf_counter())
    loss, _ = act_loss(logits, st.labels, q, cfg.halt_loss_weight, s.ctx.label_weights)
    marks.append(time.perf_counter())
    (loss / B).backward()
    marks.append(time.perf_counter())
    apply_updates(model, s.opts)
    marks.append(time.perf_counter())
    names = ("no-grad cycles", "grad forward", "loss", "backward", "optimizer")
    return {n: b - a for n, a, b in zip(names, marks, marks[1:])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="YAML config (default: the paper Sudoku config)")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--rows", type=int, default=15, help="profiler table rows")
    args = p.parse_args()
    if args.config:
        cfg = config_mod.load(args.config, args.overrides)
    else:
        cfg = paper_config(args.dtype, args.threads, args.batch, "mlp_t")
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    s = build_session(cfg, bench_settings(cfg))
    run_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)  # warm-up
    runs = [phase_times(s) for _ in range(args.reps)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    total = sum(med.values())
    print(f"phases ({cfg.run.dtype}, batch {cfg.train.batch_size}, {torch.get_num_threads()} threads, "
          f"median of {args.reps}):")
    for k, v in med.items():
        print(f"  {k:15s} {v:8.3f} s  {v / total:6.1%}")
    print(f"  {'total':15s} {total:8.3f} s")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
