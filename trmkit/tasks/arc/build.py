"""Building an ARC store: which tasks go where, their augmented puzzles, the arrays and the sidecar.

See the package docstring (tasks/arc/__init__.py) for the protocol, the augmentation and the
departures from the reference.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.data.store import SplitArrays, check_new_store, write_store
from trmkit.tasks.arc.data import (IDENTITY, PAD, SIDE, VOCAB, ArcTask, Aug, drop_repeats, encode, random_aug,
                                   read_subset, task_hash)
from trmkit.tasks.base import Log

SIDECAR = "arc_puzzles.json"
SIDECAR_FORMAT = "trmkit-arc/1"
RETRIES = 5  # draws per wanted augmentation before giving up (reference: ARCAugmentRetriesFactor)
# (trained subset, eval subset) -> why training on the first leaks the second's answers
KNOWN_LEAKS = {
    ("training2", "evaluation"): "ARC-AGI-2's training2 holds 376 of the 400 ARC-AGI-1 evaluation tasks, "
                                 "their test pairs included (the TRM README warns of it)",
    ("evaluation", "evaluation2"): "ARC-AGI-1's evaluation holds 6 of the 120 ARC-AGI-2 evaluation2 tasks, "
                                   "their test pairs included",
}


# ---------------------------------------------------------------- which tasks train, which are tested


def check_overlap(trained: Sequence[str], eval_subset: str, train_tasks: list[ArcTask],
                  eval_tasks: list[ArcTask], allow: bool, log: Log) -> dict[str, Any]:
    """Refuse a build whose trained subsets hold eval tasks (named leaks and shared task ids)."""
    named = [f"{s}: {KNOWN_LEAKS[(s, eval_subset)]}" for s in trained if (s, eval_subset) in KNOWN_LEAKS]
    shared = sorted({t.task_id for t in train_tasks} & {t.task_id for t in eval_tasks})
    if shared:
        named.append(f"{len(shared)} task id(s) of {eval_subset} are also in the trained subsets "
                     f"(e.g. {', '.join(shared[:3])})")
    if not named:
        return {"allowed": allow, "found": []}
    why = f"training on {','.join(trained)} while evaluating on {eval_subset} leaks test answers: " + "; ".join(named)
    if not allow:
        raise ValueError(f"{why}. Fix: for ARC-AGI-1 use --subsets training,concept --eval-subset evaluation; "
                         "for ARC-AGI-2 --subsets training2,concept --eval-subset evaluation2; or pass "
                         "--allow-overlap to build it anyway (its scores are then not honest test scores)")
    for line in ("!" * 72, f"WARNING (--allow-overlap): {why}.",
                 "Scores on this store's test split are NOT honest held-out scores; meta.json records it.", "!" * 72):
        log(line)
    return {"allowed": True, "found": named, "shared_task_ids": len(shared)}


# ---------------------------------------------------------------- augmentation plan and arrays


@dataclass
class AugmentedTask:
    """One task's augmented puzzles: identifier first_id + j is augs[j] (augs[0] the identity)."""

    task: ArcTask
    augs: list[Aug]
    first_id: int
    is_eval: bool


def task_rng(seed: int, task_id: str, stream: int) -> np.random.Generator:
    """A generator of its own per task, so a task's draws don't depend on which other tasks are built."""
    key = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, key, stream])


def draw_augmentations(task: ArcTask, count: int, rng: np.random.Generator) -> list[Aug]:
    """The identity, then up to `count` augmentations whose augmented task differs from all before."""
    augs, seen = [IDENTITY], {task_hash(task.pairs())}
    for _ in range(RETRIES * count):
        if len(augs) > count:
            break
        aug = random_aug(rng)
        h = task_hash((aug.apply(i), aug.apply(o)) for i, o in task.pairs())
        if h not in seen:
            seen.add(h)
            augs.append(aug)
    return augs


