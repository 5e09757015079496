"""Test-time variants of a Sudoku: the symmetries its training augmentation draws (data/variants.py votes).

Variant v (v >= 1) shuffles bands, stacks, rows within bands and columns within stacks, transposes
with probability 1/2 and relabels the digits (generate.random_transforms), drawn from a generator
with a fixed seed, so an evaluation is repeatable. A ballot counts only when its grid
is full, keeps every given and breaks no row, column or box rule (solver.check_solution: it reads
the puzzle alone, not the label).
"""

from __future__ import annotations

import numpy as np

from trmkit.data.store import StoreMeta
from trmkit.data.variants import Variants
from trmkit.tasks.sudoku.generate import random_transforms
from trmkit.tasks.sudoku.solver import SIZE, check_solution, from_tokens

SEED = 20251  # the variants' generator; a fixed seed keeps every evaluation's variants the same


def keeps_rules(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """(b, 81) puzzle tokens and answer tokens -> (b,) True where the answer is a valid solution."""
    puzzles, grids = from_tokens(inputs), from_tokens(answers)
    return np.array([bool(g.all()) and check_solution(p, g) is None for p, g in zip(puzzles, grids)], dtype=bool)


def sudoku_variants(meta: StoreMeta, count: int) -> Variants:
    """The puzzle itself and `count - 1` random symmetries of it (any count >= 1)."""
    if meta.seq_len != SIZE:
        raise ValueError(f"sudoku variants need 81-cell grids, the store's sequences hold {meta.seq_len}")
    if count < 1:
        raise ValueError(f"--vote {count}: use at least 1 variant")
    cells, digits = random_transforms(count - 1, np.random.default_rng(SEED))
    cells = np.concatenate([np.arange(SIZE)[None], cells]).astype(np.int64)  # (count, 81)
    digits = np.concatenate([np.arange(10)[None], digits.astype(np.int64)])  # (count, 10): digit d -> digits[d]
    tokens = np.concatenate([np.zeros((count, 1), np.int64), digits + 1], axis=1)  # pad stays, token d+1 -> digits[d]+1
    if tokens.shape[1] != meta.vocab_size:
        raise ValueError(f"sudoku variants expect the store's {tokens.shape[1]} tokens, it has {meta.vocab_size}")
    return Variants(cells, tokens, keeps_rules)
