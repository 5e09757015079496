"""ARC-AGI as the TRM paper runs it: few-shot grid puzzles, one learned embedding per augmented task.

Data: the ARC Prize "combined" layout, ``arc-agi_<subset>_challenges.json``
(task id -> {"train": [{"input", "output"}...], "test": [{"input"}...]}) and
``arc-agi_<subset>_solutions.json`` (task id -> the test outputs), subsets
training, evaluation (ARC-AGI-1), training2, evaluation2 (ARC-AGI-2), concept.

Encoding (reference dataset/build_arc_dataset.py:50-74): a grid is drawn on a
30 x 30 canvas (seq_len 900); tokens 0 pad, 1 end-of-grid, 2-11 colours 0-9.
The end marker fills the row just below the grid and the column just right
of it where they fit (the corner cell between them stays pad). Labels are
the output grid encoded the same way; pad cells carry no loss
(ignore_label_id 0), end markers do.

Protocol (build_arc_dataset.py:167-222, README "ARC-AGI-1"): every task of
the training subsets puts all its pairs (demonstrations and test pairs with
their solutions) in train; each task of the eval subset puts its
demonstrations in train and its test inputs (labelled with the solutions)
in test. Each (task, augmentation) is one puzzle with its own identifier
(0 is the reference's blank id, unused), the same in both splits, so the
embedding a model learns from a task's demonstrations is the one it uses on
that task's test inputs. A group is a task: all its augmented puzzles.
There is no random split: ``--test-fraction`` is ignored, except that 1
writes the test split alone (identifiers as in the full store, for
``trmkit eval`` of a model trained on it).

Augmentation (build_arc_dataset.py:98-164): one of the 8 symmetries of the
square and a permutation of colours 1-9 (0, black, stays), applied to every
grid of the task. The identity comes first, then up to ``--aug`` distinct
augmented tasks (so a group holds 1 + aug puzzles, as the reference's
``aug_count + 1``), drawn at most 5 * aug times and deduplicated by an
order-free hash of all the task's grids. Translation (build_arc_dataset.py:
248, 267-269): in the train split every example but one random example per
puzzle is shifted to a random offset where both its grids fit; test
examples are never shifted (the scorer crops at the top-left corner).

Scoring (evaluators/arc.py): each predicted grid is cropped as the
reference's ``_crop`` does (the largest top-left rectangle of colour
tokens), its augmentation undone, and the predictions of all augmented
copies of a test input vote: most votes first, ties broken by the mean
halting confidence sigmoid(q_halt). attempt_1 and attempt_2 are the top two.

Departures from the reference, and why:
- pass@1 / pass@2 count a task only when all its test outputs are right
  (the ARC Prize's per-task rule as asked for here); the reference credits
  a fraction per test output (evaluators/arc.py:167), reported as
  ``pass@k_fractional`` so paper numbers can be compared.
- A prediction with no colour cell at the top-left (an empty crop) never
  votes: an empty grid can't be an ARC answer, and in the reference it
  could take an attempt slot.
- Test examples are found from the sidecar (row -> task, test index), not by
  hashing the cropped input (evaluators/arc.py:93, 124): exact, and two test
  inputs with equal grids stay apart.
- A submission always has one entry per test input (``[[0]]`` when nothing
  valid was predicted); the reference skips the input (evaluators/arc.py:134).
- A task id met again in a later training subset (training2 shares 391
  task ids with ARC-AGI-1's training) is skipped and counted; the reference
  keeps both copies under one identifier (build_arc_dataset.py:236-240).
- Training on a subset that holds eval tasks (training2 with evaluation;
  evaluation with evaluation2) is refused unless --allow-overlap; the
  reference only warns in its README.
- Bad grids and tasks without solutions are counted and skipped (the
  reference asserts, build_arc_dataset.py:43-46, or fills dummy outputs,
  :192-198); a missing solutions file is an error.
- Only pass@1 and pass@2 (the reference also reports pass@5 ... pass@1000).
- Tasks are taken in file order (the reference shuffles each subset, :201,
  which matters only for its fractional splits), and each task draws from
  its own generator seeded by (seed, task id), so a task's augmentations do
  not change with --limit or --subsets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from trmkit.data.store import Batch, Split, SplitArrays, check_output_dir, write_store
from trmkit.data.imports import ImportReport
from trmkit.tasks.base import Log, Task, dihedral, dihedral_inverse, write_json_atomic

SIDE = 30  # the largest ARC grid, and the canvas
VOCAB = ("<pad>", "<eos>", *(str(c) for c in range(10)))
PAD, EOS, COLOUR0 = 0, 1, 2  # colour c is token c + COLOUR0
SUBSETS = ("training", "evaluation", "training2", "evaluation2", "concept")
DEFAULT_SOURCE = "../shared/data/arc"
SIDECAR = "arc_puzzles.json"
SIDECAR_FORMAT = "trmkit-arc/1"
RETRIES = 5  # draws per wanted augmentation before giving up (reference: ARCAugmentRetriesFactor)
NO_ANSWER = [[0]]  # a submission's attempt when nothing valid was predicted
# (trained subset, eval subset) -> why training on the first leaks the second's answers
KNOWN_LEAKS = {
    ("training2", "evaluation"): "ARC-AGI-2's training2 holds 376 of the 400 ARC-AGI-1 evaluation tasks, "
                                 "their test pairs included (the TRM README warns of it)",
    ("evaluation", "evaluation2"): "ARC-AGI-1's evaluation holds 6 of the 120 ARC-AGI-2 evaluation2 tasks, "
                                   "their test pairs included",
}


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


def _grid_digest(grid: np.ndarray) -> bytes:
    return hashlib.sha256(bytes(grid.shape) + np.ascontiguousarray(grid, dtype=np.uint8).tobytes()).digest()


def task_hash(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> str:
    """Order-free content hash of a task's (input, output) grids, shapes included (reference: puzzle_hash)."""
    return hashlib.sha256(b"".join(sorted(_grid_digest(i) + _grid_digest(o) for i, o in pairs))).hexdigest()


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
class Plan:
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


