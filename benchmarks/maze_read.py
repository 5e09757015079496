"""A maze-trace model's one-shot route, read both ways (tasks/maze/fold.py `maze.read`), each with its stopping.

    .venv/bin/python benchmarks/maze_read.py RUN STORE [--cap 128] [--num 100] [--threads 2]

Each maze of STORE's test split thinks twice, as `trmkit eval --steps auto:CAP` does (train/halting.py):
- with maze.read=fold, until its trace's tokens are stable; that last step's logits are read as "fold" (the
  cells whose folded answer is "o") and as "walk at the trace's stop" (the model's arrows followed from S);
- with maze.read=walk, until the walked route is stable (the walk reaching G through cells the wave has
  reached, Part.settled), read as "walk" (the default).
Prints, per batch and at the end, the valid shortest paths of each read, the steps each rule took and, paired
on the same mazes, how many only one of fold and walk solves. No vote, no checker: one try per rule.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import hardware, rundir
from trmkit.api import cache_dir, task_hooks
from trmkit.tasks.maze.data import is_shortest_path
from trmkit.tasks.maze.fold import AnswerFold
from trmkit.tasks.maze.generate import OPEN, PATH
from trmkit.tasks.maze.trace import directions, route
from trmkit.train import evaluate as evaluate_mod
from trmkit.train import halting
from trmkit.train.session import prepare


def solved(grids: np.ndarray, answer: torch.Tensor, lengths: list[int]) -> np.ndarray:
    """(b,) bool: each maze's answer marks a shortest path."""
    tokens = answer.argmax(-1).numpy().reshape(grids.shape)
    return np.array([is_shortest_path(g, (t == PATH) & (g == OPEN), n) for g, t, n in zip(grids, tokens, lengths)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run"), p.add_argument("store")
    p.add_argument("--cap", type=int, default=128)
    p.add_argument("--num", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=25)
    a = p.parse_args()
    run = Path(a.run)
    cfg = config_mod.load(rundir.path(run, rundir.CONFIG),
                          [f"run.dir={run}", f"data.path={a.store}", f"run.threads={a.threads}"])
    quiet = lambda m: None  # noqa: E731
    s = prepare(cfg, hardware.probe(), log=quiet, cache_dir=cache_dir(), evaluate_only=True, **task_hooks(cfg, quiet))
    evaluate_mod.load_weights(s, run)
    model = s.model.eval()
    fold = next(part for part in model.parts if isinstance(part, AnswerFold))
    x_all = np.load(Path(a.store) / "test" / "inputs.npy")[:a.num].astype(np.int64)
    side = int(round(x_all.shape[1] ** 0.5))
    rule, _ = halting.rule_for(a.cap, model.cfg.halt_max_steps)
    got = {name: [] for name in ("fold", "walk at the trace's stop", "walk")}
    used = {"fold": [], "walk": []}
    t0 = time.time()
    for b in range(0, len(x_all), a.batch):
        x = torch.from_numpy(x_all[b:b + a.batch])
        grids = x.numpy().reshape(len(x), side, side)
        lengths = [len(route(g, directions(g)[0])) - 1 for g in grids]
        for rule_of in ("fold", "walk"):
            fold.read = rule_of  # the part the model reads its answer and its stopping by
            with torch.no_grad():
                raw, _, _, steps = halting.think_until_stable(model, x, torch.zeros(len(x), dtype=torch.long),
                                                              s.ctx, rule)
            used[rule_of] += steps.tolist()
            names = ("fold", "walk at the trace's stop") if rule_of == "fold" else ("walk",)
            for name in names:
                fold.read = name.split()[0]
                got[name] += solved(grids, model.answer_logits(raw, x), lengths).tolist()
        print(f"{len(used['walk'])} mazes: " + ", ".join(f"{k} {sum(v)}" for k, v in got.items())
              + f" | steps mean: trace rule {np.mean(used['fold']):.1f}, walk rule {np.mean(used['walk']):.1f}"
              f" | {time.time() - t0:.0f} s", flush=True)
    f, w, at_stop = np.array(got["fold"]), np.array(got["walk"]), np.array(got["walk at the trace's stop"])
    print(f"{a.store}: {len(f)} mazes, valid shortest paths: fold {f.mean():.3f} at {np.mean(used['fold']):.1f} "
          f"steps, walk at the trace's stop {at_stop.mean():.3f}, walk {w.mean():.3f} at "
          f"{np.mean(used['walk']):.1f} steps (only walk {int((w & ~f).sum())}, only fold {int((f & ~w).sum())}); "
          f"cap {a.cap}")


if __name__ == "__main__":
    main()
