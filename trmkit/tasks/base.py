"""What a task declares, and the helpers every grid task shares.

A task is one `Task` value: its name and shape, the `trmkit data NAME`
arguments and builder (which writes a store with `data.store.write_store`),
an optional scorer for metrics beyond the generic ones, and its presets.
The trainer never imports this package: the CLI looks the task up by the
store's ``meta.json`` "task" key and hands its scorer to the trainer.

Shapes (docs/tasks.md):
- "grid": per-position outputs, exact-match metrics (Sudoku, Maze, ARC);
- "classify": one label per example, F1 metrics and calibration (e-mail: email/task.py, tasks/classify/).
Self-play RL is not a task shape: it has no store, and plugs into the trainer as an
objective (train/objective.py, trmkit/rl/).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

SHAPES = ("grid", "classify")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    """One task: how its data is built, scored and trained (see docs/tasks.md)."""

    name: str  # `trmkit data NAME`, and meta.json's "task"
    shape: str  # one of SHAPES
    summary: str  # one line for --help
    add_arguments: Callable[[argparse.ArgumentParser], None]  # builder options beyond --out/--test-fraction/--seed
    build: Callable[[argparse.Namespace, Log], Any]  # writes the store at args.out
    scorer: Callable[[Any], Any] | None = None  # Split -> Scorer (train/scorer.py) for extra metrics
    presets: Mapping[str, str] = field(default_factory=dict)  # name -> configs/*.yaml
    learn_set: Any = None  # the fixed set `trmkit bench --learn --task NAME` measures on (see learn.py)
    # (run_dir, out_dir) -> (figures written, Markdown section): what `trmkit report` adds for this task
    plots: Callable[[Path, Path], tuple[list[Path], str]] | None = None
    # StoreMeta -> Sampler (data/generated.py): fresh examples at a difficulty, for data.stream=generate
    sampler: Callable[[Any], Any] | None = None
    # (StoreMeta, count) -> data.variants.Variants: symmetries to vote over at test time (`trmkit eval --vote`)
    variants: Callable[[Any, int], Any] | None = None
    # (model, training Split, class weights or None, log): run once before training, e.g. to fit frozen
    # weights from the training split (e-mail: the bag's linear model, model.input_linear)
    before_training: Callable[[Any, Any, Any, Log], None] | None = None

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"task {self.name}: shape {self.shape!r} is not one of {SHAPES}")


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


def dihedral_cells(size: int) -> np.ndarray:
    """(8, size*size): position j of `dihedral(grid, k)` (flattened) holds the grid's position cells[k, j]."""
    index = np.arange(size * size).reshape(size, size)
    return np.stack([dihedral(index, k).reshape(-1) for k in range(8)])
