"""Sudoku as a task: its `trmkit data sudoku` options, the learning-curve set, and TASK.

Beyond the generic metrics (cell, blank-cell and exact accuracy), an evaluation counts valid
solutions (any full grid that keeps the givens and breaks no rule: the score of a store built with
--allow-multiple), and a rated store's splits exact accuracy by rating band (score.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trmkit.config import ConfigError
from trmkit.tasks.sudoku.build import BuildReport, build_sudoku
from trmkit.tasks.sudoku.checker import sudoku_checker
from trmkit.tasks.sudoku.generate import parse_givens
from trmkit.tasks.sudoku.score import sudoku_scorer
from trmkit.tasks.sudoku.variants import sudoku_variants
from trmkit.tasks.base import Log, Task
from trmkit.tasks.options import BuildOptions, option


@dataclass(frozen=True)
class SudokuLearnSet:
    """The fixed generated Sudoku set a learning curve (`trmkit bench --learn`) is measured on (a LearnSet)."""

    train_puzzles: int = 1000  # generated puzzles in the training split
    test_puzzles: int = 200  # held-out puzzles (never augmented)
    givens: str = "24-26"  # givens per puzzle: N or A-B
    aug: int = 100  # augmented copies per training puzzle (digit relabelling, transposition, row/column moves)
    seed: int = 0  # generator and split seed
    default_dir: str = "data/learn-sudoku"

    def __post_init__(self) -> None:
        if self.train_puzzles < 1 or self.test_puzzles < 1:
            raise ConfigError("the learning set needs at least one training and one test puzzle")

    @property
    def train_groups(self) -> int:
        return self.train_puzzles

    @property
    def test_groups(self) -> int:
        return self.test_puzzles

    def build_args(self) -> dict[str, Any]:
        """build_sudoku's arguments, named as meta.json's "build" section records them."""
        total = self.train_puzzles + self.test_puzzles
        return {"source": "generate", "num_generate": total, "test_fraction": self.test_puzzles / total,
                "aug": self.aug, "givens": list(parse_givens(self.givens)), "limit": None,
                "min_guesses": 0, "max_guesses": None, "seed": self.seed, "require_unique": True}

    def describe(self) -> str:
        return (f"{self.train_puzzles} + {self.test_puzzles} puzzles with {self.givens} givens, "
                f"aug {self.aug}, seed {self.seed}")

    def build(self, data_dir: Path, log: Log) -> tuple[int, int]:
        a = self.build_args()
        built = build_sudoku("generate", data_dir, test_fraction=a["test_fraction"], aug=self.aug,
                             num_generate=a["num_generate"], givens=self.givens, seed=self.seed, force=True,
                             log=log)
        return built.train_groups, built.test_groups


@dataclass(frozen=True, kw_only=True)
class SudokuOptions(BuildOptions):
    """`trmkit data sudoku`: where the puzzles come from, how many, how hard, and the test split."""

    source: tuple[str, ...] | None = option(
        None, "'generate', a plain-text collection (.txt) or a Sudoku-Extreme CSV; give it several times to mix "
              "sources (a puzzle read twice is kept once, counted); default generate")
    aug: int = option(0, "augmented copies per training puzzle")
    limit: int | None = option(None, "read at most N puzzles from each source")
    num: int = option(1000, "puzzles to generate (--source generate)")
    givens: str = option("24-26", "givens per generated puzzle: N or A-B")
    min_guesses: int = option(0, "generated puzzles need at least this many solver guesses (harder)")
    min_rating: int = option(0, "keep only puzzles the solver needs at least this many guesses for (the rating; "
                                "0 = singles suffice); with --source generate the generator aims at it")
    max_rating: int | None = option(None, "keep only puzzles rated at most this")
    test_hardest: int = option(0, "hold out the N highest-rated puzzles as the test split (instead of "
                                  "--test-fraction)", metavar="N")
    allow_multiple: bool = option(False, "keep puzzles with several solutions, labelled with the first one found")


def run_build(opts: SudokuOptions, log: Log = print) -> BuildReport:
    sources = list(opts.source or ["generate"])
    return build_sudoku(
        source=sources, out_dir=opts.out, test_fraction=opts.test_fraction,
        aug=opts.aug, limit=opts.limit, num_generate=opts.num, givens=opts.givens,
        min_guesses=max(opts.min_guesses, opts.min_rating) if "generate" in sources else opts.min_guesses,
        seed=opts.seed, require_unique=not opts.allow_multiple, min_rating=opts.min_rating,
        max_rating=opts.max_rating, test_hardest=opts.test_hardest, force=opts.force, log=log)


TASK = Task(
    name="sudoku", shape="grid", summary="9 x 9 Sudoku (generated, plain-text collections, Sudoku-Extreme CSV)",
    options=SudokuOptions, build=run_build, scorer=sudoku_scorer, variants=sudoku_variants,
    presets={"paper": "configs/sudoku-paper.yaml", "laptop": "configs/sudoku-laptop.yaml"},
    learn_set=SudokuLearnSet(), checker=sudoku_checker,
)
