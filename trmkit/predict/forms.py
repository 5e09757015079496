"""What each task's inputs and answers look like to `trmkit predict`: one form per task.

A form reads a file (or Python values) into Items, each the model's input tokens or the reason it
cannot be answered (counted in the ImportReport with file:line), and writes each answer back in its
input's form. The grids themselves are the tasks' own (tasks/sudoku/text.py, tasks/maze/text.py,
tasks/pairs/codec.py); this module joins them to the model's tokens.

- pairs: JSONL in, {"input": ...} per line; out {"line": N, "output": ...} (with "correct" when the line
  gave an "output"), or {"line": N, "error": "reason: detail"}.
- sudoku: a line of 81 characters in, `ANSWER<TAB>valid` (or `ANSWER<TAB>invalid<TAB>why`) out; a JSON
  grid in, {"line": N, "output": grid, "valid": ...} out; a line that cannot be read: `<TAB>error<TAB>why`.
- maze: a text maze in, its rows with the route marked 'o' and a line `valid<TAB>20 steps, shortest` (or
  `invalid<TAB>why`, `error<TAB>why`) out, then an empty line; a JSON maze in, a JSON line out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from trmkit.config import ConfigError
from trmkit.data.imports import ImportReport
from trmkit.tasks.maze import text as maze_text
from trmkit.tasks.maze.data import MazeError
from trmkit.tasks.maze.generate import OPEN, PATH
from trmkit.tasks.pairs.codec import Layout, PairError, Value, field, parse_record
from trmkit.tasks.sudoku import text as sudoku_text
from trmkit.tasks.sudoku.solver import PuzzleError, from_tokens, to_tokens

UNREADABLE = (PairError, PuzzleError, MazeError)  # each a (reason, detail) about one input


@dataclass
class Item:
    """One input: the model's tokens, or the reason it cannot be answered."""

    line: int  # its (first) line in the file, or its index in a Python list
    x: np.ndarray | None = None  # the model's input tokens: (L,), or (N, N) for a maze
    source: Any = None  # what writing the answer needs: the puzzle, the maze, the pairs value
    target: Value | None = None  # pairs: a given output, scored
    error: str | None = None  # "reason: detail"
    as_json: bool = True  # whether its answer is a JSON line


