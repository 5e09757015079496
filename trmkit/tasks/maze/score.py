"""Maze metrics: valid shortest paths, path precision / recall / F1, and the loss on open cells
against the base-rate bound.

A model that copies the walls and knows only how often an open cell is on the path scores the
base-rate bound: the entropy H(p) per open cell, p = path cells / open cells of the evaluated
mazes (0.59 nats on 15 x 15 hard mazes, p = 0.28). Below it the model knows *which* cells are on
the path; cell accuracy can stay at the "mark no path" baseline while this falls, because the
argmax marks a cell only once its probability passes one half. Only open cells count: walls,
S and G are given by the input (train.mask_given leaves them out of the loss too), and a mark
on a wall is not a mark.

The argmax is one operating point. `path_recall_at_precision_0.8` reads the whole
precision / recall curve of p(path) over the open cells (every threshold, in steps of 1/1000):
the largest share of path cells a threshold finds while at least 80% of what it marks is path.

Valid shortest paths are also tallied by the length of the maze's shortest path, in bands that
double (`valid_by_length/40-79` and `mazes_by_length/40-79` in the JSON and the summary, not the
one-line log): on a larger grid than the training one, accuracy falls with the route's length,
not with the grid's size (docs/results.md), so the bands say how far the learned search reaches.
"""

from __future__ import annotations

import math

import numpy as np

from trmkit.data.store import Split
from trmkit.data.stream import Batch
from trmkit.tasks.maze.data import is_shortest_path
from trmkit.tasks.maze.generate import OPEN, PATH


BINS = 1000  # thresholds of p(path) for the precision / recall curve
PRECISION_FLOOR = 0.8
_EDGES = (0, 20, 40, 80, 160, 320, None)  # the path-length bands' edges, in steps
LENGTH_BANDS = tuple((f"{lo}-{hi - 1}" if hi else f"{lo}+", lo, hi or 2**62) for lo, hi in zip(_EDGES, _EDGES[1:]))


def length_band(steps: int) -> str:
    """The band of a shortest path of `steps` steps: "0-19", "20-39", ..., "320+"."""
    return next(name for name, lo, hi in LENGTH_BANDS if lo <= steps < hi)


def stablemax_probs(logits: np.ndarray) -> np.ndarray:
    """Stable-max probabilities (model/losses.py) over the last axis, in float64."""
    x = logits.astype(np.float64)
    s = np.where(x >= 0, x + 1, 1 / (1 - np.minimum(x, 0)))
    return s / s.sum(-1, keepdims=True)


def recall_at_precision(on_path: np.ndarray, off_path: np.ndarray, floor: float) -> float:
    """The largest recall of any threshold whose precision is at least `floor`, from histograms of
    p(path) over path cells and over the other open cells (bin i holds p in [i/B, (i+1)/B))."""
    tp = np.cumsum(on_path[::-1])  # marking every cell with p >= a bin's lower edge, top bin first
    fp = np.cumsum(off_path[::-1])
    total = max(1, int(on_path.sum()))
    ok = tp / np.maximum(1, tp + fp) >= floor
    return float(tp[ok].max() / total) if ok.any() else 0.0


class MazeScorer:
    """Every evaluated maze: is the marked path a shortest one, and how do its cells compare."""

    needs_logits = True  # the open-cell loss is computed here, whatever the trainer's loss counts

    def __init__(self, split: Split) -> None:
        self.shape = split.meta.grid_shape or (round(split.meta.seq_len ** 0.5),) * 2
        self.valid = self.other = self.n = 0
        self.tp = self.marked = self.on_path = self.open = 0
        self.nll = 0.0
        self.hist_on = np.zeros(BINS, dtype=np.int64)  # p(path) of path cells
        self.hist_off = np.zeros(BINS, dtype=np.int64)  # p(path) of the other open cells
        self.by_length = {name: [0, 0] for name, _, _ in LENGTH_BANDS}  # band -> [valid, mazes]

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray, logits: np.ndarray | None = None) -> None:
        for i, (question, label, pred) in enumerate(zip(batch.inputs, batch.labels, preds)):
            q = np.asarray(question).reshape(self.shape)
            truth = np.asarray(label).reshape(self.shape) == PATH
            marked = (np.asarray(pred).reshape(self.shape) == PATH) & (q == OPEN)  # given cells are copied
            steps = int(truth.sum()) + 1
            ok = is_shortest_path(q, marked, steps)
            self.valid += ok
            tally = self.by_length[length_band(steps)]
            tally[0] += ok
            tally[1] += 1
            self.other += ok and not np.array_equal(marked, truth)
            self.n += 1
            self.tp += int((marked & truth).sum())
            self.marked += int(marked.sum())
            self.on_path += int(truth.sum())
            self.open += int((q == OPEN).sum())
            if logits is not None:
                self._add_logits(logits[i], np.asarray(question) == OPEN, np.asarray(label))

    def _add_logits(self, logits: np.ndarray, cells: np.ndarray, label: np.ndarray) -> None:
        probs = stablemax_probs(logits[cells])
        picked = np.take_along_axis(probs, label[cells][:, None].astype(np.int64), -1)[:, 0]
        self.nll += float(-np.log(picked).sum())
        bins = np.minimum((probs[:, PATH] * BINS).astype(np.int64), BINS - 1)
        truth = label[cells] == PATH
        self.hist_on += np.bincount(bins[truth], minlength=BINS)
        self.hist_off += np.bincount(bins[~truth], minlength=BINS)

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
            out["path_recall_at_precision_0.8"] = recall_at_precision(self.hist_on, self.hist_off, PRECISION_FLOOR)
        for band, (valid, mazes) in self.by_length.items():
            if mazes:
                out[f"valid_by_length/{band}"] = valid / mazes
                out[f"mazes_by_length/{band}"] = mazes
        return out
