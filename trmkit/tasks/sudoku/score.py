"""Sudoku's metrics beyond the generic ones: exact accuracy per rating band.

A store built by `trmkit data sudoku` keeps each puzzle's rating (the solver's guesses,
data/curriculum.DIFFICULTY_FILE); the scorer splits exact accuracy by the bands of
build.RATING_BANDS ("0" = singles suffice ... "100+"), so an evaluation shows where the hard
tail stands: `exact_by_rating/10-99` and `puzzles_by_rating/10-99` in the metrics (per-band keys
are in the run summary and the JSON, not the one-line log). A store without ratings (built
before them) gets no scorer: the generic metrics only.
"""

from __future__ import annotations

import numpy as np

from trmkit.data.curriculum import read_difficulty
from trmkit.data.store import Split
from trmkit.data.stream import Batch
from trmkit.tasks.sudoku.build import RATING_BANDS, rating_band


class RatingScorer:
    """Exact accuracy of every evaluated puzzle, tallied by its rating band."""

    def __init__(self, split: Split, ratings: np.ndarray) -> None:
        self.split, self.ratings = split, ratings
        self.right = {name: 0 for name, _, _ in RATING_BANDS}
        self.seen = dict.fromkeys(self.right, 0)

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        labels = np.asarray(batch.labels)
        scored = labels != self.split.meta.ignore_label_id
        exact = ((np.asarray(preds)[:, :labels.shape[1]] == labels) | ~scored).all(1)
        puzzles = np.searchsorted(self.split.puzzle_indices, batch.rows, side="right") - 1
        groups = np.searchsorted(self.split.group_indices, puzzles, side="right") - 1
        for g, ok in zip(groups, exact):
            band = rating_band(int(self.ratings[g]))
            self.seen[band] += 1
            self.right[band] += bool(ok)

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for band, n in self.seen.items():
            if n:
                out[f"exact_by_rating/{band}"] = self.right[band] / n
                out[f"puzzles_by_rating/{band}"] = n
        return out


def rating_scorer(split: Split) -> RatingScorer | None:
    """The scorer for a rated store (None for a store built before ratings were kept)."""
    rated = read_difficulty(split)
    return RatingScorer(split, rated[0]) if rated is not None else None
