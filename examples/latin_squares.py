"""Write Latin-square completion puzzles as JSONL for `trmkit data pairs` (issue 73's own-puzzle case).

    python examples/latin_squares.py --size 4 --num 2000 --blanks 8 --seed 0 --out data/latin4.jsonl
    python examples/latin_squares.py --size 6 --num 200 --blanks 18 --seed 1 --inputs-only --out data/latin6.jsonl

A Latin square of side n holds the symbols 1..n once in every row and every column. Each square is
the cyclic one (row r, column c holds (r + c) mod n + 1) with its rows, its columns and its symbols
shuffled at random; then `--blanks` cells drawn at random are blanked (0). A puzzle may then have
several completions: a checker (examples/latin_checker.py) accepts any of them, a label only one.
Each line is {"input": the grid with its blanks, "output": the square}. `--inputs-only` writes puzzles
with no solution, as a user who only has a checker does: `trmkit data pairs` needs an "output" on every
line (a line without one is skipped as missing_key), so the output is the input itself, blanks and all;
`trmkit adapt` never reads it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def latin_square(n: int, rng: random.Random) -> list[list[int]]:
    """A random Latin square of side n: the cyclic square with rows, columns and symbols permuted."""
    rows, cols, symbols = list(range(n)), list(range(n)), list(range(1, n + 1))
    for order in (rows, cols, symbols):
        rng.shuffle(order)
    return [[symbols[(r + c) % n] for c in cols] for r in rows]


def with_blanks(square: list[list[int]], blanks: int, rng: random.Random) -> list[list[int]]:
    """The square with `blanks` cells, drawn at random, set to 0."""
    n = len(square)
    grid = [row[:] for row in square]
    for cell in rng.sample(range(n * n), blanks):
        grid[cell // n][cell % n] = 0
    return grid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4, help="side n of the square (4 or 6; any 2..9 works)")
    parser.add_argument("--num", type=int, default=1000, help="puzzles to write")
    parser.add_argument("--blanks", type=int, default=None, help="blank cells per puzzle (default: half of n x n)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs-only", action="store_true",
                        help="no solutions: each output is the input itself (pairs needs an output key)")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    n = args.size
    blanks = n * n // 2 if args.blanks is None else args.blanks
    if not 2 <= n <= 9 or not 0 <= blanks <= n * n or args.num < 1:
        parser.error(f"--size {n}, --blanks {blanks}, --num {args.num}: use 2 <= size <= 9, "
                     "0 <= blanks <= size * size and num >= 1")
    rng = random.Random(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for _ in range(args.num):
            square = latin_square(n, rng)
            puzzle = with_blanks(square, blanks, rng)
            f.write(json.dumps({"input": puzzle, "output": puzzle if args.inputs_only else square}) + "\n")
    what = "inputs only (output = input)" if args.inputs_only else "with their squares"
    print(f"wrote {args.out}: {args.num} {n} x {n} puzzles, {blanks} blanks each, {what}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
