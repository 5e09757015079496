"""Maze metrics: valid shortest paths, path precision / recall / F1, and the loss on open cells
against the base-rate bound.

A model that copies the walls and knows only how often an open cell is on the path scores the
base-rate bound: the entropy H(p) per open cell, p = path cells / open cells of the evaluated
mazes (0.59 nats on 15 x 15 hard mazes, p = 0.28). Below it the model knows *which* cells are on
the path; cell accuracy can stay at the "mark no path" baseline while this falls, because the
argmax marks a cell only once its probability passes one half. Only open cells count: walls,
S and G are given by the input (train.mask_given leaves them out of the loss too), and a mark
on a wall is not a mark.
"""

from __future__ import annotations

import math

import numpy as np

from trmkit.data.store import Split
from trmkit.data.stream import Batch
from trmkit.tasks.maze.data import is_shortest_path
from trmkit.tasks.maze.generate import OPEN, PATH


def stablemax_nll(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """-log p(label) under stable-max (model/losses.py), per cell, in float64."""
    x = logits.astype(np.float64)
    s = np.where(x >= 0, x + 1, 1 / (1 - np.minimum(x, 0)))
    picked = np.take_along_axis(s, labels[..., None].astype(np.int64), -1)[..., 0]
    return -np.log(picked / s.sum(-1))


class MazeScorer:
    """Every evaluated maze: is the marked path a shortest one, and how do its cells compare."""

    needs_logits = True  # the open-cell loss is computed here, whatever the trainer's loss counts

    def __init__(self, split: Split) -> None:
        self.shape = split.meta.grid_shape or (round(split.meta.seq_len ** 0.5),) * 2
        self.valid = self.other = self.n = 0
        self.tp = self.marked = self.on_path = self.open = 0
        self.nll = 0.0

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray, logits: np.ndarray | None = None) -> None:
        for i, (question, label, pred) in enumerate(zip(batch.inputs, batch.labels, preds)):
            q = np.asarray(question).reshape(self.shape)
            truth = np.asarray(label).reshape(self.shape) == PATH
            marked = (np.asarray(pred).reshape(self.shape) == PATH) & (q == OPEN)  # given cells are copied
            ok = is_shortest_path(q, marked, int(truth.sum()) + 1)
            self.valid += ok
            self.other += ok and not np.array_equal(marked, truth)
            self.n += 1
            self.tp += int((marked & truth).sum())
            self.marked += int(marked.sum())
            self.on_path += int(truth.sum())
            self.open += int((q == OPEN).sum())
            if logits is not None:
                cells = np.asarray(question) == OPEN
                self.nll += float(stablemax_nll(logits[i][cells], np.asarray(label)[cells]).sum())

    def result(self) -> dict[str, float]:
        precision = self.tp / max(1, self.marked)
        recall = self.tp / max(1, self.on_path)
        p = self.on_path / max(1, self.open)
        bound = -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0
        out = {"valid_path_accuracy": self.valid / max(1, self.n), "other_shortest_paths": self.other,
               "path_precision": precision, "path_recall": recall,
               "path_f1": 2 * precision * recall / max(1e-12, precision + recall), "base_rate_loss": bound}
        if self.nll:
            out["open_cell_loss"] = self.nll / max(1, self.open)
            out["loss_over_base_rate"] = out["open_cell_loss"] / bound if bound else float("nan")
        return out
