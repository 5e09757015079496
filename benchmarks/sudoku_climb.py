"""Can a local search make Sudoku puzzles as hard as the hardest known ones, by this project's rating?

The rating (`solver.hardness`) counts the guesses of one deterministic depth-first search, so it
depends on the order in which that search meets cells and digits: the same puzzle under a symmetry
of Sudoku (bands, stacks, lines, transpose, digit relabelling) can rate very differently. This
benchmark climbs from random puzzles with a fixed solution by moves that keep the solution unique
(swap a given for a blank, add one, remove one; the number of givens kept in --givens), in two ways:

- `single`: the objective is the rating itself;
- `robust`: the objective is the median rating over 5 symmetric variants drawn afresh at every
  evaluation, so no fixed search order can be exploited;

and rates each climb's best puzzle again, as the held-out sets are compared: the median over 9
symmetric variants drawn from a seed no climb used. The reference is the same median on the 1,000
highest-rated 17-clue puzzles (the held-out set of the hard-Sudoku recipe), sampled.

    .venv/bin/python benchmarks/sudoku_climb.py --puzzles 5 --moves 10000 --givens 22-26
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.tasks.sudoku.build import read_text
from trmkit.tasks.sudoku.generate import apply_transforms, carve, parse_givens, random_solution, random_transforms
from trmkit.tasks.sudoku.solver import search

COLLECTION = Path(__file__).resolve().parents[1].parent / "shared/data/sudoku/tdoku_17_clue.txt"


def rating(puzzle: np.ndarray) -> int:
    """Guesses of the project's search; -1 when the solution is not unique."""
    result = search(puzzle, limit=2)
    return result.guesses if result.num_solutions == 1 else -1


def variant_median(puzzle: np.ndarray, count: int, rng: np.random.Generator) -> float:
    """The median rating over `count` random symmetric variants of a unique puzzle."""
    cells, digits = random_transforms(count, rng)
    return float(np.median([search(v, limit=2).guesses for v in apply_transforms(puzzle, cells, digits)]))


def propose(puzzle: np.ndarray, solution: np.ndarray, givens: tuple[int, int], rng: np.random.Generator):
    """A neighbour: a given swapped for a blank (60%), else one given removed or added, within range."""
    q = puzzle.copy()
    full, empty = np.flatnonzero(q), np.flatnonzero(q == 0)
    u = rng.random()
    if u < 0.6 or (len(full) == givens[0] and u < 0.8) or (len(full) == givens[1] and u >= 0.8):
        q[rng.choice(full)] = 0
        j = rng.choice(empty)
        q[j] = solution[j]
    elif u < 0.8:
        q[rng.choice(full)] = 0
    else:
        j = rng.choice(empty)
        q[j] = solution[j]
    return q


def climb(kind: str, givens: tuple[int, int], moves: int, rng: np.random.Generator):
    """Simulated annealing on the objective `kind`; returns (best puzzle, its objective)."""
    solution = random_solution(rng)
    puzzle = None
    while puzzle is None:
        puzzle = carve(solution, int(rng.integers(givens[0], givens[1] + 1)), rng)
    current = float(rating(puzzle)) if kind == "single" else variant_median(puzzle, 5, rng)
    best = (current, puzzle)
    for _ in range(moves):
        q = propose(puzzle, solution, givens, rng)
        quick = rating(q)
        if quick < 0 or quick < 0.3 * current:  # not unique, or clearly easier: no full evaluation
            continue
        value = float(quick) if kind == "single" else variant_median(q, 5, rng)
        if value >= current or rng.random() < np.exp((value - current) / max(1.0, 0.1 * current)):
            puzzle, current = q, value
            if kind == "robust" and current > best[0]:
                current = variant_median(puzzle, 5, rng)  # measured again: a lucky draw does not set the record
            if current > best[0]:
                best = (current, puzzle)
    return best[1], best[0]


def reference(sample: int) -> list[float]:
    """The variant median of `sample` of the 1,000 highest-rated 17-clue puzzles."""
    if not COLLECTION.is_file():
        raise SystemExit(f"{COLLECTION} is missing: the reference needs ../shared/data (its README)")
    pairs = list(read_text(COLLECTION, ImportReport(COLLECTION.name)))  # solved and rated on reading
    grids = np.array([pair.puzzle for pair in pairs])
    ratings = np.array([pair.guesses for pair in pairs])
    top = np.argsort(-ratings, kind="stable")[:1000]
    rng = np.random.default_rng(12345)
    picked = rng.choice(top, sample, replace=False)
    print(f"reference: the 1,000 highest-rated of {len(grids):,} 17-clue puzzles rate "
          f"{ratings[top].min()}-{ratings[top].max()} (median {np.median(ratings[top]):.0f}) by the search")
    return [variant_median(grids[i], 9, rng) for i in picked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--puzzles", type=int, default=5, help="climbs of each kind")
    parser.add_argument("--moves", type=int, default=10000, help="moves per climb")
    parser.add_argument("--givens", default="22-26")
    parser.add_argument("--reference", type=int, default=60, help="held-out puzzles sampled (0: none)")
    args = parser.parse_args()
    givens = parse_givens(args.givens)
    if args.reference:
        ref = reference(args.reference)
        print(f"reference: median over 9 symmetric variants: median {np.median(ref):.0f}, "
              f"10th-90th percentile {np.percentile(ref, 10):.0f}-{np.percentile(ref, 90):.0f}")
    for kind in ("single", "robust"):
        for k in range(args.puzzles):
            start = time.perf_counter()
            puzzle, value = climb(kind, givens, args.moves, np.random.default_rng([1, k]))
            fresh = variant_median(puzzle, 9, np.random.default_rng([2, k]))
            print(f"{kind} climb {k}: {np.count_nonzero(puzzle)} givens, objective {value:.0f}, "
                  f"median over 9 fresh variants {fresh:.0f}, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
