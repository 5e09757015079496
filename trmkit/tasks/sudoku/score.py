"""Sudoku's metrics beyond the generic ones: valid solutions, and exact accuracy per rating band.

- ``valid_solution_accuracy``: the answer is a full grid that keeps every given and breaks no row,
  column or box rule (variants.keeps_rules: it reads the puzzle, not the label). On a store of
  puzzles with one solution it equals exact accuracy; on one built with ``--allow-multiple``
  (labelled with the first solution the solver found) it is the score, and ``other_solutions``
  counts the valid answers that differ from the label.
- On a rated store (`trmkit data sudoku` keeps each puzzle's rating, the solver's guesses,
  data/curriculum.DIFFICULTY_FILE), exact accuracy by the bands of build.RATING_BANDS ("0" =
  singles suffice ... "100+"): `exact_by_rating/10-99` and `puzzles_by_rating/10-99` (per-band
  keys are in the run summary and the JSON, not the one-line log). A store built before ratings
  gets no bands.
"""

from __future__ import annotations

import numpy as np

from trmkit.data.curriculum import read_difficulty
from trmkit.data.store import Split
from trmkit.data.stream import Batch
from trmkit.tasks.sudoku.build import RATING_BANDS, rating_band
from trmkit.tasks.sudoku.variants import keeps_rules


class SudokuScorer:
    """Valid solutions of every evaluated puzzle, and its exact accuracy tallied by rating band."""

    def __init__(self, split: Split, ratings: np.ndarray | None) -> None:
        self.split, self.ratings = split, ratings
        self.right = {name: 0 for name, _, _ in RATING_BANDS}
        self.seen = dict.fromkeys(self.right, 0)
        self.valid = self.other = self.n = 0

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        labels = np.asarray(batch.labels)
        answers = np.asarray(preds)[:, :labels.shape[1]]
        scored = labels != self.split.meta.ignore_label_id
        exact = ((answers == labels) | ~scored).all(1)
        valid = keeps_rules(np.asarray(batch.inputs), answers)
        self.n += len(labels)
        self.valid += int(valid.sum())
        self.other += int((valid & ~exact).sum())
        if self.ratings is not None:
            self._add_bands(batch, exact)

    def _add_bands(self, batch: Batch, exact: np.ndarray) -> None:
        puzzles = np.searchsorted(self.split.puzzle_indices, batch.rows, side="right") - 1
        groups = np.searchsorted(self.split.group_indices, puzzles, side="right") - 1
        for g, ok in zip(groups, exact):
            band = rating_band(int(self.ratings[g]))
            self.seen[band] += 1
            self.right[band] += bool(ok)

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {"valid_solution_accuracy": self.valid / max(1, self.n),
                                 "other_solutions": self.other}
        for band, n in self.seen.items():
            if n:
                out[f"exact_by_rating/{band}"] = self.right[band] / n
                out[f"puzzles_by_rating/{band}"] = n
        return out


def sudoku_scorer(split: Split) -> SudokuScorer:
    """The scorer of any Sudoku store (rating bands only where the store keeps ratings)."""
    rated = read_difficulty(split)
    return SudokuScorer(split, rated[0] if rated is not None else None)
