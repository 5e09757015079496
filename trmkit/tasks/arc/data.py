"""ARC grids: the canvas encoding, the augmentations, and reading the ARC Prize JSON files.

See the package docstring (tasks/arc/__init__.py) for the encoding and the reference it follows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.tasks.base import dihedral, dihedral_inverse

SIDE = 30  # the largest ARC grid, and the canvas
VOCAB = ("<pad>", "<eos>", *(str(c) for c in range(10)))
PAD, EOS, COLOUR0 = 0, 1, 2  # colour c is token c + COLOUR0
SUBSETS = ("training", "evaluation", "training2", "evaluation2", "concept")
DEFAULT_SOURCE = "../shared/data/arc"


# ---------------------------------------------------------------- grids and augmentations


class ArcError(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def to_grid(value: Any) -> np.ndarray:
    """A JSON grid (list of equal rows of ints 0-9, at most 30 x 30) -> (h, w) uint8; else ArcError."""
    if not isinstance(value, list) or not value or not all(isinstance(r, list) and r for r in value):
        raise ArcError("bad_grid", "a grid must be a non-empty list of non-empty rows")
    if len({len(r) for r in value}) > 1:
        raise ArcError("ragged", f"rows of lengths {sorted({len(r) for r in value})}")
    if not all(type(v) is int for r in value for v in r):  # bool and float are not colours
        raise ArcError("bad_grid", "cells must be integers 0-9")
    grid = np.array(value, dtype=np.int64)
    if grid.min() < 0 or grid.max() > 9:
        raise ArcError("bad_colour", f"colours {grid.min()}..{grid.max()}, ARC uses 0-9")
    if grid.shape[0] > SIDE or grid.shape[1] > SIDE:
        raise ArcError("too_large", f"{grid.shape[0]}x{grid.shape[1]} grid, ARC grids are at most {SIDE}x{SIDE}")
    return grid.astype(np.uint8)


@dataclass(frozen=True)
class Aug:
    """A symmetry k of the square (base.dihedral) after the colour map perm (perm[c] = new colour of c)."""

    k: int
    perm: tuple[int, ...]  # (10,), perm[0] == 0

    def apply(self, grid: np.ndarray) -> np.ndarray:
        return dihedral(np.asarray(self.perm, dtype=np.uint8)[grid], self.k)

    def invert(self, grid: np.ndarray) -> np.ndarray:
        inverse = np.argsort(self.perm).astype(np.uint8)  # inverse[perm[c]] == c
        return inverse[dihedral_inverse(grid, self.k)]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "perm": "".join(str(c) for c in self.perm)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Aug":
        return cls(int(data["k"]), tuple(int(c) for c in str(data["perm"])))


IDENTITY = Aug(0, tuple(range(10)))


def random_aug(rng: np.random.Generator) -> Aug:
    return Aug(int(rng.integers(8)), (0, *(int(c) for c in rng.permutation(np.arange(1, 10)))))


def encode(grid: np.ndarray, offset: tuple[int, int] = (0, 0)) -> np.ndarray:
    """(h, w) colours -> (900,) tokens: the grid at offset, <eos> below and right of it where they fit."""
    (r, c), (h, w) = offset, grid.shape
    canvas = np.zeros((SIDE, SIDE), dtype=np.uint8)  # PAD
    canvas[r:r + h, c:c + w] = grid + COLOUR0
    if r + h < SIDE:
        canvas[r + h, c:c + w] = EOS
    if c + w < SIDE:
        canvas[r:r + h, c + w] = EOS
    return canvas.reshape(-1)


def decode(tokens: np.ndarray) -> np.ndarray | None:
    """(900,) tokens -> (h, w) colours, cropped as the reference's _crop; None when the crop is empty.

    The crop is the largest rectangle at the top-left corner holding only
    colour tokens: row r may be as wide as the colour run that starts each
    of the rows 0..r (evaluators/arc.py:13-36).
    """
    canvas = np.asarray(tokens).reshape(SIDE, SIDE).astype(np.int64)
    colour = (canvas >= COLOUR0) & (canvas < COLOUR0 + 10)  # (30, 30)
    run = np.where(colour.all(axis=1), SIDE, np.argmin(colour, axis=1))  # (30,) colour cells from column 0
    widths = np.minimum.accumulate(run)  # (30,) widest rectangle of rows 0..r
    areas = widths * np.arange(1, SIDE + 1)
    best = int(np.argmax(areas))  # the first of equal areas, as the reference's strict >
    if areas[best] == 0:
        return None
    return (canvas[:best + 1, :widths[best]] - COLOUR0).astype(np.uint8)


def grid_digest(grid: np.ndarray) -> bytes:
    return hashlib.sha256(bytes(grid.shape) + np.ascontiguousarray(grid, dtype=np.uint8).tobytes()).digest()


def task_hash(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> str:
    """Order-free content hash of a task's (input, output) grids, shapes included (reference: puzzle_hash)."""
    return hashlib.sha256(b"".join(sorted(grid_digest(i) + grid_digest(o) for i, o in pairs))).hexdigest()


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class ArcTask:
    task_id: str
    subset: str
    demos: tuple[tuple[np.ndarray, np.ndarray], ...]  # (input, output) demonstrations
    tests: tuple[tuple[np.ndarray, np.ndarray], ...]  # (test input, its solution)

    def pairs(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        return self.demos + self.tests


def subset_files(source: Path, subset: str) -> tuple[Path, Path]:
    return source / f"arc-agi_{subset}_challenges.json", source / f"arc-agi_{subset}_solutions.json"


def load_json(path: Path) -> dict[str, Any]:
    """One ARC JSON file; a missing file names itself and the --source flag."""
    if not path.is_file():
        raise FileNotFoundError(f"ARC file not found: {path}; point --source at the folder holding "
                                f"arc-agi_<subset>_challenges.json and _solutions.json (default {DEFAULT_SOURCE})")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of task id -> task, got {type(data).__name__}")
    return data


def parse_task(task_id: str, subset: str, raw: Any, solution: Any) -> ArcTask:
    """One challenge entry and its solutions -> ArcTask; ArcError says what is wrong."""
    if not isinstance(raw, dict) or not isinstance(raw.get("train"), list) or not isinstance(raw.get("test"), list):
        raise ArcError("bad_task", "a task needs 'train' and 'test' lists")
    if not raw["train"] or not raw["test"]:
        raise ArcError("bad_task", f"{len(raw['train'])} demonstrations, {len(raw['test'])} test inputs")
    if not isinstance(solution, list) or len(solution) != len(raw["test"]):
        got = len(solution) if isinstance(solution, list) else "no"
        raise ArcError("no_solution", f"{len(raw['test'])} test input(s), {got} solution(s)")
    if not all(isinstance(p, dict) and "input" in p for p in raw["train"] + raw["test"]) or \
            not all("output" in p for p in raw["train"]):
        raise ArcError("bad_task", "every pair needs an 'input' (and a demonstration an 'output')")
    demos = tuple((to_grid(p["input"]), to_grid(p["output"])) for p in raw["train"])
    tests = tuple((to_grid(p["input"]), to_grid(s)) for p, s in zip(raw["test"], solution))
    return ArcTask(task_id, subset, demos, tests)


def read_subset(source: Path, subset: str, report: ImportReport, limit: int | None = None) -> list[ArcTask]:
    """The usable tasks of one subset in file order (at most `limit`); bad ones counted in report."""
    challenges_path, solutions_path = subset_files(source, subset)
    challenges, solutions = load_json(challenges_path), load_json(solutions_path)
    tasks = []
    for task_id, raw in challenges.items():
        if limit is not None and len(tasks) >= limit:
            break
        report.lines += 1
        try:
            tasks.append(parse_task(task_id, subset, raw, solutions.get(task_id)))
        except ArcError as err:
            report.skip(f"{challenges_path.name}: {task_id}", err.reason, err.detail)
            continue
        report.accepted += 1
    return tasks


def drop_repeats(tasks: list[ArcTask], report: ImportReport) -> list[ArcTask]:
    """Keep the first task of each id (training2 repeats ARC-AGI-1 training tasks)."""
    kept: dict[str, ArcTask] = {}
    for task in tasks:
        if task.task_id in kept:
            report.accepted -= 1
            report.skip(f"arc-agi_{task.subset}_challenges.json: {task.task_id}", "repeated_task",
                        f"already read from {kept[task.task_id].subset}; the first copy is kept")
        else:
            kept[task.task_id] = task
    return list(kept.values())
