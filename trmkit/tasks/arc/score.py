"""Scoring ARC: votes over a test input's augmented copies, pass@1 / pass@2, and the ARC Prize submission."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trmkit import rundir
from trmkit.data.store import Split
from trmkit.data.stream import Batch
from trmkit.files import write_json
from trmkit.tasks.arc.build import SIDECAR, read_sidecar
from trmkit.tasks.arc.data import Aug, decode, grid_digest

NO_ANSWER = [[0]]  # a submission's attempt when nothing valid was predicted


@dataclass
class _Vote:
    grid: np.ndarray  # (h, w) in the task's own colours and orientation
    count: int = 0
    confidence: float = 0.0  # summed sigmoid(q_halt)


class ArcScorer:
    """pass@1 / pass@2 per ARC task, voting over each test input's augmented copies (evaluators/arc.py).

    Built from the test split (its arc_puzzles.json); fed every evaluation
    batch; a test input that got no valid prediction (an eval_limit that
    stops early, say) counts as wrong, so the denominator is always every
    task of the split, as in the reference.
    """

    def __init__(self, split: Split) -> None:
        side = read_sidecar(split.path)
        if "examples" not in side or len(side["examples"]) != len(split):
            raise ValueError(f"{split.path / SIDECAR}: no row table for this split's {len(split)} examples; "
                             "ArcScorer scores the test split of a store built by `trmkit data arc`")
        self.augs = {int(k): Aug.from_json(v) for k, v in side["puzzles"].items()}  # identifier -> Aug
        self.examples = [(str(t), int(i)) for t, i in side["examples"]]  # row -> (task id, test index)
        self.truth = {t: [np.asarray(g, dtype=np.uint8) for g in v["test_outputs"]]  # task id -> test outputs
                      for t, v in side["tasks"].items()}
        self.votes: dict[tuple[str, int], dict[bytes, _Vote]] = {}  # (task id, test index) -> grid digest -> vote
        self.invalid = 0  # predictions with an empty crop

    def save(self, run_dir: str | os.PathLike[str]) -> Path:
        """The evaluation's answers as an ARC Prize submission: RUN_DIR/submission.json."""
        return write_submission(submission(self), rundir.path(run_dir, rundir.SUBMISSION))

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        """preds (b, 900) tokens, q_halt (b,) halting logits; batch.rows says which test input each is."""
        if batch.rows is None:
            raise ValueError("ArcScorer needs batch.rows (evaluation batches from data.stream.eval_batches)")
        confidence = 0.5 * (1.0 + np.tanh(0.5 * np.asarray(q_halt, dtype=np.float64)))  # (b,) sigmoid
        for row, pid, tokens, conf in zip(batch.rows, batch.puzzle_ids, np.asarray(preds), confidence):
            self.vote(int(row), int(pid), tokens, float(conf))

    def vote(self, row: int, puzzle_id: int, tokens: np.ndarray, confidence: float) -> None:
        """One prediction: crop, undo its puzzle's augmentation, count it for its (task, test index)."""
        grid = decode(tokens)
        if grid is None:
            self.invalid += 1
            return
        if puzzle_id not in self.augs:
            raise ValueError(f"puzzle id {puzzle_id} is not in {SIDECAR}; the store and its sidecar disagree, rebuild")
        grid = self.augs[puzzle_id].invert(grid)
        entry = self.votes.setdefault(self.examples[row], {}).setdefault(grid_digest(grid), _Vote(grid))
        entry.count += 1
        entry.confidence += confidence

    def ranked(self, task_id: str, index: int) -> list[np.ndarray]:
        """Distinct predicted grids, most votes first, ties by mean confidence (evaluators/arc.py:138-141)."""
        votes = self.votes.get((task_id, index), {}).values()
        return [v.grid for v in sorted(votes, key=lambda v: (v.count, v.confidence / v.count), reverse=True)]

    def result(self) -> dict[str, float]:
        """pass@k: tasks whose every test output is among the top k; _fractional: per-output credit."""
        strict, fraction = np.zeros(2), np.zeros(2)  # (attempts 1, 2)
        for task_id, outputs in self.truth.items():
            hits = np.zeros((len(outputs), 2), dtype=bool)  # (tests, attempts): right within the first k
            for i, truth in enumerate(outputs):
                right = [np.array_equal(g, truth) for g in self.ranked(task_id, i)[:2]] + [False, False]
                hits[i] = np.logical_or.accumulate(right[:2])
            strict += hits.all(axis=0)
            fraction += hits.mean(axis=0)
        n = max(1, len(self.truth))
        return {"pass@1": float(strict[0] / n), "pass@2": float(strict[1] / n),
                "pass@1_fractional": float(fraction[0] / n), "pass@2_fractional": float(fraction[1] / n),
                "arc_tasks": len(self.truth), "arc_invalid": self.invalid}


def submission(scorer: ArcScorer) -> dict[str, list[dict[str, list[list[int]]]]]:
    """ARC Prize format: task id -> one {"attempt_1", "attempt_2"} per test input, in order."""
    out = {}
    for task_id, outputs in scorer.truth.items():
        out[task_id] = []
        for i in range(len(outputs)):
            attempts = [g.tolist() for g in scorer.ranked(task_id, i)[:2]] or [NO_ANSWER]
            attempts += attempts[:1] * (2 - len(attempts))  # one candidate: both attempts (as the reference)
            out[task_id].append({"attempt_1": attempts[0], "attempt_2": attempts[1]})
    return out


def write_submission(sub: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a submission as JSON atomically: a temporary file in the same folder, then rename."""
    return write_json(path, sub, indent=None)
