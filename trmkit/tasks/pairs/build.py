"""`trmkit data pairs`: a store from a JSONL file of {"input": ..., "output": ...} lines.

Every line is checked (codec.py); a bad one is reported as file:line with its reason, counted
and skipped, and the summary says how many. The test split is a random `test_fraction` of the
kept pairs. Nothing is augmented unless the user names the symmetries that keep the answers
right (augment.py): a user's puzzle may have none, and a wrong one would teach wrong answers.
meta.json's build section records the line each puzzle came from ("source_lines": a key of its
input tokens -> its line number), so a user's checker (checker.py) names the line of a puzzle it
fails on; a store built before it has none, and the checker then shows the puzzle itself.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trmkit.data.imports import ImportReport, split_rows
from trmkit.data.store import SplitArrays, check_new_store, write_store
from trmkit.tasks.pairs.augment import Augment, copies_of, parse_augment
from trmkit.tasks.pairs.codec import (MAX_CELLS, Layout, PairError, Value, check_kind, field, make_layout,
                                      parse_canvas, parse_record, parse_symbols, read_lines)

NAME = "pairs"
Log = Callable[[str], None]
MAX_LINES_RECORDED = 100_000  # source lines kept in meta.json (about 30 bytes each, read with every split)


def read_pairs(path: str | Path, report: ImportReport,
               max_cells: int = MAX_CELLS) -> tuple[list[tuple[Value, Value]], list[int]]:
    """The usable (input, output) pairs of a JSONL file and the line each came from; the others are counted in
    `report`."""
    pairs: list[tuple[Value, Value]] = []
    lines: list[int] = []
    kind = None
    for lineno, where, line in read_lines(path, report):
        try:
            record = parse_record(line)
            x, y = field(record, "input", max_cells), field(record, "output", max_cells)
            if (x.kind, x.shape) != (y.kind, y.shape):
                raise PairError("shape_mismatch", f"input is a {x.kind} of shape {list(x.shape)}, "
                                                  f"output a {y.kind} of shape {list(y.shape)}")
            check_kind(x, kind)
        except PairError as e:
            report.skip(where, e.reason, e.detail)
            continue
        kind = x.kind
        report.accepted += 1
        pairs.append((x, y))
        lines.append(lineno)
    return pairs, lines


def input_key(tokens: np.ndarray) -> str:
    """A puzzle's key in "source_lines": a hash of its input's token row (any integer dtype)."""
    return hashlib.blake2b(np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=8).hexdigest()


def source_lines(pairs: list[tuple[Value, Value]], lines: list[int], layout: Layout,
                 report: ImportReport) -> dict[str, int]:
    """Input key -> the first line holding that input (a checker's errors name it), for up to
    MAX_LINES_RECORDED pairs; a larger file records none, and the report says so."""
    if len(pairs) > MAX_LINES_RECORDED:
        report.notes.append(f"source lines not recorded ({len(pairs)} pairs, more than {MAX_LINES_RECORDED}): a "
                            "checker's errors show the puzzle instead of its line")
        return {}
    keys: dict[str, int] = {}
    for (x, _), line in zip(pairs, lines):
        keys.setdefault(input_key(layout.encode(x)), line)
    return keys


def build_pairs(source: str | Path, out_dir: str | Path, *, test_fraction: float = 0.1, seed: int = 0,
                blank: str | None = None, max_cells: int = MAX_CELLS, aug: int = 0, transforms: str | None = None,
                permute: str | None = None, canvas: str | None = None, symbols: str | None = None,
                force: bool = False, log: Log = print) -> dict[str, Any]:
    """Build a pairs store at `out_dir` from a JSONL file; returns the counts written.

    aug, transforms, permute: augmented copies of each training pair, made only with the named
    symmetries (augment.py); none by default. canvas ("6x6", or a length for strings) and symbols
    ("0-6"): a canvas at least as large as the data's and extra vocabulary symbols (codec.make_layout),
    so that a store of larger puzzles built alike shares the vocabulary and length. force: replace a
    store already at `out_dir`."""
    start = time.perf_counter()
    check_new_store(out_dir, force)
    report = ImportReport(source=str(source), unit="pairs")
    pairs, lines = read_pairs(source, report, max_cells)
    if not pairs:
        for line in report.summary_lines():
            log(line)
        raise ValueError(f"{source}: no usable pairs ({report.skipped} skipped); nothing written")
    kind = pairs[0][0].kind
    layout = make_layout(kind, [v for pair in pairs for v in pair], parse_canvas(canvas, kind),
                         parse_symbols(symbols, kind))
    report.notes.append(_layout_note(layout, pairs, canvas is not None, symbols))
    blank_id = blank_token(layout, blank)
    recorded = source_lines(pairs, lines, layout, report)
    augment = parse_augment(aug, transforms, permute, layout)
    if augment is not None:
        report.notes.append(augment.describe())
    for line in report.summary_lines():
        log(line)
    splits = _splits(pairs, layout, test_fraction, seed, augment)
    settings = {"test_fraction": test_fraction, "seed": seed, "blank": blank, "aug": aug, "canvas": canvas,
                "symbols": symbols,
                "transforms": list(augment.transforms) if augment else [],
                "permute": list(augment.permute) if augment else [], "source_lines": recorded}
    write_store(out_dir, splits, _meta(layout, blank_id, report, settings), force=force)
    counts = {name: len(arrays.inputs) for name, arrays in splits.items()}
    log(f"wrote {out_dir}: " + ", ".join(f"{name} {n} examples" for name, n in counts.items())
        + f", {report.skipped} lines skipped ({time.perf_counter() - start:.1f} s)")
    return {"out": str(out_dir), **counts, "skipped": report.skipped}


def _splits(pairs: list[tuple[Value, Value]], layout: Layout, test_fraction: float, seed: int,
            augment: Augment | None) -> dict[str, SplitArrays]:
    """The test split (never augmented) and, when it has pairs, the training split."""
    test_rows, train_rows = split_rows(len(pairs), test_fraction, seed)
    splits = {"test": _split([pairs[i] for i in test_rows], layout)}
    if len(train_rows):
        splits["train"] = _split([pairs[i] for i in train_rows], layout, augment, np.random.default_rng([seed, 2]))
    return splits


def _layout_note(layout: Layout, pairs: list[tuple[Value, Value]], canvas: bool, symbols: str | None) -> str:
    shapes = {x.shape for x, _ in pairs}
    where = ("--canvas: the pairs sit at the start, padding around them" if canvas else
             "every pair has this shape" if len(shapes) == 1 else
             f"the largest of {len(shapes)} shapes; smaller ones sit at the start, padding around them")
    seen = "seen in the data" + (f" and named by --symbols {symbols}" if symbols else "")
    return (f"canvas {' x '.join(map(str, layout.canvas))} ({where}); vocabulary of {len(layout.vocab) - 1} "
            f"symbols {seen} plus {layout.vocab[0]}: {' '.join(layout.vocab[1:21])}"
            + (" ..." if len(layout.vocab) > 21 else ""))


def blank_token(layout: Layout, blank: str | None) -> int | None:
    """The token of --blank (cells to fill in: blank_accuracy is then reported), or None."""
    if blank is None:
        return None
    if blank not in layout.vocab[1:]:
        raise ValueError(f"--blank {blank!r} is not a symbol of this file (symbols: {' '.join(layout.vocab[1:21])})")
    return layout.vocab.index(blank)


def _split(pairs: list[tuple[Value, Value]], layout: Layout, augment: Augment | None = None,
           rng: np.random.Generator | None = None) -> SplitArrays:
    """Each pair is a group: itself and its augmented copies, one example each, one shared puzzle identifier."""
    per = 1 + (augment.copies if augment else 0)
    rows = [c for x, y in pairs
            for c in [(x, y, None), *(copies_of(x, y, augment, rng, layout.canvas) if augment else [])]]
    inputs = np.stack([layout.encode(x, at) for x, _, at in rows])  # (n, L)
    labels = np.stack([layout.encode(y, at) for _, y, at in rows])  # (n, L); PAD (no loss) off each pair's shape
    n = len(rows)
    return SplitArrays(inputs=inputs, labels=labels, puzzle_identifiers=np.zeros(n, dtype=np.uint8),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(0, n + 1, per))


def _meta(layout: Layout, blank_id: int | None, report: ImportReport, settings: dict) -> dict[str, Any]:
    meta = {
        "task": NAME, "vocab": list(layout.vocab), "pad_id": 0, "ignore_label_id": 0, "blank_id": blank_id,
        "num_puzzle_identifiers": 1, "source": report.source,
        "build": {**settings, "pairs": layout.to_dict(), **report.to_dict()},
    }
    if layout.kind == "grid":
        meta["grid_shape"] = list(layout.canvas)
    return meta
