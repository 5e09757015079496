"""Maze: shortest paths on N x N grids (the paper's Maze-Hard is 30 x 30).

A maze is a grid of characters: ``#`` wall, space open, ``S`` start, ``G``
goal. The answer is the same grid with the cells of the shortest path from
S to G (S and G excluded) written ``o``. Store tokens: 0 pad (unused, the
grid is never padded), 1 ``#``, 2 space, 3 ``S``, 4 ``G``, 5 ``o``; every
cell is labelled.

Generator (our own; Maze-Hard's public files come from another generator):
a perfect maze is carved by a randomised depth-first search over the cells
at even coordinates (the passages between them at odd ones; for even N the
last row and column stay wall), then each remaining wall between two cells
is opened with probability ``loops``, so that the maze has cycles and the
model has to find the *shortest* of several routes. S is drawn at random, G
at random among the cells at least ``min_path`` steps away; a maze whose
shortest path is not unique is drawn again. Hardness is ``min_path``
(Maze-Hard keeps paths longer than 110 on 30 x 30; the default scales that
by area: ``round(110 * N^2 / 900)``).

Importer: the Maze-Hard CSV layout ``source,question,answer,rating`` with
N*N characters per grid. Each row is checked (size, characters, one S and
one G, the answer is the question plus ``o`` cells that form a shortest
path); a bad row is reported as file:line with the reason and skipped.

Augmentation: the 8 symmetries of the square (dihedral group), applied to
question and answer alike.

Metrics beyond the generic cell and exact accuracy: ``valid_path_accuracy``
counts a predicted path that is *a* shortest path from S to G through open
cells (a different one than the label's counts), and ``other_shortest_paths``
says how many of those differ from the label.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from trmkit.data.store import Split, SplitArrays, check_output_dir, write_store
from trmkit.data.stream import Batch
from trmkit.data.imports import ImportReport, split_rows
from trmkit.tasks.base import Task, dihedral

CHARS = "# SGo"
VOCAB = ("<pad>", "#", " ", "S", "G", "o")
PAD, WALL, OPEN, START, GOAL, PATH = range(6)
Log = Callable[[str], None]


# ---------------------------------------------------------------- generator


def default_min_path(n: int) -> int:
    """Maze-Hard's hardness (path > 110 on 30 x 30) scaled by area."""
    return max(1, round(110 * n * n / 900))


def carve(n: int, rng: np.random.Generator, loops: float) -> np.ndarray:
    """An (n, n) grid of WALL/OPEN: a perfect maze with extra walls opened at rate `loops`."""
    grid = np.full((n, n), WALL, dtype=np.uint8)
    m = (n + 1) // 2  # cells per side, at even coordinates
    seen = np.zeros((m, m), dtype=bool)
    start = (int(rng.integers(m)), int(rng.integers(m)))
    stack, seen[start] = [start], True
    grid[2 * start[0], 2 * start[1]] = OPEN
    while stack:  # randomised depth-first search
        r, c = stack[-1]
        options = [(r + dr, c + dc) for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))
                   if 0 <= r + dr < m and 0 <= c + dc < m and not seen[r + dr, c + dc]]
        if not options:
            stack.pop()
            continue
        nr, nc = options[int(rng.integers(len(options)))]
        grid[r + nr, c + nc] = OPEN  # the passage between (2r, 2c) and (2nr, 2nc)
        grid[2 * nr, 2 * nc] = OPEN
        seen[nr, nc] = True
        stack.append((nr, nc))
    if loops > 0:
        walls = np.zeros((n, n), dtype=bool)
        walls[0::2, 1::2] = True  # between horizontal neighbours
        walls[1::2, 0::2] = True  # between vertical neighbours
        walls &= grid == WALL
        walls[n - 1 if n % 2 == 0 else n:, :] = False  # the closing row/column of an even n
        walls[:, n - 1 if n % 2 == 0 else n:] = False
        grid[walls & (rng.random((n, n)) < loops)] = OPEN
    return grid


def distances(grid: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """BFS steps from source through non-wall cells; -1 where unreachable."""
    n = grid.shape[0]
    dist = np.full(grid.shape, -1, dtype=np.int32)
    dist[source] = 0
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] < 0 and grid[nr, nc] != WALL:
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


def shortest_paths(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]
                   ) -> tuple[int, int, list[tuple[int, int]]]:
    """(length, number of shortest paths capped at 2, one shortest path S..G); length -1 if none."""
    dist = distances(grid, start)
    if dist[goal] < 0:
        return -1, 0, []
    n = grid.shape[0]
    order = np.argsort(dist, axis=None, kind="stable")
    count = np.zeros(grid.shape, dtype=np.int64)
    count[start] = 1
    for flat in order:
        r, c = divmod(int(flat), n)
        d = dist[r, c]
        if d <= 0:
            continue
        total = 0
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] == d - 1:
                total += count[nr, nc]
        count[r, c] = min(total, 2)
    path, cell = [goal], goal
    while cell != start:  # walk back along decreasing distance
        r, c = cell
        cell = next((nr, nc) for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
                    if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] == dist[r, c] - 1)
        path.append(cell)
    return int(dist[goal]), int(count[goal]), path[::-1]


