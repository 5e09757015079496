"""Maze: shortest paths on N x N grids (the paper's Maze-Hard is 30 x 30).

A maze is a grid of characters: ``#`` wall, space open, ``S`` start, ``G``
goal. The answer is the same grid with the cells of the shortest path from
S to G (S and G excluded) written ``o``. Store tokens: 0 pad (unused, the
grid is never padded), 1 ``#``, 2 space, 3 ``S``, 4 ``G``, 5 ``o``; every
cell is labelled.

Generator (our own; Maze-Hard's public files come from another generator):
a perfect maze is carved by a randomised depth-first search over the cells
at even coordinates (the passages between them at odd ones; for even N the
last row and column stay wall), then each remaining wall between two cells
is opened with probability ``loops``, so that the maze has cycles and the
model has to find the *shortest* of several routes. S is drawn at random, G
at random among the cells at least ``min_path`` steps away; a maze whose
shortest path is not unique is drawn again. Hardness is ``min_path``
(Maze-Hard keeps paths longer than 110 on 30 x 30; the default scales that
by area: ``round(110 * N^2 / 900)``).

Importer: the Maze-Hard CSV layout ``source,question,answer,rating`` with
N*N characters per grid. Each row is checked (size, characters, one S and
one G, the answer is the question plus ``o`` cells that form a shortest
path); a bad row is reported as file:line with the reason and skipped.

Augmentation: the 8 symmetries of the square (dihedral group), applied to
question and answer alike.

Metrics beyond the generic cell and exact accuracy: ``valid_path_accuracy``
counts a predicted path that is *a* shortest path from S to G through open
cells (a different one than the label's counts), and ``other_shortest_paths``
says how many of those differ from the label.

Rooms: generate.py (carve, shortest paths), data.py (text, checks, the CSV importer), build.py
(`trmkit data maze`), sampler.py (fresh mazes with a curriculum, data.stream=generate),
score.py (valid paths, path precision / recall, the loss against the base-rate bound),
variants.py (the 8 symmetries a test-time vote runs, `trmkit eval --vote`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trmkit.tasks.base import Task
from trmkit.tasks.maze.build import add_arguments, build, run_build
from trmkit.tasks.maze.data import MazeError, MazeRow, check_answer, is_path, is_shortest_path, parse, read_csv, render
from trmkit.tasks.maze.generate import (CHARS, GOAL, OPEN, PAD, PATH, START, VOCAB, WALL, carve,
                                            default_min_path, distances, generate_maze, shortest_paths)
from trmkit.tasks.maze.sampler import MazeSampler
from trmkit.tasks.maze.score import MazeScorer
from trmkit.tasks.maze.variants import maze_variants

Log = Callable[[str], None]

__all__ = ["CHARS", "GOAL", "OPEN", "PAD", "PATH", "START", "VOCAB", "WALL", "LearnSet", "MazeError", "MazeRow",
           "MazeSampler", "MazeScorer", "TASK", "build", "carve", "check_answer", "default_min_path", "distances",
           "generate_maze", "is_path", "is_shortest_path", "parse", "read_csv", "render", "shortest_paths"]


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
