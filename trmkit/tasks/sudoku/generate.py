"""Making Sudoku puzzles: the generator and the augmentation.

The generator draws a random full grid (randomized search from an empty
grid), blanks cells in random order while the solution stays unique, and
keeps a puzzle whose hardness (the solver's guesses) is in range. The
augmentation applies the validity-preserving symmetries of Sudoku to a
puzzle and its solution alike.
"""

from __future__ import annotations

import time
from typing import Iterator, Sequence

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.tasks.sudoku.solver import SIZE, SudokuPair, only_digit, search


# ---------------------------------------------------------------- generator


def parse_givens(spec: str | int | Sequence[int]) -> tuple[int, int]:
    """'24-26', '25', 25 or (24, 26) -> inclusive range (low, high)."""
    if isinstance(spec, str):
        parts = spec.replace(" ", "").split("-")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"givens must look like '25' or '24-26', got {spec!r}") from None
    elif isinstance(spec, (int, np.integer)):
        values = [int(spec)]
    else:
        values = [int(v) for v in spec]
    if len(values) == 1:
        values *= 2
    low, high = values if len(values) == 2 else (-1, -1)
    if not 17 <= low <= high <= SIZE:
        raise ValueError(f"givens must be one number or a range within 17..81, got {spec!r}")
    return low, high


def random_solution(rng: np.random.Generator) -> np.ndarray:
    """A random complete grid (81,) uint8: randomized search from an empty grid."""
    return search(np.zeros(SIZE, dtype=np.uint8), limit=1, rng=rng).solutions[0]


