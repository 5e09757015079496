"""Fresh mazes at every step (data.stream=generate), with a size and path-length curriculum.

The store's meta.json gives the canvas (N x N, the grid the model reads), the loops and the hardness
(min_path; maze.hardness sets another for training, the held-out split keeping the store's). At
curriculum position q (data.curriculum_samples; 1 without one) a maze is n x n, n going up in odd
steps from the smallest stage to N (9 -> 11 -> 13 -> 15 on a 15 x 15 canvas), drawn inside the
canvas at a random place with walls around it (walls are given cells: no loss with train.mask_given,
and a convolution sees no positions, so a 9 x 9 maze in a corner is simply a 9 x 9 maze). Its
shortest path is at least the stage's hardness, Maze-Hard's 110 on 30 x 30 scaled by area; as in the
store's own curriculum (--train-min-path), a share of the mazes (maze.easy_share, half by default)
is easier, with a path of t..t+2 steps for t uniform up to that hardness. With maze.long_share a
share of the hard ones is instead a perfect maze (no loops) whose path is at least twice the
hardness: longer routes than loops allow in the same grid (measured: no help on larger mazes,
docs/results.md). Each maze gets a random symmetry of the square. With data.trace=r
every supervision step gets its own labels: the search's trace after r cells a step (trace.py).
The stream (data/generated.py) gives each sample its own seeded random generator, so a run resumes exactly.
`in_grid(G)` places the same mazes (sizes and hardness of the store's canvas) in a larger G x G grid:
`trmkit adapt` replays a run's own training mazes in the grid of a larger new source (docs/adapt.md).
A maze the generator cannot reach in its draws gets a relaxed bound (generate.generate_within)
rather than stopping the run.
"""

from __future__ import annotations

import copy

import numpy as np

from trmkit.config import Config, ConfigError
from trmkit.data.store import StoreMeta
from trmkit.tasks.base import dihedral
from trmkit.tasks.maze.config import maze_config
from trmkit.tasks.maze.generate import WALL, default_min_path, generate_within
from trmkit.tasks.maze.trace import TRACE_TOKENS, trace_labels

SMALLEST = 9  # the first stage's maze size (clipped to the canvas)


class MazeSampler:
    """One maze at curriculum position `progress` in [0, 1]: the sampler data.stream=generate uses."""

    trace_tokens = TRACE_TOKENS  # the labels data.trace adds beyond the answer's (trace.py)

    def __init__(self, meta: StoreMeta, easy_share: float = 0.5, long_share: float = 0.0, hardness: int = 0,
                 trace: int = 0, trace_steps: int = 0) -> None:
        build = meta.build
        self.easy_share, self.long_share = float(easy_share), float(long_share)
        self.trace, self.trace_steps = int(trace), int(trace_steps)
        if self.trace and self.trace_steps < 1:
            raise ValueError("a trace labels each supervision step: give trace_steps >= 1 (the model's N_sup)")
        self.canvas = int((meta.grid_shape or (build["size"],))[0])
        self.loops = float(build.get("loops", 0.1))
        self.hardness = int(hardness or build.get("min_path") or default_min_path(self.canvas))
        first = min(SMALLEST, self.canvas)
        self.sizes = list(range(first, self.canvas, 2)) + [self.canvas]
        self.grid = self.canvas  # the grid each maze is placed in (in_grid: a larger one)
        if hardness:
            self._check_reachable()

    def _check_reachable(self) -> None:
        """maze.hardness: one maze of that path on the canvas, or a clear error before training starts."""
        try:
            generate_within(self.canvas, np.random.default_rng(0), self.loops, self.hardness)
        except ValueError as err:
            raise ConfigError(f"maze.hardness={self.hardness}: {err}; lower maze.hardness (0: the store's "
                              f"hardness) or train on a larger grid") from None

    def in_grid(self, grid: int) -> "MazeSampler":
        """This sampler's mazes, each placed at a random spot of a grid x grid canvas of walls."""
        if grid < self.canvas:
            raise ValueError(f"a {grid} x {grid} grid cannot hold this sampler's {self.canvas} x {self.canvas} mazes")
        placed = copy.copy(self)
        placed.grid = int(grid)
        return placed

    def size_at(self, progress: float) -> int:
        return self.sizes[min(len(self.sizes) - 1, int(progress * len(self.sizes)))]

    def min_path_at(self, size: int) -> int:
        return self.hardness if size == self.canvas else max(2, round(self.hardness * size * size / self.canvas ** 2))

    def describe(self, progress: float) -> str:
        n = self.size_at(progress)
        longer = (f", {self.long_share:.0%} of the rest without loops and paths >= {2 * self.min_path_at(n)}"
                  if self.long_share else "")
        trace = f", labelled with the search's trace at {self.trace} cells per step" if self.trace else ""
        return (f"{n} x {n} mazes (paths >= {self.min_path_at(n)}, {self.easy_share:.0%} easier{longer}) in the "
                f"{self.grid} x {self.grid} grid{trace}")

    def __call__(self, rng: np.random.Generator, progress: float) -> tuple[np.ndarray, np.ndarray]:
        n = self.size_at(progress)
        hard = self.min_path_at(n)
        if rng.random() < self.easy_share:  # an easier maze: a path of t..t+2 steps
            low = int(rng.integers(2, hard + 1))
            question, answer, *_ = generate_within(n, rng, self.loops, low, max_path=low + 2)
        elif self.long_share and rng.random() < self.long_share:  # a perfect maze with a longer path
            question, answer, *_ = generate_within(n, rng, 0.0, 2 * hard)
        else:
            question, answer, *_ = generate_within(n, rng, self.loops, hard)
        k = int(rng.integers(8))
        question, answer = dihedral(question, k), dihedral(answer, k)
        if n < self.grid:
            at = tuple(int(v) for v in rng.integers(0, self.grid - n + 1, 2))
            question, answer = self._place(question, at), self._place(answer, at)
        if self.trace:  # (N_sup, N*N): each supervision step's labels
            steps = trace_labels(question, self.trace, self.trace_steps)
            return question.reshape(-1), steps.reshape(self.trace_steps, -1)
        return question.reshape(-1), answer.reshape(-1)

    def _place(self, grid: np.ndarray, at: tuple[int, int]) -> np.ndarray:
        canvas = np.full((self.grid, self.grid), WALL, dtype=grid.dtype)
        canvas[at[0]:at[0] + grid.shape[0], at[1]:at[1] + grid.shape[1]] = grid
        return canvas


class MazeSamplerFactory:
    """The maze task's generator for a run (Task.sampler): its knobs from the config's `maze:` section, the
    trace from data.trace (a label per supervision step: model.halt_max_steps of them)."""

    trace_tokens = TRACE_TOKENS  # read by the trainer before any sampler exists (session.trace_outputs)

    @staticmethod
    def trace_reading(cfg: Config) -> str:
        """How evaluation reads the answer of a trace (fold.py), for the trainer's line on data.trace."""
        if maze_config(cfg).read == "walk":
            return ("evaluation reads the route along the model's arrows from S (maze.read=walk; maze.read=fold: "
                    "the cells it marks 'o')")
        return "evaluation reads the cells the model marks 'o' (maze.read=fold; maze.read=walk: its arrows from S)"

    def __call__(self, meta: StoreMeta, cfg: Config) -> MazeSampler:
        knobs = maze_config(cfg)
        return MazeSampler(meta, easy_share=knobs.easy_share, long_share=knobs.long_share, hardness=knobs.hardness,
                           trace=cfg.data.trace, trace_steps=cfg.model.halt_max_steps)


maze_sampler = MazeSamplerFactory()
