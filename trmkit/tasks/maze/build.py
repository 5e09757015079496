"""`trmkit data maze`: a maze store, generated or from a Maze-Hard CSV."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trmkit.data.imports import ImportReport, split_rows
from trmkit.data.store import SplitArrays, check_new_store, write_store
from trmkit.tasks.base import dihedral
from trmkit.tasks.maze.data import MazeRow, read_csv
from trmkit.tasks.maze.generate import GOAL, PAD, START, VOCAB, WALL, Draw, default_min_path, generate_within

Log = Callable[[str], None]


def build(source: str, out_dir: str | Path, *, size: int = 30, num: int = 1000, min_path: int | None = None,
          loops: float = 0.1, test_fraction: float = 0.1, aug: int = 0, limit: int | None = None,
          seed: int = 0, train_min_path: int | None = None, unique_path: bool | None = None,
          force: bool = False, log: Log = print) -> dict[str, Any]:
    """Build a maze store at out_dir: generated (source='generate') or from a Maze-Hard CSV.

    train_min_path (generated only): each training maze's minimum path length is drawn uniformly
    from [train_min_path, min_path], a curriculum of easier mazes; test mazes keep min_path.
    unique_path (generated only): keep only mazes with one shortest path; None chooses (unique_path_rule).
    force: replace a store already at out_dir (data.store.check_new_store)."""
    t0 = time.perf_counter()
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"--test-fraction must be in [0, 1], got {test_fraction}")
    if not 0 <= aug <= 7:
        raise ValueError(f"--aug must be 0..7 (the square has 8 symmetries, the identity included), got {aug}")
    check_new_store(out_dir, force)
    report = ImportReport(source=str(source), unit="mazes")
    if source == "generate":
        min_path = default_min_path(size) if min_path is None else min_path
        unique_path = unique_path_rule(size, unique_path, log)
        draws = _generate(size, num if limit is None else min(num, limit), min_path, train_min_path, loops,
                          test_fraction, seed, unique_path)
        rows, relaxed = [MazeRow(d.question, d.answer, d.length) for d in draws], _relaxed(draws, log)
        report.lines = report.accepted = len(rows)
    else:
        rows, relaxed = list(read_csv(Path(source), report, limit)), {}
    for line in report.summary_lines():
        log(line)
    if not rows:
        raise ValueError(f"{source}: no usable mazes ({report.skipped} skipped); nothing written")
    test_rows, train_rows = split_rows(len(rows), test_fraction, seed)
    splits = {"test": _arrays([rows[i] for i in test_rows], 0, seed)}
    if len(train_rows):
        splits["train"] = _arrays([rows[i] for i in train_rows], aug, seed)
    lengths = np.array([rows[i].length for i in test_rows] or [r.length for r in rows])  # the held-out mazes
    settings = {"source": str(source), "size": int(rows[0].question.shape[0]), "num": num, "loops": loops,
                "min_path": min_path, "train_min_path": train_min_path, "test_fraction": test_fraction,
                "aug": aug, "limit": limit, "seed": seed, "unique_path": unique_path, **relaxed,
                "path_length": {"min": int(lengths.min()), "mean": float(lengths.mean()),
                                "max": int(lengths.max())}}
    side = settings["size"]
    meta = {"task": "maze", "vocab": list(VOCAB), "pad_id": PAD, "ignore_label_id": PAD, "blank_id": None,
            "num_puzzle_identifiers": 1, "source": str(source), "build": {**settings, **report.to_dict()},
            "grid_shape": [side, side], "given_tokens": [WALL, START, GOAL]}  # walls, S and G are repeated
    write_store(out_dir, splits, meta, force=force)
    counts = {name: len(a.inputs) for name, a in splits.items()}
    log(f"wrote {out_dir}: " + ", ".join(f"{k} {v} examples" for k, v in counts.items())
        + f"; shortest paths {lengths.min()}-{lengths.max()} steps (mean {lengths.mean():.1f}), "
        f"{time.perf_counter() - t0:.1f} s")
    return {"counts": counts, "skipped": report.skipped, **settings}


def unique_path_rule(size: int, unique_path: bool | None, log: Log) -> bool:
    """Whether generated mazes must have one shortest path: as asked, else up to Maze-Hard's 30 x 30.
    Past it, long paths through a maze with loops nearly always tie with another route of the same
    length, so the rule would reject almost every draw; the metric accepts any shortest path."""
    if unique_path is not None:
        return unique_path
    if size <= 30:
        return True
    log(f"generate: unique_path=off ({size} x {size} is past Maze-Hard's 30 x 30: long paths through loops "
        "nearly always tie; the answer marks one shortest path and valid_path_accuracy accepts any; "
        "--unique-path to insist)")
    return False


def _relaxed(draws: list[Draw], log: Log) -> dict[str, dict[str, int]]:
    """Says, once, how many mazes needed a widened search or a relaxed bound; for meta.json's build
    settings {"relaxed": counts}, or {} when none did."""
    widened = [d for d in draws if d.widened]
    if not widened:
        return {}
    relaxed = [d for d in widened if d.relaxed]
    if relaxed:
        lowest = min(d.min_path for d in relaxed)
        log(f"generate: {len(relaxed)} of {len(draws)} mazes relaxed to a path of >= {lowest} steps (no draw "
            f"reached the {max(d.asked for d in relaxed)} asked; a lower --min-path asks less of every maze)")
    if len(widened) > len(relaxed):
        log(f"generate: {len(widened) - len(relaxed)} of {len(draws)} mazes needed more draws than the usual "
            "200 to reach their bound")
    return {"relaxed": {"widened": len(widened), "relaxed": len(relaxed),
                        **({"lowest_min_path": min(d.min_path for d in relaxed)} if relaxed else {})}}


def _generate(size: int, count: int, min_path: int, train_min_path: int | None, loops: float,
              test_fraction: float, seed: int, unique_path: bool = True) -> list[Draw]:
    """`count` mazes. With a curriculum, half the training mazes (those split_rows puts in train) have
    a path of t..t+2 steps, t drawn uniformly from [train_min_path, min_path]; the rest, and every
    test maze, at least min_path."""
    if size < 3:
        raise ValueError(f"--size must be >= 3, got {size}")
    if train_min_path is not None and not 1 <= train_min_path <= min_path:
        raise ValueError(f"--train-min-path must be in [1, --min-path={min_path}], got {train_min_path}")
    test = set(split_rows(count, test_fraction, seed)[0].tolist())
    rng = np.random.default_rng([seed, 0])
    rows = []
    for i in range(count):
        easy = train_min_path is not None and i not in test and rng.random() < 0.5
        low = int(rng.integers(train_min_path, min_path + 1)) if easy else min_path
        rows.append(generate_within(size, rng, loops, low, max_path=low + 2 if easy else None,
                                    unique=unique_path))
    return rows


def _arrays(rows: list[MazeRow], aug: int, seed: int) -> SplitArrays:
    """Each maze is a group of itself plus `aug` distinct symmetries (one example each)."""
    per = aug + 1
    rng = np.random.default_rng([seed, 3])
    inputs, labels = [], []
    for row in rows:
        picks = [0] + (list(rng.permutation(np.arange(1, 8))[:aug]) if aug else [])
        for k in picks:
            inputs.append(dihedral(row.question, int(k)).reshape(-1))
            labels.append(dihedral(row.answer, int(k)).reshape(-1))
    n = len(rows) * per
    return SplitArrays(inputs=np.stack(inputs), labels=np.stack(labels),
                       puzzle_identifiers=np.zeros(n, dtype=np.uint8), puzzle_indices=np.arange(n + 1),
                       group_indices=np.arange(0, n + 1, per))
