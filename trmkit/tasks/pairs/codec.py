"""A user's pairs as tokens and back: reading JSONL lines, checking values, the layout of a store.

A value is either a grid (a non-empty rectangular list of lists of integers 0..MAX_VALUE) or a
string (non-empty). Every cell or character is one symbol; the vocabulary is "<pad>" followed
by the symbols seen in the data (integers in numeric order, characters in code-point order), so
a store can be decoded with its meta.json alone. Examples of several sizes share one canvas:
a grid sits at the top left of the largest grid's rows x columns, a string at the start of the
longest string's length; the rest is padding, which carries no loss and is never predicted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from trmkit.data.imports import ImportReport

PAD = "<pad>"
KINDS = ("grid", "string")
MAX_VALUE = 255  # the largest integer a grid cell may hold
MAX_CELLS = 4096  # the longest sequence a pair may have (grid rows x columns, or string length)


class PairError(ValueError):
    """One unusable line: a short reason (counted) and a detail (shown with file:line)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Value:
    """One checked input or output: its kind, shape and symbols (row-major for a grid)."""

    kind: str  # one of KINDS
    shape: tuple[int, ...]  # (rows, columns) or (length,)
    symbols: tuple[str, ...]


def parse_value(value: Any, key: str, max_cells: int = MAX_CELLS) -> Value:
    """Check one "input" or "output" value; a PairError names what is wrong with it."""
    if isinstance(value, str):
        if not value:
            raise PairError("empty", f'"{key}" is an empty string')
        if len(value) > max_cells:
            raise PairError("too_large", f'"{key}" has {len(value)} characters (at most {max_cells})')
        return Value("string", (len(value),), tuple(value))
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise PairError("bad_value", f'"{key}" must be a string or a non-empty list of lists of integers, '
                                     f"got {_short(value)}")
    widths = {len(row) for row in value}
    if len(widths) > 1:
        raise PairError("ragged_grid", f'"{key}" has rows of lengths {sorted(widths)}')
    rows, cols = len(value), widths.pop()
    if cols == 0:
        raise PairError("empty", f'"{key}" has empty rows')
    if rows * cols > max_cells:
        raise PairError("too_large", f'"{key}" has {rows} x {cols} cells (at most {max_cells})')
    cells = [v for row in value for v in row]
    bad = next((v for v in cells if not isinstance(v, int) or isinstance(v, bool)), None)
    if bad is not None:
        raise PairError("bad_value", f'"{key}" holds {_short(bad)}; grid cells are integers 0..{MAX_VALUE}')
    if min(cells) < 0 or max(cells) > MAX_VALUE:
        worst = min(cells) if min(cells) < 0 else max(cells)
        raise PairError("too_large", f'"{key}" holds {worst}; grid cells are integers 0..{MAX_VALUE}')
    return Value("grid", (rows, cols), tuple(str(v) for v in cells))


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_lines(path: str | Path, report: ImportReport) -> Iterator[tuple[int, str, str]]:
    """(line number, "file:line", text) of each non-blank line, counted in `report.lines`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs file not found: {path}")
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                report.lines += 1
                yield lineno, f"{path.name}:{lineno}", line


def parse_record(line: str) -> dict:
    """One line as a JSON object; a PairError (bad_json, bad_encoding) otherwise."""
    if "\ufffd" in line:  # read_lines decodes bytes that are not UTF-8 as U+FFFD: never kept silently
        raise PairError("bad_encoding", "bytes that are not UTF-8 (save the file as UTF-8)")
    try:
        record = json.loads(line)
    except ValueError as e:
        raise PairError("bad_json", str(e)) from None
    if not isinstance(record, dict):
        raise PairError("bad_json", f"expected a JSON object, got {_short(record)}")
    return record


def field(record: dict, key: str, max_cells: int = MAX_CELLS) -> Value:
    if key not in record:
        raise PairError("missing_key", f'no "{key}" key (keys: {sorted(record)})')
    return parse_value(record[key], key, max_cells)


def check_kind(value: Value, kind: str | None) -> None:
    """A file holds one kind of value: the first kept line's."""
    if kind is not None and value.kind != kind:
        raise PairError("mixed_kinds", f"a {value.kind}, but this file's values are {kind}s (from its first kept line)")


