"""How a task adds its own metrics to an evaluation, without the trainer knowing the task.

A `Scorer` (docs/tasks.md) sees every evaluated batch with the predicted tokens and the final
halting logit, and its `result()` is merged into the metrics. Optional abilities are their own
small protocols, checked with isinstance: `SavesAnswers` writes the task's answers after the
evaluation (ARC's submission.json, a classifier's classification.json), `NeedsLogits` asks for
the logits as well as the argmax (a classifier's calibration).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from trmkit.data.stream import Batch


class Scorer(Protocol):
    """A task's extra metrics, fed batch by batch during evaluation."""

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        """batch: the evaluated rows (rows included); preds (b, L) token ids; q_halt (b,) final halt logits."""

    def result(self) -> dict[str, float]:
        """Metrics to merge into the evaluation's (names must not clash with the generic ones)."""


@runtime_checkable
class SavesAnswers(Protocol):
    """A scorer that writes the task's answers after evaluation (ARC: submission.json)."""

    def save(self, run_dir: str | os.PathLike[str]) -> Path:
        """Write the answers into the run directory; the file written."""


@runtime_checkable
class NeedsLogits(Protocol):
    """A scorer whose add() also gets logits=(b, positions, classes) as float32 numpy when
    needs_logits is true (a classifier's calibration needs its scores, not just the argmax)."""

    needs_logits: bool