def file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line; text not UTF-8 comes through as U+FFFD, refused per input."""
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from enumerate(f, start=1)


def _bad(item: Item, where: str, err: Exception, report: ImportReport) -> Item:
    reason, detail = getattr(err, "reason", "bad_input"), getattr(err, "detail", str(err))
    report.skip(where, reason, detail)
    item.error = f"{reason}: {detail}"
    return item


def _encoding(text: str) -> None:
    if "\ufffd" in text:
        raise PairError("bad_encoding", "bytes that are not UTF-8 (save the file as UTF-8)")


class PairsForm:
    unit, expected = "lines", 'JSONL, one {"input": ...} per line (a grid of integers or a string)'

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def read(self, path: Path, report: ImportReport) -> list[Item]:
        items = []
        for lineno, text in file_lines(path):
            if text.strip():
                report.lines += 1
                items.append(self.item(text, lineno, f"{path.name}:{lineno}", report))
        return items

    def item(self, text: str, lineno: int, where: str, report: ImportReport) -> Item:
        item = Item(lineno)
        try:
            record = parse_record(text)
            value = field(record, "input")
            self.layout.fits(value)
        except PairError as err:
            return _bad(item, where, err, report)
        report.accepted += 1
        item.x, item.source, item.target = self.layout.encode(value), value, _target(record, value)
        return item

    def parse(self, value: Any, index: int) -> Item:
        try:
            parsed = field({"input": value}, "input")
            self.layout.fits(parsed)
        except PairError as err:
            raise ConfigError(f"input {index}: {err.reason}: {err.detail}") from None
        return Item(index, self.layout.encode(parsed), parsed)

    def details(self, item: Item, tokens: np.ndarray) -> dict[str, Any]:
        out = {"output": self.value(item, tokens)}
        if item.target is not None:
            right, total = self.cells_right(item, tokens)
            out["correct"] = right == total
        return out

    def value(self, item: Item, tokens: np.ndarray) -> Any:
        return self.layout.decode(tokens, item.source.shape)

    def cells_right(self, item: Item, tokens: np.ndarray) -> tuple[int, int]:
        inside = self.layout.encode(item.source) > 0  # the input's cells on the canvas
        right = int(np.sum((self.layout.encode(item.target) == tokens.reshape(-1)) & inside))
        return right, len(item.target.symbols)

    def text(self, item: Item, tokens: np.ndarray | None) -> str:
        if item.error:
            return json.dumps({"line": item.line, "error": item.error}, ensure_ascii=False) + "\n"
        return json.dumps({"line": item.line, **self.details(item, tokens)}, ensure_ascii=False) + "\n"

    def summary(self, items: list[Item], answers: list) -> list[str]:
        scored = [self.cells_right(i, a) for i, a in zip(items, answers) if a is not None and i.target is not None]
        if not scored:
            return []
        right, total = sum(r for r, _ in scored), sum(t for _, t in scored)
        exact = sum(r == t for r, t in scored)
        return [f"predict: against the {len(scored)} given outputs: cell_accuracy {right / total:.4f}, "
                f"exact_accuracy {exact / len(scored):.4f}"]


def _target(record: dict, value: Value) -> Value | None:
    """The line's "output" when it is usable for scoring (same kind and shape), else None."""
    try:
        target = field(record, "output") if "output" in record else None
    except PairError:
        return None
    return target if target is not None and (target.kind, target.shape) == (value.kind, value.shape) else None


class SudokuForm:
    unit, expected = "puzzles", ("Sudoku puzzles, one a line: 81 characters (digits, '0' or '.' blank) or a 9 x 9 "
                                 "JSON grid")

    def read(self, path: Path, report: ImportReport) -> list[Item]:
        items = []
        for lineno, text in file_lines(path):
            if not text.strip():
                continue
            report.lines += 1
            item = Item(lineno, as_json=text.lstrip().startswith(("[", "{")))
            try:
                _encoding(text)
                puzzle = sudoku_text.parse_puzzle(text)
            except UNREADABLE as err:
                items.append(_bad(item, f"{path.name}:{lineno}", err, report))
                continue
            report.accepted += 1
            item.x, item.source = to_tokens(puzzle.digits), puzzle
            items.append(item)
        return items

    def parse(self, value: Any, index: int) -> Item:
        try:
            puzzle = sudoku_text.parse_puzzle(value)
        except PuzzleError as err:
            raise ConfigError(f"input {index}: {err.reason}: {err.detail}") from None
        return Item(index, to_tokens(puzzle.digits), puzzle, as_json=puzzle.form == "json")

    def details(self, item: Item, tokens: np.ndarray) -> dict[str, Any]:
        return sudoku_text.details(item.source, from_tokens(tokens))

    def value(self, item: Item, tokens: np.ndarray) -> Any:
        return sudoku_text.render(item.source, from_tokens(tokens))

    def text(self, item: Item, tokens: np.ndarray | None) -> str:
        if item.as_json:
            shown = {"error": item.error} if item.error else self.details(item, tokens)
            return json.dumps({"line": item.line, **shown}) + "\n"
        if item.error:
            return f"\terror\tline {item.line}: {item.error}\n"
        return sudoku_text.render_text(item.source, from_tokens(tokens)) + "\n"

    def summary(self, items: list[Item], answers: list) -> list[str]:
        return _valid_line(self, items, answers)