def generate_maze(n: int, rng: np.random.Generator, loops: float = 0.1, min_path: int | None = None,
                  tries: int = 200, max_path: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """One maze: (question (n, n), answer (n, n), shortest path length) as tokens; the path has
    min_path..max_path steps (no upper bound when max_path is None)."""
    min_path = default_min_path(n) if min_path is None else min_path
    for _ in range(tries):
        grid = carve(n, rng, loops)
        cells = np.argwhere(grid == OPEN)
        start = tuple(int(v) for v in cells[rng.integers(len(cells))])
        dist = distances(grid, start)
        far = np.argwhere((dist >= min_path) & (dist <= (max_path if max_path is not None else dist.max())))
        if len(far) == 0:
            continue
        goal = tuple(int(v) for v in far[rng.integers(len(far))])
        length, count, path = shortest_paths(grid, start, goal)
        if count != 1:
            continue
        question = grid.copy()
        question[start], question[goal] = START, GOAL
        answer = question.copy()
        for cell in path[1:-1]:
            answer[cell] = PATH
        return question, answer, length
    raise ValueError(f"no {n}x{n} maze with a unique shortest path of at least {min_path} steps in "
                     f"{tries} tries: lower --min-path (the longest possible is about {n * n // 2})")


# ---------------------------------------------------------------- text <-> tokens


class MazeError(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def parse(text: str, allow_path: bool) -> np.ndarray:
    """N*N characters of '# SGo' -> (N, N) tokens."""
    side = int(round(len(text) ** 0.5))
    if side < 2 or side * side != len(text):
        raise MazeError("bad_size", f"{len(text)} characters is not a square grid")
    allowed = CHARS if allow_path else CHARS[:4]
    bad = sorted(set(text) - set(allowed))
    if bad:
        raise MazeError("bad_character", f"characters {bad!r}; a maze uses {allowed!r}")
    return np.array([CHARS.index(ch) + 1 for ch in text], dtype=np.uint8).reshape(side, side)


def render(grid: np.ndarray) -> str:
    """(N, N) tokens -> N*N characters (pad as '?')."""
    return "".join(("?" + CHARS)[int(t)] for t in np.asarray(grid).reshape(-1))


def check_answer(question: np.ndarray, answer: np.ndarray) -> int:
    """Path length if `answer` is `question` plus a shortest S-G path in 'o'; else MazeError."""
    if question.shape != answer.shape:
        raise MazeError("answer_mismatch", f"answer is {answer.shape}, question {question.shape}")
    for token, name in ((START, "S"), (GOAL, "G")):
        if int((question == token).sum()) != 1:
            raise MazeError("bad_endpoints", f"the question needs exactly one {name}")
    changed = question != answer
    if np.any(answer[changed] != PATH) or np.any(question[changed] != OPEN):
        raise MazeError("answer_mismatch", "the answer may only turn open cells into 'o'")
    start = tuple(int(v) for v in np.argwhere(question == START)[0])
    goal = tuple(int(v) for v in np.argwhere(question == GOAL)[0])
    length, _, _ = shortest_paths(question, start, goal)
    if length < 0:
        raise MazeError("no_path", "G cannot be reached from S")
    if not is_shortest_path(question, answer == PATH, length):
        raise MazeError("not_shortest", f"the 'o' cells are not a shortest path ({length} steps)")
    return length


def is_shortest_path(question: np.ndarray, marked: np.ndarray, length: int) -> bool:
    """True when the marked cells are exactly a shortest path's inner cells from S to G."""
    if int(marked.sum()) != length - 1 or np.any(marked & (question != OPEN)):
        return False
    allowed = marked | (question == START) | (question == GOAL)
    start = tuple(int(v) for v in np.argwhere(question == START)[0])
    goal = tuple(int(v) for v in np.argwhere(question == GOAL)[0])
    only = np.where(allowed, OPEN, WALL).astype(np.uint8)
    return int(distances(only, start)[goal]) == length


# ---------------------------------------------------------------- importer


@dataclass
class MazeRow:
    question: np.ndarray
    answer: np.ndarray
    length: int


def read_csv(path: Path, report: ImportReport, limit: int | None = None) -> Iterator[MazeRow]:
    """Rows of a Maze-Hard CSV (source,question,answer,rating); bad rows counted and skipped."""
    if not path.is_file():
        raise FileNotFoundError(f"maze file not found: {path}")
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.reader(f)
        header = [h.strip().lower() for h in next(reader, [])]
        if "question" not in header or "answer" not in header:
            raise ValueError(f"{path.name}:1: the CSV header must name 'question' and 'answer' columns "
                             f"(Maze-Hard: source,question,answer,rating), got {header}")
        q, a = header.index("question"), header.index("answer")
        size = None
        for row in reader:
            if limit is not None and report.accepted >= limit:
                return
            if not any(cell.strip() for cell in row):
                continue
            where = f"{path.name}:{reader.line_num}"
            report.lines += 1
            try:
                if len(row) != len(header):
                    raise MazeError("bad_row", f"expected {len(header)} fields, got {len(row)}")
                question, answer = parse(row[q], allow_path=False), parse(row[a], allow_path=True)
                size = size or question.shape[0]
                if question.shape[0] != size:
                    raise MazeError("bad_size", f"{question.shape[0]}x{question.shape[0]} grid in a file "
                                                f"of {size}x{size} grids")
                length = check_answer(question, answer)
            except MazeError as err:
                report.skip(where, err.reason, err.detail)
                continue
            report.accepted += 1
            yield MazeRow(question, answer, length)


# ---------------------------------------------------------------- builder


def build(source: str, out_dir: str | Path, *, size: int = 30, num: int = 1000, min_path: int | None = None,
          loops: float = 0.1, test_fraction: float = 0.1, aug: int = 0, limit: int | None = None,
          seed: int = 0, train_min_path: int | None = None, log: Log = print) -> dict[str, Any]:
    """Build a maze store at out_dir: generated (source='generate') or from a Maze-Hard CSV.

    train_min_path (generated only): each training maze's minimum path length is drawn uniformly
    from [train_min_path, min_path], a curriculum of easier mazes; test mazes keep min_path."""
    t0 = time.perf_counter()
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"--test-fraction must be in [0, 1], got {test_fraction}")
    if not 0 <= aug <= 7:
        raise ValueError(f"--aug must be 0..7 (the square has 8 symmetries, the identity included), got {aug}")
    check_output_dir(out_dir)
    report = ImportReport(source=str(source), unit="mazes")
    if source == "generate":
        if size < 3:
            raise ValueError(f"--size must be >= 3, got {size}")
        min_path = default_min_path(size) if min_path is None else min_path
        rows = _generate(size, num if limit is None else min(num, limit), min_path, train_min_path, loops,
                         test_fraction, seed)
        report.lines = report.accepted = len(rows)
    else:
        rows = list(read_csv(Path(source), report, limit))
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
                "aug": aug, "limit": limit, "seed": seed,
                "path_length": {"min": int(lengths.min()), "mean": float(lengths.mean()),
                                "max": int(lengths.max())}}
    meta = {"task": "maze", "vocab": list(VOCAB), "pad_id": PAD, "ignore_label_id": PAD, "blank_id": None,
            "num_puzzle_identifiers": 1, "source": str(source), "build": {**settings, **report.to_dict()}}
    write_store(out_dir, splits, meta)
    counts = {name: len(a.inputs) for name, a in splits.items()}
    log(f"wrote {out_dir}: " + ", ".join(f"{k} {v} examples" for k, v in counts.items())
        + f"; shortest paths {lengths.min()}-{lengths.max()} steps (mean {lengths.mean():.1f}), "
        f"{time.perf_counter() - t0:.1f} s")
    return {"counts": counts, "skipped": report.skipped, **settings}


