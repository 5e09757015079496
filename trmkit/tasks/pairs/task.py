"""Your own puzzle as a task: `trmkit data pairs --source FILE.jsonl` and TASK.

Metrics are the generic ones (cell and exact accuracy; blank-cell accuracy with --blank).
A trained run answers new inputs with `trmkit predict RUN inputs.jsonl` (trmkit/predict/).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trmkit.tasks.base import Log, Task
from trmkit.tasks.pairs.augment import GRID_TRANSFORMS, STRING_TRANSFORMS
from trmkit.tasks.pairs.build import NAME, blank_token, build_pairs
from trmkit.tasks.pairs.codec import MAX_CELLS
from trmkit.tasks.pairs.reference import is_reference_dir, write_reference


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True,
                   help='JSONL file, one {"input": ..., "output": ...} per line: equal-shape grids (lists of '
                        "lists of integers 0..255) or equal-length strings; or a folder built by the TRM reference")
    p.add_argument("--format", choices=("auto", "jsonl", "trm-reference"), default="auto",
                   help="auto: a folder holding <split>/dataset.json is a TRM reference dataset (its own train/test "
                        "splits are kept), anything else JSONL")
    p.add_argument("--blank", default=None, metavar="SYMBOL",
                   help="the input symbol of a cell to fill in (e.g. 0 for a Sudoku's blanks): "
                        "blank_accuracy is then reported too")
    p.add_argument("--aug", type=int, default=0, metavar="N",
                   help="augmented copies per training pair (default none: name the symmetries that keep your "
                        "answers right with --transforms and/or --permute)")
    p.add_argument("--transforms", default=None, metavar="LIST",
                   help="with --aug: transforms of input and output alike, for grids "
                        f"{','.join(GRID_TRANSFORMS)}, for strings {','.join(STRING_TRANSFORMS)}")
    p.add_argument("--permute", default=None, metavar="SYMBOLS",
                   help="with --aug: symbols that may be relabelled among themselves, e.g. 1,2,3,4,5,6 for a "
                        "Sudoku's digits (one random relabelling per copy, the same in input and output)")
    p.add_argument("--max-cells", type=int, default=MAX_CELLS,
                   help="longest pair kept (grid cells or characters); longer lines are reported and skipped")


def run_build(args: argparse.Namespace, log: Log = print) -> dict[str, Any]:
    if source_format(args.source, args.format, log) == "trm-reference":
        if args.aug or args.transforms or args.permute:
            raise ValueError("--aug, --transforms and --permute apply to JSONL pairs; a TRM reference folder is "
                             "imported as its builder augmented it")
        return write_reference(args.source, args.out, lambda layout: blank_token(layout, args.blank), log)
    return build_pairs(args.source, args.out, test_fraction=args.test_fraction, seed=args.seed, blank=args.blank,
                       max_cells=args.max_cells, aug=args.aug, transforms=args.transforms, permute=args.permute,
                       log=log)


def source_format(source: str, chosen: str, log: Log) -> str:
    """The --format to read `source` with; "auto" is decided here and said with its reason."""
    if chosen != "auto":
        return chosen
    if is_reference_dir(source):
        log(f"format: trm-reference ({source} is a folder with <split>/dataset.json; its splits are kept, "
            "--test-fraction and --seed do not apply)")
        return "trm-reference"
    if Path(source).is_dir():
        raise ValueError(f"{source} is a folder without <split>/dataset.json: give a JSONL file or a folder "
                         "built by the TRM reference implementation")
    return "jsonl"


TASK = Task(
    name=NAME, shape="grid",
    summary='your own puzzle: a JSONL file of {"input": ..., "output": ...} grids or strings',
    add_arguments=add_arguments, build=run_build,
    presets={"laptop": "configs/pairs-laptop.yaml"},
)
