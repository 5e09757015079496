"""Sudoku as a task: its `trmkit data sudoku` arguments, the learning-curve set, and TASK.

Beyond the generic metrics (cell, blank-cell and exact accuracy), an evaluation counts valid
solutions (any full grid that keeps the givens and breaks no rule: the score of a store built with
--allow-multiple), and a rated store's splits exact accuracy by rating band (score.py).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trmkit.config import ConfigError
from trmkit.tasks.sudoku.build import BuildReport, build_sudoku
from trmkit.tasks.sudoku.generate import parse_givens
from trmkit.tasks.sudoku.score import sudoku_scorer
from trmkit.tasks.sudoku.variants import sudoku_variants
from trmkit.tasks.base import Log, Task


@dataclass(frozen=True)
class LearnSet:
    """The fixed generated Sudoku set a learning curve (`trmkit bench --learn`) is measured on."""

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
                             num_generate=a["num_generate"], givens=self.givens, seed=self.seed, log=log)
        return built.train_groups, built.test_groups


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", action="append", default=None,
                   help="'generate', a plain-text collection (.txt) or a Sudoku-Extreme CSV; give it several "
                        "times to mix sources (a puzzle read twice is kept once, counted)")
    p.add_argument("--aug", type=int, default=0, help="augmented copies per training puzzle")
    p.add_argument("--limit", type=int, default=None, help="read at most N puzzles from each source")
    p.add_argument("--num", type=int, default=1000, help="puzzles to generate (--source generate)")
    p.add_argument("--givens", default="24-26", help="givens per generated puzzle: N or A-B")
    p.add_argument("--min-guesses", type=int, default=0,
                   help="generated puzzles need at least this many solver guesses (harder)")
    p.add_argument("--min-rating", type=int, default=0,
                   help="keep only puzzles the solver needs at least this many guesses for (the rating; "
                        "0 = singles suffice); with --source generate the generator aims at it")
    p.add_argument("--max-rating", type=int, default=None, help="keep only puzzles rated at most this")
    p.add_argument("--test-hardest", type=int, default=0, metavar="N",
                   help="hold out the N highest-rated puzzles as the test split (instead of --test-fraction)")
    p.add_argument("--allow-multiple", action="store_true",
                   help="keep puzzles with several solutions, labelled with the first one found")


def run_build(args: argparse.Namespace, log: Log = print) -> BuildReport:
    sources = args.source or ["generate"]
    return build_sudoku(
        source=sources, out_dir=Path(args.out), test_fraction=args.test_fraction,
        aug=args.aug, limit=args.limit, num_generate=args.num, givens=args.givens,
        min_guesses=max(args.min_guesses, args.min_rating) if "generate" in sources else args.min_guesses,
        seed=args.seed, require_unique=not args.allow_multiple, min_rating=args.min_rating,
        max_rating=args.max_rating, test_hardest=args.test_hardest, log=log)


TASK = Task(
    name="sudoku", shape="grid", summary="9 x 9 Sudoku (generated, plain-text collections, Sudoku-Extreme CSV)",
    add_arguments=add_arguments, build=run_build, scorer=sudoku_scorer, variants=sudoku_variants,
    presets={"paper": "configs/sudoku-paper.yaml", "laptop": "configs/sudoku-laptop.yaml"},
    learn_set=LearnSet(),
)
