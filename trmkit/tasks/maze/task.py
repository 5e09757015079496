"""The maze task: `trmkit data maze` options and builder, the learning-curve set, and TASK."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trmkit.tasks.base import Log, Task
from trmkit.tasks.maze.build import build
from trmkit.tasks.maze.checker import maze_checker
from trmkit.tasks.maze.generate import default_min_path
from trmkit.tasks.maze.sampler import maze_sampler
from trmkit.tasks.maze.score import MazeScorer
from trmkit.tasks.maze.variants import maze_variants
from trmkit.tasks.options import BuildOptions, option

if TYPE_CHECKING:
    from trmkit.config import Config
    from trmkit.model.parts import Part


@dataclass(frozen=True, kw_only=True)
class MazeOptions(BuildOptions):
    """`trmkit data maze`: generated mazes (size, hardness, loops) or a Maze-Hard CSV."""

    source: str = option("generate", "'generate' or a Maze-Hard CSV (source,question,answer,rating)")
    size: int = option(30, "N for generated N x N mazes (Maze-Hard: 30)")
    num: int = option(1000, "mazes to generate")
    min_path: int | None = option(None, "hardness: shortest path of at least this many steps (default "
                                        "110 * N^2 / 900 up to 30 x 30, 110 * N / 30 past it)")
    train_min_path: int | None = option(None, "a curriculum: half the generated training mazes get a path of "
                                              "t..t+2 steps, t drawn uniformly from [this, --min-path]; test "
                                              "mazes keep --min-path (default: none)")
    loops: float = option(0.1, "chance that each inner wall of the carved maze is opened (cycles: several routes)")
    unique_path: bool | None = option(None, "keep only mazes with one shortest path (default: yes up to 30 x 30, "
                                            "no above, where long paths nearly always tie; the metric accepts "
                                            "any shortest path)")
    aug: int = option(0, "dihedral copies per training maze (0-7)")
    limit: int | None = option(None, "use at most N mazes from the source")


def run_build(opts: MazeOptions, log: Log = print) -> dict[str, Any]:
    return build(opts.source, opts.out, size=opts.size, num=opts.num, min_path=opts.min_path, loops=opts.loops,
                 test_fraction=opts.test_fraction, aug=opts.aug, limit=opts.limit, seed=opts.seed,
                 train_min_path=opts.train_min_path, unique_path=opts.unique_path, force=opts.force, log=log)


@dataclass(frozen=True)
class MazeLearnSet:
    """The fixed generated maze set `trmkit bench --learn --task maze` measures on (a LearnSet)."""

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
                    train_min_path=self.train_min_path, force=True, log=log)
        return out["counts"]["train"] // (self.aug + 1), out["counts"]["test"]



def model_parts(cfg: Config) -> tuple[Part, ...]:
    """The maze task's model parts (fold.py), imported when a model is built: model/ loads torch, which
    `trmkit data` and `--help` must not. It reads the maze section too (maze.read)."""
    from trmkit.tasks.maze import fold

    return fold.model_parts(cfg)


model_parts.reads_config = True  # type: ignore[attr-defined]  (model/parts.py build_parts)


TASK = Task(
    name="maze", shape="grid",
    summary="shortest paths through N x N mazes (generated, or Maze-Hard CSV files)",
    options=MazeOptions, build=run_build, scorer=MazeScorer, sampler=maze_sampler,
    variants=maze_variants, model_parts=model_parts, sections=("maze",),
    presets={"paper": "configs/maze-paper.yaml", "laptop": "configs/maze-laptop.yaml"},
    learn_set=MazeLearnSet(), checker=maze_checker,
)
