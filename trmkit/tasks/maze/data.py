"""Maze text <-> tokens, answer checks, and the Maze-Hard CSV importer (every row checked)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.tasks.maze.generate import CHARS, GOAL, OPEN, PATH, START, WALL, distances, shortest_paths


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


def is_path(question: np.ndarray, marked: np.ndarray) -> bool:
    """True when the marked cells (N, N) are exactly the inner cells of one path from S to G
    (through open cells, with no cell to spare); it needs the question alone, not a shortest path."""
    if np.any(marked & (question != OPEN)):
        return False
    allowed = marked | (question == START) | (question == GOAL)
    start = tuple(int(v) for v in np.argwhere(question == START)[0])
    goal = tuple(int(v) for v in np.argwhere(question == GOAL)[0])
    steps = int(distances(np.where(allowed, OPEN, WALL).astype(np.uint8), start)[goal])
    return steps > 0 and int(marked.sum()) == steps - 1


def is_shortest_path(question: np.ndarray, marked: np.ndarray, length: int) -> bool:
    """True when the marked cells are exactly a shortest path's inner cells from S to G."""
    return int(marked.sum()) == length - 1 and is_path(question, marked)


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
