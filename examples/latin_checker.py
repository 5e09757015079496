"""A checker for Latin-square completion (examples/latin_squares.py): `trmkit adapt ... --checker
examples/latin_checker.py:is_latin_square` keeps the answers it accepts (docs/tasks.md, Checkers).

It is called with one puzzle at a time in its own form, as the JSONL file holds it: `input` the grid with
0 for a blank, `output` the model's answer, both lists of lists of ints. It reads nothing else.
"""


def is_latin_square(input, output) -> bool:
    """True when every row and every column of `output` holds 1..n once and every given of `input` is kept."""
    n = len(output)
    symbols = set(range(1, n + 1))
    if len(input) != n or any(len(row) != n for row in output):
        return False
    rows_ok = all(set(row) == symbols for row in output)
    cols_ok = all({output[r][c] for r in range(n)} == symbols for c in range(n))
    givens_kept = all(g in (0, a) for grow, arow in zip(input, output) for g, a in zip(grow, arow))
    return rows_ok and cols_ok and givens_kept
