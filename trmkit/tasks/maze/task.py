"""The maze task: `trmkit data maze` arguments and builder, the learning-curve set, and TASK."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trmkit.tasks.base import Task
from trmkit.tasks.maze.build import add_arguments, build, run_build
from trmkit.tasks.maze.generate import default_min_path
from trmkit.tasks.maze.sampler import MazeSampler
from trmkit.tasks.maze.score import MazeScorer
from trmkit.tasks.maze.variants import maze_variants

Log = Callable[[str], None]


@dataclass(frozen=True)
class LearnSet:
    """The fixed generated maze set `trmkit bench --learn --task maze` measures on."""

    size: int = 15  # N x N mazes
    train_mazes: int = 10000  # generated training mazes, each with its 7 other symmetries
    test_mazes: int = 500  # held-out mazes (not augmented)
    min_path: int | None = None  # None: default_min_path(size) (28 steps at 15 x 15)
    train_min_path: int | None = 2  # half the training mazes: paths of t..t+2 steps, t in [2, min_path]
    loops: float = 0.1
    aug: int = 7
    seed: int = 0
    default_dir: str = "data/learn-maze"

    @property
    def train_groups(self) -> int:
        return self.train_mazes

    @property
    def test_groups(self) -> int:
        return self.test_mazes

    def build_args(self) -> dict[str, Any]:
        """The settings meta.json's "build" section records (reuse needs them all equal)."""
        total = self.train_mazes + self.test_mazes
        return {"source": "generate", "size": self.size, "num": total, "loops": self.loops,
                "min_path": default_min_path(self.size) if self.min_path is None else self.min_path,
                "train_min_path": self.train_min_path, "test_fraction": self.test_mazes / total, "aug": self.aug,
                "limit": None, "seed": self.seed}

    def describe(self) -> str:
        a = self.build_args()
        curriculum = (f"half the training mazes shorter, from {self.train_min_path} steps" if self.train_min_path
                      else "training mazes alike")
        return (f"{self.train_mazes} + {self.test_mazes} generated {self.size}x{self.size} mazes, shortest paths "
                f">= {a['min_path']} steps ({curriculum}), loops {self.loops}, aug {self.aug}, seed {self.seed}")

    def build(self, data_dir: Path, log: Log) -> tuple[int, int]:
        a = self.build_args()
        out = build("generate", data_dir, size=self.size, num=a["num"], min_path=a["min_path"], loops=self.loops,
                    test_fraction=a["test_fraction"], aug=self.aug, seed=self.seed,
                    train_min_path=self.train_min_path, log=log)
        return out["counts"]["train"] // (self.aug + 1), out["counts"]["test"]


TASK = Task(
    name="maze", shape="grid",
    summary="shortest paths through N x N mazes (generated, or Maze-Hard CSV files)",
    add_arguments=add_arguments, build=run_build, scorer=MazeScorer, sampler=MazeSampler,
    variants=maze_variants,
    presets={"paper": "configs/maze-paper.yaml", "laptop": "configs/maze-laptop.yaml"},
    learn_set=LearnSet(),
)