def carve(solution: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray | None:
    """Blank cells of ``solution`` in random order while the solution stays unique.

    Returns a puzzle with exactly ``target`` givens, or None if the cells
    left can no longer be removed before reaching it.
    """
    cells = [int(v) for v in solution]
    puzzle = cells[:]
    givens = SIZE
    for i in rng.permutation(SIZE).tolist():
        if givens == target:
            break
        trial = puzzle[:]
        trial[i] = 0
        if only_digit(trial, i, cells[i]):
            puzzle, givens = trial, givens - 1
    return np.array(puzzle, dtype=np.uint8) if givens == target else None


def generate_puzzle(
    rng: np.random.Generator,
    givens: tuple[int, int] = (24, 26),
    min_guesses: int = 0,
    max_guesses: int | None = None,
    max_attempts: int = 200,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One unique puzzle with givens in range and hardness (guesses) in range.

    Returns (puzzle, solution, guesses).
    """
    low, high = givens
    for _ in range(max_attempts):
        solution = random_solution(rng)
        puzzle = carve(solution, int(rng.integers(low, high + 1)), rng)
        if puzzle is None:
            continue
        guesses = search(puzzle, limit=2).guesses
        if guesses >= min_guesses and (max_guesses is None or guesses <= max_guesses):
            return puzzle, solution, guesses
    raise NoPuzzle(
        f"no puzzle with {low}-{high} givens and {min_guesses}..{max_guesses} guesses in "
        f"{max_attempts} attempts; widen the givens range (random removal rarely gets below "
        "about 22 givens) or the hardness range"
    )


class NoPuzzle(RuntimeError):
    """generate_puzzle found no puzzle within its bounds in its attempts."""


RELAX_ROUNDS = 3  # after a widened budget: up to 3 more givens allowed, 3 fewer guesses asked


def relaxed_bounds(givens: tuple[int, int], min_guesses: int) -> list[tuple[tuple[int, int], int]]:
    """The bounds generate_within tries after the first attempts fail: the same once more (a widened
    budget), then one more given allowed and one guess fewer asked a round."""
    low, high = givens
    return [((low, min(SIZE, high + k)), max(0, min_guesses - k)) for k in range(RELAX_ROUNDS + 1)]


def generate_within(
    rng: np.random.Generator, givens: tuple[int, int], min_guesses: int, max_guesses: int | None,
    max_attempts: int = 200,
) -> tuple[np.ndarray, np.ndarray, int, tuple[tuple[int, int], int] | None]:
    """generate_puzzle, but bounds at the edge of its reach do not end a build: when the first
    attempts find none, the search goes on with the same rng (so every puzzle generate_puzzle finds
    is the same here) over relaxed_bounds. Returns (puzzle, solution, guesses, the bounds it took
    when those were not the first attempts' else None)."""
    try:
        return (*generate_puzzle(rng, givens, min_guesses, max_guesses, max_attempts), None)
    except NoPuzzle as err:
        first = err
    for bounds, least in relaxed_bounds(givens, min_guesses):
        try:
            return (*generate_puzzle(rng, bounds, least, max_guesses, max_attempts), (bounds, least))
        except NoPuzzle:
            continue
    raise NoPuzzle(f"{first}; {RELAX_ROUNDS + 1} more rounds up to {RELAX_ROUNDS} more givens found none either")


def generate_pairs(
    count: int,
    givens: str | int | Sequence[int] = "24-26",
    seed: int = 0,
    min_guesses: int = 0,
    max_guesses: int | None = None,
    report: ImportReport | None = None,
) -> Iterator[SudokuPair]:
    """``count`` generated puzzles; puzzle k depends only on (seed, k)."""
    bounds = parse_givens(givens)
    hard: list[tuple[tuple[int, int], int]] = []  # the bounds met by puzzles that needed more attempts
    for k in range(count):
        start = time.perf_counter()
        puzzle, solution, guesses, met = generate_within(
            np.random.default_rng([seed, 0, k]), bounds, min_guesses, max_guesses
        )
        hard += [met] if met is not None else []
        if report is not None:
            report.lines += 1
            report.accepted += 1
            report.seconds += time.perf_counter() - start
        yield SudokuPair(puzzle, solution, f"generated:{k}", guesses)
    if report is not None and hard:
        report.notes.append(_relaxed_note(hard, count, bounds, min_guesses))


def _relaxed_note(hard: list[tuple[tuple[int, int], int]], count: int, givens: tuple[int, int],
                  min_guesses: int) -> str:
    """How many puzzles needed more attempts, and how far their bounds were relaxed."""
    relaxed = [met for met in hard if met != (givens, min_guesses)]
    if not relaxed:
        return f"{len(hard)} of {count} puzzles needed more than the usual 200 attempts"
    high = max(g[1] for g, _ in relaxed)
    least = min(m for _, m in relaxed)
    widened = len(hard) - len(relaxed)
    more = f"; {widened} more needed more than the usual 200 attempts" if widened else ""
    return (f"{len(relaxed)} of {count} puzzles relaxed to {givens[0]}-{high} givens and >= {least} guesses "
            f"(none of their attempts met {givens[0]}-{givens[1]} givens, >= {min_guesses} guesses){more}")


# ---------------------------------------------------------------- augmentation


def random_transforms(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random validity-preserving Sudoku symmetries.

    Returns (cells (count, 81), digits (count, 10)): a transformed grid is
    ``digits[grid[cells]]``. Cells combine a band shuffle, row shuffles
    within bands, a stack shuffle, column shuffles within stacks and a
    transpose with probability 1/2; digits relabel 1..9 and keep 0 (blank).
    """
    rows = _line_orders(count, rng)  # (count, 9)
    cols = _line_orders(count, rng)  # (count, 9)
    cells = rows[:, :, None] * 9 + cols[:, None, :]  # (count, 9, 9)
    flip = rng.random(count) < 0.5  # (count,)
    cells = np.where(flip[:, None, None], cells.transpose(0, 2, 1), cells)
    relabel = np.argsort(rng.random((count, 9)), axis=1) + 1  # (count, 9) permutations of 1..9
    digits = np.concatenate([np.zeros((count, 1), dtype=relabel.dtype), relabel], axis=1)  # (count, 10)
    return cells.reshape(count, SIZE), digits.astype(np.uint8)


def _line_orders(count: int, rng: np.random.Generator) -> np.ndarray:
    """Row (or column) orders that shuffle bands and lines within each band."""
    bands = np.argsort(rng.random((count, 3)), axis=1)  # (count, 3)
    within = np.argsort(rng.random((count, 3, 3)), axis=2)  # (count, 3, 3)
    return (bands[:, :, None] * 3 + within).reshape(count, 9)  # (count, 9)


def apply_transforms(grid: np.ndarray, cells: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """One digit grid (81,) under each transform -> (count, 81) uint8."""
    moved = np.asarray(grid)[cells]  # (count, 81)
    return np.take_along_axis(digits, moved.astype(np.intp), axis=1).astype(np.uint8)


def augment(
    puzzle: np.ndarray, solution: np.ndarray, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` augmented copies of a pair, the same symmetry on puzzle and solution.

    Returns (puzzles (count, 81), solutions (count, 81)).
    """
    cells, digits = random_transforms(count, rng)
    return apply_transforms(puzzle, cells, digits), apply_transforms(solution, cells, digits)
