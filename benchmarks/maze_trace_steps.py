"""Per supervision step, how a maze-trace model's argmax compares with the true trace (docs/adapt.md).

    .venv/bin/python benchmarks/maze_trace_steps.py RUN STORE [--checkpoint STEP] [--num 4] [--steps 80]

For the first NUM mazes of STORE's test split, at each step k: the share of route cells and of off-route
open cells whose token is the trace's (tasks/maze/trace.py, the run's data.trace speed), the share of
each marked as route (an "o" token), the share of route cells the true trace has marked by then, and the
share of mazes whose marked cells are a shortest path (the trace's "o" argmax, and the folded answer
that evaluation reads: the one-shot score if it stopped there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import hardware, rundir
from trmkit.api import cache_dir, task_hooks
from trmkit.model.losses import merge_logits
from trmkit.tasks.maze.data import is_shortest_path
from trmkit.tasks.maze.generate import OPEN, PATH
from trmkit.tasks.maze.trace import FIRST_TRACE, directions, trace_labels
from trmkit.tasks.maze.trace import route as traced_route
from trmkit.train import evaluate as evaluate_mod
from trmkit.train.session import prepare


def exact(questions: np.ndarray, marked: np.ndarray, lengths: list[int], side: int) -> float:
    """Share of mazes whose marked cells are a shortest path (the one-shot score at this step)."""
    return float(np.mean([is_shortest_path(q, m.reshape(side, side), n)
                          for q, m, n in zip(questions, marked, lengths, strict=True)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run"), p.add_argument("store")
    p.add_argument("--checkpoint", type=int, default=None)
    p.add_argument("--num", type=int, default=4)
    p.add_argument("--steps", type=int, default=80)
    a = p.parse_args()
    run = Path(a.run)
    cfg = config_mod.load(rundir.path(run, rundir.CONFIG), [f"run.dir={run}", f"data.path={a.store}"])
    quiet = lambda m: None  # noqa: E731
    s = prepare(cfg, hardware.probe(), log=quiet, cache_dir=cache_dir(), evaluate_only=True, **task_hooks(cfg, quiet))
    evaluate_mod.load_weights(s, run, a.checkpoint)
    split = Path(a.store) / "test"
    x = np.load(split / "inputs.npy")[:a.num].astype(np.int64)
    y = np.load(split / "labels.npy")[:a.num]
    side = int(round(len(x[0]) ** 0.5))
    truth = np.stack([trace_labels(q.reshape(side, side), cfg.data.trace, a.steps).reshape(a.steps, -1) for q in x])
    grids = x.reshape(len(x), side, side)
    lengths = [len(traced_route(q, directions(q)[0])) - 1 for q in grids]  # once, not at every printed step
    route, off = y == PATH, (x == OPEN) & (y != PATH)
    carry = s.model.initial_carry(len(x), "cpu")
    zh, zl, inputs, pids = carry.z_H, carry.z_L, torch.from_numpy(x), torch.zeros(len(x), dtype=torch.long)
    with torch.no_grad():
        for k in range(1, a.steps + 1):
            zh, zl, logits, _ = s.model(zh, zl, inputs, pids)
            got, want = logits.argmax(-1).numpy(), truth[:, k - 1]
            folded = merge_logits(logits, s.model.cfg.trace_ids, s.model.cfg.loss).argmax(-1).numpy() == PATH
            marked = (got >= FIRST_TRACE + 4) & (got < FIRST_TRACE + 8)
            if k % 8 == 0 or k in (1, 2, 4):
                share = lambda m, where: (m & where).sum() / where.sum()  # noqa: E731
                print(f"k={k:3d} trace route {share(got == want, route):.3f} off {share(got == want, off):.3f} | "
                      f"marked route {share(marked, route):.3f} off {share(marked, off):.3f} | "
                      f"true trace marked {share(want >= FIRST_TRACE + 4, route):.3f} | "
                      f"exact {exact(grids, marked, lengths, side):.3f} "
                      f"folded {exact(grids, folded, lengths, side):.3f}", flush=True)


if __name__ == "__main__":
    main()
