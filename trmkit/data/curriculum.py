"""A store's training split drawn easy -> hard (`data.stream=curriculum`), resumable exactly.

A builder that rates its examples (Sudoku: the solver's guesses) writes a `difficulty.json`
sidecar into each split: {"measure": what the numbers mean, "per_group": one number per group}.
With data.stream=curriculum the training samples come from `RatedSampler` through the
generated stream's machinery (data/generated.py: the i-th sample has its own seeded generator
and a curriculum position progress = i / data.curriculum_samples): at progress q a group is
drawn uniformly from the easiest START + (1 - START) q of the groups (ties in file order), then
one of its puzzles (augmentations) and one example, as the plain store stream does. From q = 1
on, every group is in the pool: sampling with replacement, not in epochs.
"""

from __future__ import annotations

import json
import math

import numpy as np

from trmkit.data.store import REBUILD_HINT, Split, StoreError

DIFFICULTY_FILE = "difficulty.json"
START = 0.2  # the share of the groups, easiest first, the pool starts with


def difficulty_sidecar(per_group: np.ndarray, measure: str) -> dict:
    """The sidecar a builder writes into a split: `write_store(..., extras={split: {DIFFICULTY_FILE: it}})`."""
    return {"measure": measure, "per_group": [int(v) for v in np.asarray(per_group)]}


def read_difficulty(split: Split) -> tuple[np.ndarray, str] | None:
    """(per-group difficulty (G,), what it measures), or None when the split has no sidecar."""
    path = split.path / DIFFICULTY_FILE
    if not path.is_file():
        return None
    side = json.loads(path.read_text())
    values = np.asarray(side["per_group"], dtype=np.int64)
    if len(values) != split.num_groups:
        raise StoreError(f"{path}: {len(values)} ratings for {split.num_groups} groups; {REBUILD_HINT}")
    return values, str(side.get("measure", "difficulty"))


class RatedSampler:
    """One training example at curriculum position `progress`, from the easiest groups first."""

    def __init__(self, split: Split) -> None:
        rated = read_difficulty(split)
        if rated is None:
            raise StoreError(f"{split.path}: no {DIFFICULTY_FILE} (per-group difficulty) for data.stream=curriculum; "
                             "build the store with a task that rates its examples (trmkit data sudoku), or use "
                             "data.stream=store")
        if split.meta.num_puzzle_identifiers > 1:
            raise StoreError(f"{split.path}: data.stream=curriculum serves puzzle identifier 0 only, and this "
                             f"store has {split.meta.num_puzzle_identifiers}; use data.stream=store")
        self.split, (self.difficulty, self.measure) = split, rated
        self.order = np.argsort(self.difficulty, kind="stable")  # (G,) easiest first
        self.groups = np.asarray(split.group_indices, dtype=np.int64)

    def pool(self, progress: float) -> int:
        return max(1, math.ceil((START + (1 - START) * min(1.0, progress)) * len(self.order)))

    def __call__(self, rng: np.random.Generator, progress: float) -> tuple[np.ndarray, np.ndarray]:
        g = self.order[rng.integers(self.pool(progress))]
        puzzle = rng.integers(self.groups[g], self.groups[g + 1])
        row = rng.integers(int(self.split.puzzle_indices[puzzle]), int(self.split.puzzle_indices[puzzle + 1]))
        return np.asarray(self.split.inputs[row]), np.asarray(self.split.labels[row])

    def describe(self, progress: float) -> str:
        n = self.pool(progress)
        top = int(self.difficulty[self.order[n - 1]])
        return f"the easiest {n:,} of {len(self.order):,} training groups ({self.measure} <= {top})"
