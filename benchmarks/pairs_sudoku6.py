"""Write 6 x 6 Sudoku pairs as JSONL for `trmkit data pairs` (the "your own puzzle" measurement).

    python benchmarks/pairs_sudoku6.py --num 2000 --out sudoku6.jsonl

Each line is {"input": 6 x 6 grid, 0 = blank, "output": the solved grid}; boxes are 2 rows x 3
columns. A full grid is drawn at random (backtracking over shuffled digits), then cells are
blanked in random order, each kept blank only while the puzzle keeps exactly one solution, until
`--blanks` cells are blank (18 of 36: half the cells given). A grid that cannot reach that many
blanks with a unique solution is drawn again; after `--tries` draws the last puzzle is kept with
several solutions (labelled with the drawn grid), and the count of such puzzles is printed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

N, BOX_R, BOX_C = 6, 2, 3


def candidates(grid: list[list[int]], r: int, c: int) -> set[int]:
    """Digits 1..6 that fit at (r, c): not in its row, column or 2 x 3 box."""
    used = set(grid[r]) | {grid[i][c] for i in range(N)}
    br, bc = r - r % BOX_R, c - c % BOX_C
    used |= {grid[i][j] for i in range(br, br + BOX_R) for j in range(bc, bc + BOX_C)}
    return set(range(1, N + 1)) - used


def count_solutions(grid: list[list[int]], limit: int = 2, rng: random.Random | None = None) -> int:
    """Solutions of `grid` (filled in place when rng is given: the first one found), up to `limit`."""
    best = None
    for r in range(N):
        for c in range(N):
            if grid[r][c] == 0:
                options = candidates(grid, r, c)
                if best is None or len(options) < len(best[2]):
                    best = (r, c, options)
    if best is None:
        return 1
    r, c, options = best
    order = sorted(options)
    if rng is not None:
        rng.shuffle(order)
    found = 0
    for digit in order:
        grid[r][c] = digit
        found += count_solutions(grid, limit - found, rng)
        if found >= limit or (rng is not None and found):
            if rng is None:
                grid[r][c] = 0
            return found
    grid[r][c] = 0
    return found


def full_grid(rng: random.Random) -> list[list[int]]:
    grid = [[0] * N for _ in range(N)]
    count_solutions(grid, limit=1, rng=rng)
    return grid


def puzzle(rng: random.Random, blanks: int, tries: int) -> tuple[list[list[int]], list[list[int]], bool]:
    """(puzzle, solution, unique): `blanks` cells blanked, uniquely solvable when `tries` draws allow."""
    for _ in range(tries):
        solution = full_grid(rng)
        grid = [row[:] for row in solution]
        cells = [(r, c) for r in range(N) for c in range(N)]
        rng.shuffle(cells)
        done = 0
        for r, c in cells:
            grid[r][c] = 0
            if count_solutions([row[:] for row in grid]) == 1:
                done += 1
                if done == blanks:
                    return grid, solution, True
            else:
                grid[r][c] = solution[r][c]
    for r, c in cells[:blanks]:  # the last draw, with several solutions
        grid[r][c] = 0
    for r, c in cells[blanks:]:
        grid[r][c] = solution[r][c]
    return grid, solution, False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num", type=int, default=2000, help="pairs to write")
    p.add_argument("--blanks", type=int, default=18, help="blank cells per puzzle (of 36)")
    p.add_argument("--tries", type=int, default=20,
                   help="full grids drawn per puzzle before accepting several solutions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSONL file to write")
    args = p.parse_args(argv)
    if not 0 <= args.blanks <= N * N:
        p.error(f"--blanks must be in [0, {N * N}]")
    rng = random.Random(args.seed)
    several = 0
    with open(args.out, "w", encoding="utf-8") as f:
        for _ in range(args.num):
            grid, solution, unique = puzzle(rng, args.blanks, args.tries)
            several += not unique
            f.write(json.dumps({"input": grid, "output": solution}) + "\n")
    print(f"wrote {args.num} 6 x 6 puzzles with {args.blanks} blanks to {Path(args.out)} "
          f"({args.num - several} with a unique solution, {several} with several)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