def plan_puzzles(train_tasks: list[ArcTask], eval_tasks: list[ArcTask], aug: int, seed: int) -> list[AugmentedTask]:
    """Augmentations and identifiers (from 1; 0 is blank) for the trained tasks, then the eval tasks."""
    plans, next_id = [], 1
    for task, is_eval in [(t, False) for t in train_tasks] + [(t, True) for t in eval_tasks]:
        augs = draw_augmentations(task, aug, task_rng(seed, task.task_id, 0))
        plans.append(AugmentedTask(task, augs, next_id, is_eval))
        next_id += len(augs)
    return plans


def _examples(plan: AugmentedTask, split: str) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    if split == "test":
        return plan.task.tests
    return plan.task.demos if plan.is_eval else plan.task.pairs()


def count_rows(plans: list[AugmentedTask], split: str) -> int:
    return sum(len(p.augs) * len(_examples(p, split)) for p in plans)


def _offset(inp: np.ndarray, out: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """A random top-left corner where both grids fit on the canvas (reference: translational augment)."""
    h, w = max(inp.shape[0], out.shape[0]), max(inp.shape[1], out.shape[1])
    return int(rng.integers(SIDE - h + 1)), int(rng.integers(SIDE - w + 1))


def split_arrays(plans: list[AugmentedTask], split: str, seed: int) -> tuple[SplitArrays, list[list[Any]]]:
    """The arrays of split 'train' or 'test'; for 'test' also each row's [task id, test index].

    Arrays are allocated once at their final size: at --aug 1000 the train
    split of ARC-AGI-1 is about 4 million rows of 2 x 900 bytes.
    """
    n = count_rows(plans, split)
    inputs = np.empty((n, SIDE * SIDE), dtype=np.uint8)  # (N, 900)
    labels = np.empty((n, SIDE * SIDE), dtype=np.uint8)  # (N, 900)
    ids, puzzle_indices, group_indices, rows, row = [], [0], [0], [], 0
    for plan in plans:
        pairs = _examples(plan, split)
        rng = task_rng(seed, plan.task.task_id, 1)
        for j, aug in enumerate(plan.augs):
            fixed = int(rng.integers(len(pairs)))  # the one example of this puzzle never shifted
            for e, (inp, out) in enumerate(pairs):
                inp, out = aug.apply(inp), aug.apply(out)
                at = _offset(inp, out, rng) if split == "train" and e != fixed else (0, 0)
                inputs[row], labels[row] = encode(inp, at), encode(out, at)
                row += 1
                if split == "test":
                    rows.append([plan.task.task_id, e])
            ids.append(plan.first_id + j)
            puzzle_indices.append(row)
        group_indices.append(len(ids))
    arrays = SplitArrays(inputs=inputs, labels=labels, puzzle_identifiers=np.array(ids, dtype=np.int64),
                         puzzle_indices=np.array(puzzle_indices, dtype=np.int64),
                         group_indices=np.array(group_indices, dtype=np.int64))
    return arrays, rows


def sidecar(plans: list[AugmentedTask], rows: list[list[Any]] | None) -> dict[str, Any]:
    """A split's arc_puzzles.json: identifier -> augmentation; for the test split rows and solutions."""
    side: dict[str, Any] = {"format": SIDECAR_FORMAT, "puzzles": {
        str(p.first_id + j): {"task": p.task.task_id, "subset": p.task.subset, **aug.to_json()}
        for p in plans for j, aug in enumerate(p.augs)}}
    if rows is not None:
        side["examples"] = rows
        side["tasks"] = {p.task.task_id: {"subset": p.task.subset,
                                          "test_outputs": [out.tolist() for _, out in p.task.tests]}
                         for p in plans}
    return side


def read_sidecar(split_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(split_dir) / SIDECAR
    try:
        with open(path, encoding="utf-8") as f:
            side = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing; ARC scoring needs it, rebuild with `trmkit data arc`") from None
    if side.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{path}: format {side.get('format')!r}, expected {SIDECAR_FORMAT!r}; rebuild the store")
    return side


# ---------------------------------------------------------------- builder


def build(source: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
          subsets: Sequence[str] = ("training", "concept"), eval_subset: str = "evaluation", aug: int = 100,
          limit: int | None = None, test_fraction: float = 0.0, seed: int = 0, allow_overlap: bool = False,
          force: bool = False, log: Log = print) -> dict[str, Any]:
    """Build an ARC store at out_dir; test_fraction is ignored except 1 (test split only, same ids); a store
    already there is replaced only with force."""
    t0 = time.perf_counter()
    _check_options(aug, limit, test_fraction)
    check_new_store(out_dir, force)
    trained = [s for s in dict.fromkeys(subsets) if s != eval_subset]  # the eval subset's demos train anyway
    report = ImportReport(source=str(source), unit="tasks")
    train_tasks = drop_repeats([t for s in trained for t in read_subset(Path(source), s, report, limit)], report)
    eval_tasks = read_subset(Path(source), eval_subset, report, limit)
    for line in report.summary_lines():
        log(line)
    if not eval_tasks:
        raise ValueError(f"{source}: no usable {eval_subset} tasks ({report.skipped} skipped); nothing written")
    overlap = check_overlap(trained, eval_subset, train_tasks, eval_tasks, allow_overlap, log)
    plans = plan_puzzles(train_tasks, eval_tasks, aug, seed)
    test, test_rows = split_arrays([p for p in plans if p.is_eval], "test", seed)
    splits = {"test": test}
    extras = {"test": {SIDECAR: sidecar([p for p in plans if p.is_eval], test_rows)}}
    if test_fraction < 1.0:
        n = count_rows(plans, "train")
        log(f"train split: {n} examples ({n * 2 * SIDE * SIDE / 2**20:.0f} MiB of inputs and labels in memory)")
        splits["train"], _ = split_arrays(plans, "train", seed)
        extras["train"] = {SIDECAR: sidecar(plans, None)}
    settings = {"source": str(source), "subsets": trained, "eval_subset": eval_subset, "aug": aug, "limit": limit,
                "test_fraction": test_fraction, "seed": seed, "overlap": overlap,
                "translation": "train examples but one per puzzle; test never", **_counts(plans, splits, aug)}
    meta = {"task": "arc", "vocab": list(VOCAB), "pad_id": PAD, "ignore_label_id": PAD, "blank_id": None,
            "num_puzzle_identifiers": 1 + settings["puzzles"], "source": str(source),
            "build": {**settings, **report.to_dict()}}
    write_store(out_dir, splits, meta, extras, force=force)
    log(f"wrote {out_dir}: " + ", ".join(f"{k} {len(a.inputs)} examples" for k, a in splits.items())
        + f", {meta['num_puzzle_identifiers'] - 1} puzzles, {time.perf_counter() - t0:.1f} s")
    return {"skipped": report.skipped, **settings}


def _check_options(aug: int, limit: int | None, test_fraction: float) -> None:
    if aug < 0:
        raise ValueError(f"--aug must be >= 0 (augmented copies per task besides the original), got {aug}")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"--test-fraction must be in [0, 1], got {test_fraction}")


def _counts(plans: list[AugmentedTask], splits: Mapping[str, SplitArrays], aug: int) -> dict[str, Any]:
    """meta.json's counts: tasks per subset, puzzles, examples per split, tasks short of augmentations."""
    tasks: dict[str, int] = {}
    for p in plans:
        tasks[p.task.subset] = tasks.get(p.task.subset, 0) + 1
    short = [p.task.task_id for p in plans if len(p.augs) < aug + 1]
    return {"tasks": tasks, "puzzles": sum(len(p.augs) for p in plans),
            "counts": {k: len(a.inputs) for k, a in splits.items()},
            "augmentation_short": {"tasks": len(short), "examples": short[:10]}}
