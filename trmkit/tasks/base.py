"""What a task declares, and the helpers every grid task shares.

A task is one `Task` value: its name and shape, the `trmkit data NAME`
arguments and builder (which writes a store with `data.store.write_store`),
an optional scorer for metrics beyond the generic ones, and its presets.
The trainer never imports this package: the CLI looks the task up by the
store's ``meta.json`` "task" key and hands its scorer to the trainer.

Shapes (docs/tasks.md):
- "grid": per-position outputs, exact-match metrics (Sudoku, Maze, ARC);
- "classify": one label per example, F1 metrics (e-mail; not built yet);
- "policy": rollouts and rewards, no fixed labels (self-play RL; not built yet).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

SHAPES = ("grid", "classify", "policy")
MAX_MESSAGES = 20  # skipped-item messages kept per report ...
MAX_MESSAGES_PER_REASON = 3  # ... and per reason, so every reason shows up
Log = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    """One task: how its data is built, scored and trained (see docs/tasks.md)."""

    name: str  # `trmkit data NAME`, and meta.json's "task"
    shape: str  # one of SHAPES
    summary: str  # one line for --help
    add_arguments: Callable[[argparse.ArgumentParser], None]  # builder options beyond --out/--test-fraction/--seed
    build: Callable[[argparse.Namespace, Log], Any]  # writes the store at args.out
    scorer: Callable[[Any], Any] | None = None  # Split -> Scorer (train/evaluate.py) for extra metrics
    presets: Mapping[str, str] = field(default_factory=dict)  # name -> configs/*.yaml
    learn_set: Any = None  # the fixed set `trmkit bench --learn --task NAME` measures on (see learn.py)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"task {self.name}: shape {self.shape!r} is not one of {SHAPES}")


@dataclass
class ImportReport:
    """What an importer or generator read, kept and skipped (and why)."""

    source: str
    lines: int = 0  # items examined
    accepted: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # "file:line: reason: detail", a few per reason

    @property
    def skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    def skip(self, where: str, reason: str, detail: str) -> None:
        self.skipped_by_reason[reason] = self.skipped_by_reason.get(reason, 0) + 1
        if len(self.messages) < MAX_MESSAGES and self.skipped_by_reason[reason] <= MAX_MESSAGES_PER_REASON:
            self.messages.append(f"{where}: {reason}: {detail}")

    def summary_lines(self) -> list[str]:
        out = [f"{self.source}: {self.lines} read, {self.accepted} kept, {self.skipped} skipped"]
        out += [f"  skipped {n} x {reason}" for reason, n in sorted(self.skipped_by_reason.items())]
        out += [f"  {m}" for m in self.messages]
        if self.skipped > len(self.messages):
            out.append(f"  ... and {self.skipped - len(self.messages)} more skipped")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.lines, "accepted": self.accepted, "skipped": self.skipped,
                "skipped_by_reason": dict(self.skipped_by_reason), "skipped_examples": list(self.messages)}


def dihedral(grid: np.ndarray, k: int) -> np.ndarray:
    """The k-th of the square's 8 symmetries (0 = identity; 1-3 rotations; 4-7 reflections)."""
    if not 0 <= k < 8:
        raise ValueError(f"dihedral transform {k}: use 0..7")
    out = np.rot90(grid, k % 4)
    return np.ascontiguousarray(out.T if k >= 4 else out)


def dihedral_inverse(grid: np.ndarray, k: int) -> np.ndarray:
    """Undo `dihedral(., k)`."""
    if k >= 4:
        return np.ascontiguousarray(np.rot90(grid.T, -(k % 4)))
    return np.ascontiguousarray(np.rot90(grid, -k))


def split_rows(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random (test, train) indices in source order; test_fraction 1 puts everything in test."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"--test-fraction must be in [0, 1], got {test_fraction}")
    n_test = n if test_fraction >= 1.0 else int(round(n * test_fraction))
    if 0 < test_fraction < 1.0 and n >= 2:
        n_test = min(max(n_test, 1), n - 1)  # both splits non-empty when a share was asked for
    order = np.random.default_rng([seed, 1]).permutation(n)
    return np.sort(order[:n_test]), np.sort(order[n_test:])
