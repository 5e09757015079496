"""Test-time variants: symmetries of a task's examples, and the vote that combines their answers.

A task whose answer means the same after a symmetry (a maze turned or mirrored, a Sudoku with
its bands shuffled and its digits relabelled) declares `Variants`: for each variant v, the cell
each position reads (`cells[v]`) and the token each token becomes (`tokens[v]`). Variant 0 is
the example itself. Evaluating with n variants solves each one, undoes its symmetry on the
predicted probabilities, and votes (`vote`):
- every variant's answer is one ballot; a ballot the task's `check` rejects (a path that does not
  join S to G, a grid that breaks a Sudoku rule) is not counted;
- a task that can rank its valid answers without the label (`prefer`: a maze prefers the shorter
  of two paths from S to G, since the answer asked for is the shortest) has the best-ranked answer
  win; among answers ranked alike, the one with most ballots wins, and a tie goes to the higher
  summed confidence (the mean over cells of the winning token's probability);
- when no ballot passes the check (or the task has none), the answer is the argmax of the mean
  probabilities over the variants.
The check looks only at the example's input and the proposed answer, never at the label.
Tasks import this module (tasks/*); the evaluation uses it (train/testtime.py, `trmkit eval --vote`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Check = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (inputs (b, L), answers (b, L)) -> (b,) bool
Prefer = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (inputs (b, L), answers (b, L)) -> (b,) float, higher first


@dataclass(frozen=True)
class Variants:
    """n symmetries: variant v of an example x is ``tokens[v][x[cells[v]]]``; variant 0 is x itself."""

    cells: np.ndarray  # (n, L) int: variant v's position j holds the example's position cells[v, j]
    tokens: np.ndarray  # (n, V) int: a token t of the example becomes tokens[v, t]
    check: Check | None = None  # rejects answers that break the task's rules (without the label)
    prefer: Prefer | None = None  # ranks the answers that pass the check (without the label); higher wins

    def __post_init__(self) -> None:
        n, length = self.cells.shape
        if self.tokens.shape[0] != n or n < 1:
            raise ValueError(f"variants: {n} cell maps but {self.tokens.shape[0]} token maps")
        ident = (np.array_equal(self.cells[0], np.arange(length))
                 and np.array_equal(self.tokens[0], np.arange(self.tokens.shape[1])))
        if not ident:
            raise ValueError("variants: variant 0 must be the example itself")
        for name, maps in (("cells", self.cells), ("tokens", self.tokens)):
            if not (np.sort(maps, axis=1) == np.arange(maps.shape[1])).all():
                raise ValueError(f"variants: every row of {name} must be a permutation")

    def __len__(self) -> int:
        return int(self.cells.shape[0])

    def apply(self, inputs: np.ndarray, v: int) -> np.ndarray:
        """Examples (b, L) -> their variant v (b, L), same dtype."""
        return self.tokens[v][np.asarray(inputs)[:, self.cells[v]]].astype(np.asarray(inputs).dtype)

    def undo(self, probs: np.ndarray, v: int) -> np.ndarray:
        """Probabilities (b, L, V) predicted for variant v -> the same for the example itself."""
        back = np.argsort(self.cells[v])  # the variant position that holds each example position
        return probs[:, back][..., self.tokens[v]]


def vote(inputs: np.ndarray, probs: list[np.ndarray], check: Check | None,
         passed: np.ndarray | None = None, prefer: Prefer | None = None) -> np.ndarray:
    """Combine the undone probabilities of n variants (each (b, L, V)) into answers (b, L).
    passed (n, b): the check's verdicts on each variant's argmax, when the caller already has them;
    prefer: the task's ranking of answers that pass (higher first), before the count of ballots."""
    stacked = np.stack(probs)  # (n, b, L, V)
    fallback = stacked.mean(0).argmax(-1)  # (b, L)
    if check is None:
        return fallback
    answers = stacked.argmax(-1)  # (n, b, L)
    confidence = stacked.max(-1).mean(-1)  # (n, b)
    if passed is None:
        passed = np.stack([check(inputs, a) for a in answers])  # (n, b)
    rank = np.stack([prefer(inputs, a) for a in answers]) if prefer is not None else np.zeros(passed.shape)
    out = fallback.copy()
    for i in range(answers.shape[1]):
        ballots: dict[bytes, tuple[float, int, float, int]] = {}
        for v in np.flatnonzero(passed[:, i]):
            key = answers[v, i].tobytes()
            _, count, conf, first = ballots.get(key, (0.0, 0, 0.0, int(v)))
            ballots[key] = (float(rank[v, i]), count + 1, conf + float(confidence[v, i]), first)
        if ballots:
            out[i] = answers[max(ballots.values(), key=lambda b: b[:3])[3], i]
    return out
