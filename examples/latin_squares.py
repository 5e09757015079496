"""Write Latin-square completion puzzles as JSONL for `trmkit data pairs` (your own puzzle, adapted to a larger
size in docs/adapt.md).

    python examples/latin_squares.py --size 4 --num 2000 --blanks 8 --seed 0 --out data/latin4.jsonl
    python examples/latin_squares.py --size 6 --num 200 --blanks 18 --seed 1 --inputs-only --out data/latin6.jsonl
    python examples/latin_squares.py --size 4 --symbols 6 --num 2000 --blanks 8 --out data/latin4of6.jsonl

A Latin square of side n holds the symbols 1..n once in every row and every column. Each square is
the cyclic one (row r, column c holds (r + c) mod n + 1) with its rows, its columns and its symbols
shuffled at random; then `--blanks` cells drawn at random are blanked (0; `--blanks 2-18`: a number
drawn uniformly from that range for each puzzle, a pile of easy and hard ones). A puzzle may then have
several completions: a checker (examples/latin_checker.py) accepts any of them, a label only one.
With `--symbols N` (N > n) each square uses n symbols drawn at random from 1..N, and every one of them
is kept among the givens at least once, so the puzzle says which n symbols fill its blanks: 4 x 4
squares over 1..6 teach a model all the symbols a 6 x 6 square needs (docs/adapt.md, Another size).
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


def latin_square(n: int, rng: random.Random, alphabet: int = 0) -> list[list[int]]:
    """A random Latin square of side n: the cyclic square with rows, columns and symbols permuted; its n
    symbols are 1..n, or n drawn at random from 1..alphabet."""
    rows, cols = list(range(n)), list(range(n))
    symbols = rng.sample(range(1, max(n, alphabet) + 1), n)  # a random order of n symbols
    for order in (rows, cols):
        rng.shuffle(order)
    return [[symbols[(r + c) % n] for c in cols] for r in rows]


def with_blanks(square: list[list[int]], blanks: int, rng: random.Random) -> list[list[int]]:
    """The square with `blanks` cells set to 0, drawn at random among all but one cell of each symbol (kept
    so that every symbol of the square is shown)."""
    n = len(square)
    grid = [row[:] for row in square]
    shown = {}
    for cell in rng.sample(range(n * n), n * n):
        shown.setdefault(square[cell // n][cell % n], cell)
    for cell in rng.sample(sorted(set(range(n * n)) - set(shown.values())), blanks):
        grid[cell // n][cell % n] = 0
    return grid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4, help="side n of the square (4 or 6; any 2..9 works)")
    parser.add_argument("--num", type=int, default=1000, help="puzzles to write")
    parser.add_argument("--blanks", default=None, metavar="N|LOW-HIGH",
                        help="blank cells per puzzle, or a range drawn from per puzzle (default: half of n x n)")
    parser.add_argument("--symbols", type=int, default=None, metavar="N",
                        help="each square uses size symbols drawn from 1..N (default N = size: all of them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs-only", action="store_true",
                        help="no solutions: each output is the input itself (pairs needs an output key)")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    args = parser.parse_args(argv)
    n = args.size
    low, _, high = (str(n * n // 2) if args.blanks is None else args.blanks).partition("-")
    if not low.isdigit() or not (high or low).isdigit() or int(low) > int(high or low):
        parser.error(f"--blanks {args.blanks}: give a number or a range LOW-HIGH, e.g. 18 or 2-18")
    blanks = (int(low), int(high or low))
    alphabet = n if args.symbols is None else args.symbols
    if not 2 <= n <= 9 or not blanks[1] <= n * n - n or args.num < 1 or not n <= alphabet <= 9:
        parser.error(f"--size {n}, --blanks {args.blanks}, --num {args.num}, --symbols {alphabet}: use 2 <= size <= 9, "
                     "0 <= blanks <= size * (size - 1) (one given of each symbol stays), num >= 1 and "
                     "size <= symbols <= 9")
    rng = random.Random(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for _ in range(args.num):
            square = latin_square(n, rng, alphabet)
            puzzle = with_blanks(square, rng.randint(*blanks), rng)
            f.write(json.dumps({"input": puzzle, "output": puzzle if args.inputs_only else square}) + "\n")
    what = "inputs only (output = input)" if args.inputs_only else "with their squares"
    span = "-".join(map(str, sorted(set(blanks))))
    print(f"wrote {args.out}: {args.num} {n} x {n} puzzles over the symbols 1..{alphabet}, {span} blanks each, "
          f"{what}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
