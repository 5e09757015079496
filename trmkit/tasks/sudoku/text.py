"""Sudoku puzzles as `trmkit predict` reads and writes them: 81-character lines or JSON grids.

A text puzzle is one line of 81 characters, row by row: a digit 1-9 is given, '0' or '.' is blank (the
form of the collections `trmkit data sudoku` reads). A JSON puzzle is a 9 x 9 list of digits, 0 blank,
or an object {"input": <a grid or 81 characters>}. An answer is written in its puzzle's form, and is
valid when the rules say so: a full grid that keeps every given, no digit twice in a row, column or box.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from trmkit.tasks.sudoku.solver import SIZE, PuzzleError, check_solution, parse_grid

ANSWER_LINE = re.compile(r"^[0-9.]{81}\t(valid|invalid)(\t|$)")  # a text answer, as `render_text` writes it


@dataclass(frozen=True)
class Puzzle:
    """One puzzle to answer: its digits and the form it came in, for writing its answer back."""

    digits: np.ndarray  # (81,) uint8, 0 = blank
    form: str  # "text" (81 characters) or "json" (a 9 x 9 list)
    blank: str = "."  # a text puzzle's blank character, for a cell an answer leaves blank


def parse_puzzle(value: Any) -> Puzzle:
    """A line of a file or a Python value -> Puzzle; PuzzleError(reason, detail) when it is none."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "{")):
            try:
                return _from_json(json.loads(text))
            except ValueError as err:
                if isinstance(err, PuzzleError):
                    raise
                raise PuzzleError("bad_json", str(err)) from None
        return Puzzle(parse_grid(text), "text", "0" if "0" in text else ".")
    return _from_json(value)


def _from_json(value: Any) -> Puzzle:
    if isinstance(value, dict):
        if "input" not in value:
            raise PuzzleError("missing_key", f'no "input" key (keys: {sorted(value)})')
        value = value["input"]
        if isinstance(value, str):  # {"input": "<81 characters>"}: answered in 81 characters
            return Puzzle(parse_grid(value.strip()), "text", "0" if "0" in value else ".")
    try:
        grid = np.asarray(value)
    except ValueError:
        grid = np.asarray(None)
    if grid.shape != (9, 9) or grid.dtype.kind not in "iu":
        raise PuzzleError("bad_grid", f"a JSON puzzle is a 9 x 9 list of digits 0-9 (0 blank), got {_short(value)}")
    if grid.min() < 0 or grid.max() > 9:
        raise PuzzleError("bad_grid", f"digits are 0-9 (0 blank), got {int(grid.min())}..{int(grid.max())}")
    return Puzzle(grid.reshape(SIZE).astype(np.uint8), "json")


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, np.ndarray) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problem(puzzle: Puzzle, answer: np.ndarray) -> str | None:
    """None when `answer` (81,) digits is a valid solution of the puzzle, else what the rules object to."""
    blanks = int((np.asarray(answer) == 0).sum())
    if blanks:
        return f"{blanks} cells left blank"
    return check_solution(puzzle.digits, answer)


def render(puzzle: Puzzle, answer: np.ndarray) -> str | list[list[int]]:
    """The answer (81,) digits in the puzzle's form: 81 characters, or a 9 x 9 list."""
    digits = np.asarray(answer, dtype=np.uint8).reshape(SIZE)
    if puzzle.form == "json":
        return digits.reshape(9, 9).tolist()
    return "".join(str(int(d)) if d else puzzle.blank for d in digits)


def render_text(puzzle: Puzzle, answer: np.ndarray) -> str:
    """One output line for a text puzzle: `ANSWER<TAB>valid`, or `ANSWER<TAB>invalid<TAB>why`."""
    why = problem(puzzle, answer)
    return f"{render(puzzle, answer)}\tvalid" if why is None else f"{render(puzzle, answer)}\tinvalid\t{why}"


def details(puzzle: Puzzle, answer: np.ndarray) -> dict[str, Any]:
    """The answer and its check as a dict (a JSON output line, `Run.predict(..., details=True)`)."""
    why = problem(puzzle, answer)
    return {"output": render(puzzle, answer), "valid": why is None, **({"reason": why} if why else {})}