class MazeForm:
    unit, expected = "mazes", ("mazes: N rows of N characters ('#' wall, ' ' or '.' open, one S, one G), an empty "
                               "line after each; or one JSON list of rows a line")

    def read(self, path: Path, report: ImportReport) -> list[Item]:
        items = []
        for lineno, rows in maze_text.blocks(file_lines(path)):
            report.lines += 1
            item = Item(lineno, as_json=rows[0].startswith(("[", "{")))
            try:
                _encoding("".join(rows))
                maze = maze_text.parse_maze(rows[0]) if item.as_json else maze_text.parse_rows(rows, "text")
            except UNREADABLE as err:
                items.append(_bad(item, f"{path.name}:{lineno}", err, report))
                continue
            report.accepted += 1
            item.x, item.source = maze.grid, maze
            items.append(item)
        return items

    def parse(self, value: Any, index: int) -> Item:
        try:
            maze = maze_text.parse_maze(value)
        except MazeError as err:
            raise ConfigError(f"input {index}: {err.reason}: {err.detail}") from None
        return Item(index, maze.grid, maze, as_json=maze.form == "json")

    def marked(self, item: Item, tokens: np.ndarray) -> np.ndarray:
        """The cells the answer puts on the route: 'o' on an open cell (walls, S and G are the maze's)."""
        return (np.asarray(tokens).reshape(item.source.grid.shape) == PATH) & (item.source.grid == OPEN)

    def details(self, item: Item, tokens: np.ndarray) -> dict[str, Any]:
        return {"output": self.value(item, tokens), **maze_text.route(item.source, self.marked(item, tokens))}

    def value(self, item: Item, tokens: np.ndarray) -> Any:
        rows = maze_text.render(item.source, self.marked(item, tokens))
        return rows if item.source.form == "json" else "\n".join(rows)

    def text(self, item: Item, tokens: np.ndarray | None) -> str:
        if item.as_json:
            shown = {"error": item.error} if item.error else self.details(item, tokens)
            return json.dumps({"line": item.line, **shown}) + "\n"
        if item.error:
            return f"error\tline {item.line}: {item.error}\n\n"
        marked = self.marked(item, tokens)
        rows = maze_text.render(item.source, marked)
        return "\n".join([*rows, maze_text.status(maze_text.route(item.source, marked))]) + "\n\n"

    def summary(self, items: list[Item], answers: list) -> list[str]:
        return _valid_line(self, items, answers)


def _valid_line(form, items: list[Item], answers: list) -> list[str]:
    """How many answers the rules accept (a Sudoku's rules, a maze's route)."""
    checked = [form.details(i, a)["valid"] for i, a in zip(items, answers) if a is not None]
    return [f"predict: {sum(checked)} of {len(checked)} answers valid"] if checked else []


def form_for(task: str, meta) -> PairsForm | SudokuForm | MazeForm:
    """The form of the store's task (engine.TASKS)."""
    if task == "sudoku":
        return SudokuForm()
    if task == "maze":
        return MazeForm()
    try:
        return PairsForm(Layout.from_meta(meta))
    except ValueError as err:
        raise ConfigError(f"{meta.task} store: {err}; `trmkit predict` answers sudoku, maze and pairs runs") from err


def looks_like_answers(head: str, whole: bool) -> bool:
    """Whether the start of a file (`whole`: all of it) is answers `trmkit predict` wrote, of any task:
    its JSON lines, Sudoku answer lines, or maze rows up to a status line."""
    lines = [line for line in head.splitlines() if line.strip()]
    lines = lines if whole or len(lines) < 2 else lines[:-1]  # the last line of a part may be cut
    if not lines:
        return False
    first = lines[0]
    if first.startswith("{"):
        try:
            record = json.loads(first)
        except ValueError:
            return False
        return isinstance(record, dict) and "line" in record and ("output" in record or "error" in record)
    if sudoku_text.ANSWER_LINE.match(first) or first.startswith("\terror\t"):
        return True
    status = next((n for n, line in enumerate(lines) if line.startswith(maze_text.STATUS)), None)
    return status is not None and all(set(line) <= set("# .SGo") for line in lines[:status])
