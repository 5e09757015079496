"""Mazes as `trmkit predict` reads and writes them: the task's own text grids, or JSON.

Text: a maze is its rows, one line each, in the task's characters ('#' wall, ' ' open, 'S' start,
'G' goal; '.' is read as open too, since an editor may strip the spaces at a line's end), and an empty
line ends it. JSON: one maze per line, a list of its rows as strings, or an object {"input": that list}.
A maze is square (N x N, any N the run's model reads) with one S and one G.

The answer is the maze with the route's cells written 'o' (the task's answer form), in the maze's own
characters. It is valid when the 'o' cells are exactly the inner cells of one path of open cells from
S to G (tasks/maze/data.py `is_path`); whether it is also a shortest one is said beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from trmkit.tasks.maze.data import MazeError, is_path
from trmkit.tasks.maze.generate import CHARS, GOAL, OPEN, PATH, START, WALL, distances

READ = {"#": WALL, " ": OPEN, ".": OPEN, "S": START, "G": GOAL}
STATUS = ("valid\t", "invalid\t", "error\t")  # the line after each answer in the text form


@dataclass(frozen=True)
class Maze:
    """One maze to answer, and the form it came in for writing its answer back."""

    grid: np.ndarray  # (N, N) uint8 tokens: WALL, OPEN, START, GOAL
    form: str  # "text" (rows, a string with newlines in Python) or "json" (a list of rows)
    open_char: str = " "  # "." when the maze wrote its open cells so


def blocks(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(line number of its first row, rows) of each maze of a text file, from (line number, line) pairs:
    rows run until an empty line; a line that starts with '[' or '{' is a JSON maze on its own."""
    start, rows = 0, []
    for lineno, line in lines:
        line = line.rstrip("\r\n")
        if line.startswith(("[", "{")) or not line:
            if rows:
                yield start, rows
            start, rows = 0, []
            if line:
                yield lineno, [line]
            continue
        start, rows = start or lineno, rows + [line]
    if rows:
        yield start, rows


def parse_maze(value: Any) -> Maze:
    """A block of rows, a string with newlines, a JSON line or a Python list of rows -> Maze; MazeError."""
    if isinstance(value, str):
        value = value.strip("\r\n")
        if value.startswith(("[", "{")):
            try:
                return _from_json(json.loads(value))
            except ValueError as err:
                if isinstance(err, MazeError):
                    raise
                raise MazeError("bad_json", str(err)) from None
        return parse_rows(value.splitlines(), "text")
    return _from_json(value)


def _from_json(value: Any) -> Maze:
    if isinstance(value, dict):
        if "input" not in value:
            raise MazeError("missing_key", f'no "input" key (keys: {sorted(value)})')
        value = value["input"]
    if not isinstance(value, list) or not all(isinstance(row, str) for row in value):
        raise MazeError("bad_maze", "a JSON maze is a list of its rows as strings, e.g. [\"#S #\", ...]")
    return parse_rows(value, "json")


def parse_rows(rows: list[str], form: str) -> Maze:
    """Rows of '# .SG' -> Maze; MazeError(reason, detail) naming what is wrong."""
    side = len(rows)
    widths = sorted({len(row) for row in rows})
    if side < 2 or widths != [side]:
        raise MazeError("bad_size", f"{side} rows of {', '.join(map(str, widths))} characters: a maze is N rows of "
                                    "N characters (an editor may have stripped open cells, ' ', at a line's end: "
                                    "write them '.')")
    text = "".join(rows)
    bad = sorted(set(text) - set(READ))
    if bad:
        raise MazeError("bad_character", f"characters {bad!r}; a maze is written with '#', ' ' (or '.'), 'S', 'G'")
    for char in "SG":
        if text.count(char) != 1:
            raise MazeError("bad_endpoints", f"{text.count(char)} {char!r}: a maze has exactly one S and one G")
    grid = np.array([READ[ch] for ch in text], dtype=np.uint8).reshape(side, side)
    return Maze(grid, form, "." if "." in text and " " not in text else " ")


def render(maze: Maze, marked: np.ndarray) -> list[str]:
    """The maze's rows with the marked cells written 'o', in its own characters."""
    grid = np.where(marked, PATH, maze.grid)
    chars = CHARS.replace(" ", maze.open_char)
    return ["".join(chars[int(t) - 1] for t in row) for row in grid]


def route(maze: Maze, marked: np.ndarray) -> dict[str, Any]:
    """{"valid", "length" (steps S..G of the marked route), "shortest" (steps of a shortest route, -1 when
    G cannot be reached), "reason" when it is not valid}."""
    start = tuple(int(v) for v in np.argwhere(maze.grid == START)[0])
    goal = tuple(int(v) for v in np.argwhere(maze.grid == GOAL)[0])
    shortest = int(distances(maze.grid, start)[goal])
    if is_path(maze.grid, marked):
        return {"valid": True, "length": int(marked.sum()) + 1, "shortest": shortest}
    why = "G cannot be reached from S" if shortest < 0 else (
        "no route marked" if not marked.any() else "the 'o' cells are not one path of open cells from S to G")
    return {"valid": False, "shortest": shortest, "reason": why}


def status(checked: dict[str, Any]) -> str:
    """The line after a text answer: `valid<TAB>20 steps, shortest`, `valid<TAB>24 steps (shortest 20)` or
    `invalid<TAB>why`."""
    if not checked["valid"]:
        return f"invalid\t{checked['reason']}"
    length, shortest = checked["length"], checked["shortest"]
    return f"valid\t{length} steps, shortest" if length == shortest else f"valid\t{length} steps (shortest {shortest})"
