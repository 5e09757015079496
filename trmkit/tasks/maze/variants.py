"""Test-time variants of a maze: its 8 symmetries of the square (data/variants.py votes over them).

A turned or mirrored maze has the turned or mirrored shortest path, so each variant's answer,
turned back, is a ballot. A ballot counts only when its marked cells are a path: they join S to
G through open cells with no cell to spare (data.is_path: it reads the input alone, not the
label nor a solver's shortest path). Of two ballots that are paths, the shorter wins (`prefer`): the
answer asked for is the shortest path, and a path's length is read from the answer alone.
"""

from __future__ import annotations

import numpy as np

from trmkit.data.store import StoreMeta
from trmkit.data.variants import Variants
from trmkit.tasks.base import dihedral_cells
from trmkit.tasks.maze.data import is_path
from trmkit.tasks.maze.generate import OPEN, PATH


def maze_variants(meta: StoreMeta, count: int) -> Variants:
    """The first `count` (at most 8) symmetries of the store's N x N mazes."""
    rows, cols = meta.grid_shape or (round(meta.seq_len ** 0.5),) * 2
    if rows != cols:
        raise ValueError(f"maze variants need square grids, the store's are {rows} x {cols}")
    if not 1 <= count <= 8:
        raise ValueError(f"a maze has 8 symmetries (turns and mirror images): use --vote 1..8, not {count}")
    shape = (rows, cols)

    def check(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
        return np.array([is_path(q.reshape(shape), (a.reshape(shape) == PATH) & (q.reshape(shape) == OPEN))
                         for q, a in zip(np.asarray(inputs), np.asarray(answers))], dtype=bool)

    def prefer(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
        return -((np.asarray(answers) == PATH) & (np.asarray(inputs) == OPEN)).sum(1).astype(float)

    tokens = np.tile(np.arange(meta.vocab_size), (count, 1))  # a symmetry keeps every token
    return Variants(dihedral_cells(rows)[:count], tokens, check, prefer)