# ---------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """How a store lays values out: the kind, the canvas and the vocabulary (kept in meta.json)."""

    kind: str
    canvas: tuple[int, ...]  # (rows, columns) or (length,)
    vocab: tuple[str, ...]  # PAD first

    @property
    def seq_len(self) -> int:
        return int(np.prod(self.canvas))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "canvas": list(self.canvas)}

    @classmethod
    def from_meta(cls, meta: Any) -> "Layout":
        """The layout of a pairs store (its StoreMeta); a clear error for another task's store."""
        pairs = meta.build.get("pairs") if meta.task == "pairs" else None
        if not pairs:
            raise ValueError(f"the store is a {meta.task!r} store, not one built by `trmkit data pairs`")
        return cls(str(pairs["kind"]), tuple(int(n) for n in pairs["canvas"]), tuple(meta.vocab))

    def fits(self, value: Value) -> None:
        """Raise PairError unless `value` is of this kind, fits the canvas and uses known symbols."""
        if value.kind != self.kind:
            raise PairError("mixed_kinds", f"a {value.kind}, but the model was trained on {self.kind}s")
        if any(n > c for n, c in zip(value.shape, self.canvas)):
            raise PairError("too_large", f"shape {list(value.shape)} does not fit the model's {list(self.canvas)}")
        unknown = sorted(set(value.symbols) - set(self.vocab[1:]))
        if unknown:
            raise PairError("unknown_symbol", f"symbols {unknown[:5]} were never seen in training")

    def encode(self, value: Value, at: tuple[int, ...] | None = None) -> np.ndarray:
        """(seq_len,) token ids of `value` on the canvas, PAD (0) around it; at its start, or from the offset
        `at` (training copies placed elsewhere on the canvas: augment.py's shift)."""
        index = {s: i for i, s in enumerate(self.vocab)}
        out = np.zeros(self.canvas, dtype=np.int64)
        ids = np.array([index[s] for s in value.symbols], dtype=np.int64).reshape(value.shape)
        at = at or (0,) * len(value.shape)
        out[tuple(slice(a, a + n) for a, n in zip(at, value.shape))] = ids
        return out.reshape(-1)

    def decode(self, tokens: np.ndarray, shape: tuple[int, ...]) -> Any:
        """A predicted (seq_len,) token row back to a grid or string of `shape` (the input's)."""
        cells = np.asarray(tokens).reshape(self.canvas)[tuple(slice(0, n) for n in shape)]
        symbols = [self.vocab[int(t)] for t in cells.reshape(-1)]
        if self.kind == "string":
            return "".join(symbols)
        return [[int(s) for s in symbols[r * shape[1]:(r + 1) * shape[1]]] for r in range(shape[0])]


def make_layout(kind: str, values: list[Value], canvas: tuple[int, ...] | None = None,
                extra: tuple[str, ...] = ()) -> Layout:
    """The canvas that holds every value (or `canvas`, --canvas, at least as large), and the vocabulary of
    their symbols plus `extra` (--symbols): a store built so shares its vocabulary and sequence length with
    one of larger puzzles, as `trmkit adapt` asks (docs/adapt.md, Another size)."""
    needed = tuple(int(n) for n in np.max([v.shape for v in values], axis=0))
    if canvas is not None:
        if len(canvas) != len(needed) or any(c < n for c, n in zip(canvas, needed)):
            raise ValueError(f"--canvas {'x'.join(map(str, canvas))} is smaller than the data's "
                             f"{'x'.join(map(str, needed))} (the largest {kind} in the file): give at least that")
        needed = tuple(canvas)
    symbols = set().union(*(v.symbols for v in values), extra)
    order = (lambda s: int(s)) if kind == "grid" else (lambda s: s)  # noqa: E731
    return Layout(kind, needed, (PAD, *sorted(symbols, key=order)))


def parse_canvas(text: str | None, kind: str) -> tuple[int, ...] | None:
    """--canvas: "ROWSxCOLUMNS" for grids, "LENGTH" for strings (None: the data's largest shape)."""
    if text is None:
        return None
    parts = text.lower().replace(" ", "").split("x")
    want = 2 if kind == "grid" else 1
    if len(parts) != want or not all(p.isdigit() and int(p) > 0 for p in parts):
        form = "ROWSxCOLUMNS, e.g. 6x6" if kind == "grid" else "LENGTH, e.g. 64"
        raise ValueError(f"--canvas {text!r}: this file holds {kind}s, give {form}")
    canvas = tuple(int(p) for p in parts)
    if int(np.prod(canvas)) > MAX_CELLS:
        raise ValueError(f"--canvas {text}: {int(np.prod(canvas))} cells, at most {MAX_CELLS}")
    return canvas


def parse_symbols(text: str | None, kind: str) -> tuple[str, ...]:
    """--symbols: extra vocabulary symbols, comma-separated; "A-B" is a range (integers for grids, single
    characters for strings), e.g. 0-6 or a-z,0-9."""
    if not text:
        return ()
    out: list[str] = []
    for item in text.split(","):
        low, dash, high = item.partition("-")
        if dash and low and high:
            out += _symbol_range(low, high, kind, text)
        else:
            out.append(_symbol(item, kind, text))
    return tuple(dict.fromkeys(out))


def _symbol_range(low: str, high: str, kind: str, text: str) -> list[str]:
    if kind == "grid":
        a, b = int(_symbol(low, kind, text)), int(_symbol(high, kind, text))
    else:
        a, b = ord(_symbol(low, kind, text)), ord(_symbol(high, kind, text))
    if a > b:
        raise ValueError(f"--symbols {text!r}: the range {low}-{high} runs backwards")
    return [str(v) for v in range(a, b + 1)] if kind == "grid" else [chr(v) for v in range(a, b + 1)]


def _symbol(symbol: str, kind: str, text: str) -> str:
    """One symbol as the store spells it (a grid's integer without leading zeros), or a clear error."""
    if kind == "grid":
        if not (symbol.isdigit() and 0 <= int(symbol) <= MAX_VALUE):
            raise ValueError(f"--symbols {text!r}: {symbol!r} is no grid cell; grid symbols are integers "
                             f"0..{MAX_VALUE} (a range: 0-6)")
        return str(int(symbol))
    if len(symbol) != 1:
        raise ValueError(f"--symbols {text!r}: {symbol!r} is not one character; a string's symbols are characters")
    return symbol