def _generate(size: int, count: int, min_path: int, train_min_path: int | None, loops: float,
              test_fraction: float, seed: int) -> list[MazeRow]:
    """`count` mazes. With a curriculum, half the training mazes (those split_rows puts in train) have
    a path of t..t+2 steps, t drawn uniformly from [train_min_path, min_path]; the rest, and every
    test maze, at least min_path."""
    if train_min_path is not None and not 1 <= train_min_path <= min_path:
        raise ValueError(f"--train-min-path must be in [1, --min-path={min_path}], got {train_min_path}")
    test = set(split_rows(count, test_fraction, seed)[0].tolist())
    rng = np.random.default_rng([seed, 0])
    rows = []
    for i in range(count):
        easy = train_min_path is not None and i not in test and rng.random() < 0.5
        low = int(rng.integers(train_min_path, min_path + 1)) if easy else min_path
        rows.append(MazeRow(*generate_maze(size, rng, loops, low, max_path=low + 2 if easy else None)))
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


# ---------------------------------------------------------------- evaluation


class MazeScorer:
    """Valid shortest paths among the predictions (another shortest path than the label's counts)."""

    def __init__(self, split: Split) -> None:
        self.side = int(round(split.meta.seq_len ** 0.5))
        self.valid = self.other = self.n = 0

    def add(self, batch: Batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        for question, label, pred in zip(batch.inputs, batch.labels, preds):
            q = np.asarray(question).reshape(self.side, self.side)
            marked = np.asarray(pred).reshape(self.side, self.side) == PATH
            length = int(((np.asarray(label) == PATH).sum())) + 1
            ok = is_shortest_path(q, marked, length)
            self.valid += ok
            self.other += ok and not np.array_equal(marked, np.asarray(label).reshape(q.shape) == PATH)
            self.n += 1

    def result(self) -> dict[str, float]:
        return {"valid_path_accuracy": self.valid / max(1, self.n), "other_shortest_paths": self.other}


# ---------------------------------------------------------------- the learning set


@dataclass(frozen=True)
class LearnSet:
    """The fixed generated maze set `trmkit bench --learn --task maze` measures on."""

    size: int = 15  # N x N mazes
    train_mazes: int = 10000  # generated training mazes, each with its 7 other symmetries
    test_mazes: int = 500  # held-out mazes (not augmented)
    min_path: int | None = None  # None: default_min_path(size) (28 steps at 15 x 15)
    train_min_path: int | None = 2  # half the training mazes: paths of t..t+2 steps, t in [2, min_path]
    loops: float = 0.1
    aug: int = 7
    seed: int = 0
    default_dir: str = "data/learn-maze"

    @property
    def train_groups(self) -> int:
        return self.train_mazes

    @property
    def test_groups(self) -> int:
        return self.test_mazes

    def build_args(self) -> dict[str, Any]:
        """The settings meta.json's "build" section records (reuse needs them all equal)."""
        total = self.train_mazes + self.test_mazes
        return {"source": "generate", "size": self.size, "num": total, "loops": self.loops,
                "min_path": default_min_path(self.size) if self.min_path is None else self.min_path,
                "train_min_path": self.train_min_path, "test_fraction": self.test_mazes / total, "aug": self.aug,
                "limit": None, "seed": self.seed}

    def describe(self) -> str:
        a = self.build_args()
        curriculum = (f"half the training mazes shorter, from {self.train_min_path} steps" if self.train_min_path
                      else "training mazes alike")
        return (f"{self.train_mazes} + {self.test_mazes} generated {self.size}x{self.size} mazes, shortest paths "
                f">= {a['min_path']} steps ({curriculum}), loops {self.loops}, aug {self.aug}, seed {self.seed}")

    def build(self, data_dir: Path, log: Log) -> tuple[int, int]:
        a = self.build_args()
        out = build("generate", data_dir, size=self.size, num=a["num"], min_path=a["min_path"], loops=self.loops,
                    test_fraction=a["test_fraction"], aug=self.aug, seed=self.seed,
                    train_min_path=self.train_min_path, log=log)
        return out["counts"]["train"] // (self.aug + 1), out["counts"]["test"]


# ---------------------------------------------------------------- the task


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="generate", help="'generate' or a Maze-Hard CSV (source,question,answer,rating)")
    p.add_argument("--size", type=int, default=30, help="N for generated N x N mazes (Maze-Hard: 30)")
    p.add_argument("--num", type=int, default=1000, help="mazes to generate")
    p.add_argument("--min-path", type=int, default=None,
                   help="hardness: shortest path of at least this many steps (default 110 * N^2 / 900)")
    p.add_argument("--train-min-path", type=int, default=None,
                   help="a curriculum: half the generated training mazes get a path of t..t+2 steps, t drawn "
                        "uniformly from [this, --min-path]; test mazes keep --min-path (default: none)")
    p.add_argument("--loops", type=float, default=0.1,
                   help="chance that each inner wall of the carved maze is opened (cycles: several routes)")
    p.add_argument("--aug", type=int, default=0, help="dihedral copies per training maze (0-7)")
    p.add_argument("--limit", type=int, default=None, help="use at most N mazes from the source")


def run_build(args: argparse.Namespace, log: Log = print) -> dict[str, Any]:
    return build(args.source, args.out, size=args.size, num=args.num, min_path=args.min_path, loops=args.loops,
                 test_fraction=args.test_fraction, aug=args.aug, limit=args.limit, seed=args.seed,
                 train_min_path=args.train_min_path, log=log)


TASK = Task(
    name="maze", shape="grid",
    summary="shortest paths through N x N mazes (generated, or Maze-Hard CSV files)",
    add_arguments=add_arguments, build=run_build, scorer=MazeScorer,
    presets={"paper": "configs/maze-paper.yaml", "laptop": "configs/maze-laptop.yaml"},
    learn_set=LearnSet(),
)