def plan_puzzles(train_tasks: list[ArcTask], eval_tasks: list[ArcTask], aug: int, seed: int) -> list[Plan]:
    """Augmentations and identifiers (from 1; 0 is blank) for the trained tasks, then the eval tasks."""
    plans, next_id = [], 1
    for task, is_eval in [(t, False) for t in train_tasks] + [(t, True) for t in eval_tasks]:
        augs = draw_augmentations(task, aug, task_rng(seed, task.task_id, 0))
        plans.append(Plan(task, augs, next_id, is_eval))
        next_id += len(augs)
    return plans


def _examples(plan: Plan, split: str) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    if split == "test":
        return plan.task.tests
    return plan.task.demos if plan.is_eval else plan.task.pairs()


def count_rows(plans: list[Plan], split: str) -> int:
    return sum(len(p.augs) * len(_examples(p, split)) for p in plans)


def _offset(inp: np.ndarray, out: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """A random top-left corner where both grids fit on the canvas (reference: translational augment)."""
    h, w = max(inp.shape[0], out.shape[0]), max(inp.shape[1], out.shape[1])
    return int(rng.integers(SIDE - h + 1)), int(rng.integers(SIDE - w + 1))


def split_arrays(plans: list[Plan], split: str, seed: int) -> tuple[SplitArrays, list[list[Any]]]:
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


def sidecar(plans: list[Plan], rows: list[list[Any]] | None) -> dict[str, Any]:
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
          log: Log = print) -> dict[str, Any]:
    """Build an ARC store at out_dir; test_fraction is ignored except 1 (test split only, same ids)."""
    t0 = time.perf_counter()
    _check_options(aug, limit, test_fraction)
    check_output_dir(out_dir)
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
    write_store(out_dir, splits, meta, extras)
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


def _counts(plans: list[Plan], splits: Mapping[str, SplitArrays], aug: int) -> dict[str, Any]:
    """meta.json's counts: tasks per subset, puzzles, examples per split, tasks short of augmentations."""
    tasks: dict[str, int] = {}
    for p in plans:
        tasks[p.task.subset] = tasks.get(p.task.subset, 0) + 1
    short = [p.task.task_id for p in plans if len(p.augs) < aug + 1]
    return {"tasks": tasks, "puzzles": sum(len(p.augs) for p in plans),
            "counts": {k: len(a.inputs) for k, a in splits.items()},
            "augmentation_short": {"tasks": len(short), "examples": short[:10]}}


# ---------------------------------------------------------------- scoring


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
        return write_submission(submission(self), Path(run_dir) / "submission.json")

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        """preds (b, 900) tokens, q_halt (b,) halting logits; batch.rows says which test input each is."""
        if batch.rows is None:
            raise ValueError("ArcScorer needs batch.rows (evaluation batches from data.store.eval_batches)")
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
        entry = self.votes.setdefault(self.examples[row], {}).setdefault(_grid_digest(grid), _Vote(grid))
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
    return write_json_atomic(path, sub)


# ---------------------------------------------------------------- the task


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default=DEFAULT_SOURCE,
                   help="folder of arc-agi_<subset>_{challenges,solutions}.json (ARC Prize 'combined' layout)")
    p.add_argument("--subsets", default="training,concept",
                   help=f"comma list of subsets trained on, all pairs ({', '.join(SUBSETS)})")
    p.add_argument("--eval-subset", default="evaluation",
                   help="subset whose test inputs form the test split (its demonstrations are trained on)")
    p.add_argument("--aug", type=int, default=100,
                   help="augmented copies per task besides the original (paper: 1000)")
    p.add_argument("--limit", type=int, default=None, help="use the first N usable tasks of each subset")
    p.add_argument("--allow-overlap", action="store_true",
                   help="build even when trained subsets hold eval tasks (e.g. training2 with evaluation); "
                        "recorded in meta.json, its scores are not honest test scores")


def run_build(args: argparse.Namespace, log: Log = print) -> dict[str, Any]:
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()]
    return build(args.source, args.out, subsets=subsets, eval_subset=args.eval_subset, aug=args.aug,
                 limit=args.limit, test_fraction=args.test_fraction, seed=args.seed,
                 allow_overlap=args.allow_overlap, log=log)


TASK = Task(
    name="arc", shape="grid",
    summary="ARC-AGI few-shot grid puzzles (ARC Prize JSON files); --test-fraction is ignored except 1 "
            "(a test-only store)",
    add_arguments=add_arguments, build=run_build, scorer=ArcScorer,
    presets={"paper": "configs/arc-paper.yaml", "laptop": "configs/arc-laptop.yaml"},
)
