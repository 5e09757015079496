"""Importing a dataset folder built by the TRM reference implementation (`--format trm-reference`).

The reference's builders write, per split folder (DIR/train, DIR/test), a `dataset.json` (pad_id,
ignore_label_id, blank_identifier_id, vocab_size, seq_len, num_puzzle_identifiers, total_groups,
mean_puzzle_examples, sets) and, for each set name in "sets", five arrays
`<set>__{inputs,labels,puzzle_identifiers,puzzle_indices,group_indices}.npy`: the same five
arrays as a trmkit store (data/store.py), without a vocabulary. The sets of a split are joined
into one (their offsets shifted). Token t is named str(t), token 0 "<pad>", so `trmkit predict`
reads and writes grids of token ids; labels equal to the reference's ignore_label_id carry no
loss. The reference records no grid shape: a square sequence length is read as a square grid,
any other as one row (both printed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.data.store import ARRAY_NAMES, SplitArrays, check_new_store, write_store
from trmkit.tasks.pairs.codec import PAD, Layout

META = "dataset.json"
REQUIRED = ("pad_id", "vocab_size", "seq_len", "num_puzzle_identifiers", "sets")
Log = Callable[[str], None]


def is_reference_dir(path: str | Path) -> bool:
    """True for a folder with at least one <split>/dataset.json."""
    path = Path(path)
    return path.is_dir() and any((child / META).is_file() for child in path.iterdir())


def read_split(folder: Path) -> tuple[dict[str, Any], SplitArrays]:
    """One reference split folder: its dataset.json, and its sets joined into one split's arrays."""
    meta = _read_meta(folder / META)
    parts = [{name: _load(folder / f"{s}__{name}.npy") for name in ARRAY_NAMES} for s in meta["sets"]]
    examples = puzzles = 0
    joined: dict[str, list[np.ndarray]] = {name: [] for name in ARRAY_NAMES}
    for i, part in enumerate(parts):
        joined["inputs"].append(part["inputs"])
        joined["labels"].append(part["labels"])
        joined["puzzle_identifiers"].append(part["puzzle_identifiers"])
        joined["puzzle_indices"].append(part["puzzle_indices"][(1 if i else 0):].astype(np.int64) + examples)
        joined["group_indices"].append(part["group_indices"][(1 if i else 0):].astype(np.int64) + puzzles)
        examples += len(part["inputs"])
        puzzles += len(part["puzzle_identifiers"])
    arrays = {name: np.concatenate(values) for name, values in joined.items()}
    _check_tokens(folder, meta, arrays)
    ignore = meta.get("ignore_label_id")
    if ignore is not None and ignore != 0:  # trmkit's ignore label is the pad token 0
        arrays["labels"] = np.where(arrays["labels"] == ignore, 0, arrays["labels"])
    return meta, SplitArrays(**arrays)


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (a TRM reference split folder holds dataset.json)")
    try:
        meta = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise ValueError(f"{path}: missing key(s) {missing} of the TRM reference's dataset.json")
    if meta["pad_id"] != 0:
        raise ValueError(f"{path}: pad_id {meta['pad_id']}: only folders whose pad token is 0 are read "
                         "(as every reference builder writes them)")
    return meta


def _load(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (named by the split's dataset.json 'sets')")
    return np.load(path, allow_pickle=False)


def _check_tokens(folder: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Inputs and labels are (N, seq_len) tokens below vocab_size; the first bad row is named."""
    for name in ("inputs", "labels"):
        values = arrays[name]
        if values.ndim != 2 or values.shape[1] != meta["seq_len"]:
            raise ValueError(f"{folder}: {name} has shape {values.shape}, dataset.json says seq_len {meta['seq_len']}")
        allowed = [meta.get("ignore_label_id")] if name == "labels" else []
        bad = ((values < 0) | (values >= meta["vocab_size"])) & ~np.isin(values, [a for a in allowed if a is not None])
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise ValueError(f"{folder}: {name} row {row} holds token {int(values[row][bad[row]][0])}, "
                             f"outside vocab_size {meta['vocab_size']}")


def reference_layout(seq_len: int, vocab_size: int) -> tuple[Layout, str]:
    """The grid a reference folder's sequences are read as, and why."""
    side = math.isqrt(seq_len)
    vocab = (PAD, *(str(t) for t in range(1, vocab_size)))
    if side * side == seq_len:
        return Layout("grid", (side, side), vocab), f"canvas {side} x {side} (seq_len {seq_len} is a square)"
    return Layout("grid", (1, seq_len), vocab), f"canvas 1 x {seq_len} (seq_len {seq_len} is not a square: one row)"


def build_reference(source: str | Path, out_dir: str | Path, blank_id: Callable[[Layout], int | None],
                    force: bool = False) -> tuple[dict[str, SplitArrays], dict[str, Any], ImportReport]:
    """The splits of a reference folder, the store meta's fields, and a report of what was read."""
    source = Path(source)
    check_new_store(out_dir, force)
    folders = sorted(c for c in source.iterdir() if (c / META).is_file())
    read = {folder.name: read_split(folder) for folder in folders}
    metas = [meta for meta, _ in read.values()]
    for key in ("seq_len", "vocab_size"):
        if len({m[key] for m in metas}) > 1:
            raise ValueError(f"{source}: the splits disagree on {key}: {[m[key] for m in metas]}")
    layout, why = reference_layout(metas[0]["seq_len"], metas[0]["vocab_size"])
    report = ImportReport(source=str(source), unit="examples")
    report.lines = report.accepted = sum(len(arrays.inputs) for _, arrays in read.values())
    report.notes.append(f"{why}; token t is named {{t}}, 0 {PAD}; splits {', '.join(read)}")
    meta = {"task": "pairs", "vocab": list(layout.vocab), "pad_id": 0, "ignore_label_id": 0,
            "blank_id": blank_id(layout), "num_puzzle_identifiers": max(m["num_puzzle_identifiers"] for m in metas),
            "source": str(source), "grid_shape": list(layout.canvas),
            "build": {"format": "trm-reference", "pairs": layout.to_dict(), **report.to_dict()}}
    return {name: arrays for name, (_, arrays) in read.items()}, meta, report


def write_reference(source: str | Path, out_dir: str | Path, blank_id: Callable[[Layout], int | None],
                    log: Log = print, force: bool = False) -> dict[str, Any]:
    splits, meta, report = build_reference(source, out_dir, blank_id, force)
    for line in report.summary_lines():
        log(line)
    write_store(out_dir, splits, meta, force=force)
    counts = {name: len(arrays.inputs) for name, arrays in splits.items()}
    log(f"wrote {out_dir}: " + ", ".join(f"{name} {n} examples" for name, n in counts.items()))
    return {"out": str(out_dir), **counts, "skipped": 0}
