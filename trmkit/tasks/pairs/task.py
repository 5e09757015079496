"""Your own puzzle as a task: `trmkit data pairs --source FILE.jsonl` and TASK.

Metrics are the generic ones (cell and exact accuracy; blank-cell accuracy with --blank).
A trained run answers new inputs with `trmkit predict RUN inputs.jsonl` (trmkit/predict/).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trmkit.tasks.base import Log, Task
from trmkit.tasks.options import BuildOptions, option
from trmkit.tasks.pairs.augment import GRID_TRANSFORMS, STRING_TRANSFORMS
from trmkit.tasks.pairs.build import NAME, blank_token, build_pairs
from trmkit.tasks.pairs.checker import pairs_checker
from trmkit.tasks.pairs.codec import MAX_CELLS
from trmkit.tasks.pairs.reference import is_reference_dir, write_reference


@dataclass(frozen=True, kw_only=True)
class PairsOptions(BuildOptions):
    """`trmkit data pairs`: a JSONL file of input/output pairs (or a TRM reference folder) and its augmentation."""

    source: str = option(help='JSONL file, one {"input": ..., "output": ...} per line: equal-shape grids (lists of '
                              "lists of integers 0..255) or equal-length strings; or a folder built by the TRM "
                              "reference")
    format: str = option("auto", "auto: a folder holding <split>/dataset.json is a TRM reference dataset (its own "
                                 "train/test splits are kept), anything else JSONL",
                         choices=("auto", "jsonl", "trm-reference"))
    blank: str | None = option(None, "the input symbol of a cell to fill in (e.g. 0 for a Sudoku's blanks): "
                                     "blank_accuracy is then reported too", metavar="SYMBOL")
    aug: int = option(0, "augmented copies per training pair (default none: name the symmetries that keep your "
                         "answers right with --transforms and/or --permute)", metavar="N")
    transforms: str | None = option(None, "with --aug: transforms of input and output alike, for grids "
                                          f"{','.join(GRID_TRANSFORMS)}, for strings {','.join(STRING_TRANSFORMS)}; "
                                          "and shift: each copy also at a random place on a --canvas larger than "
                                          "the pair (a model that then meets larger puzzles has seen every cell "
                                          "filled)",
                                    metavar="LIST")
    permute: str | None = option(None, "with --aug: symbols that may be relabelled among themselves, e.g. "
                                       "1,2,3,4,5,6 for a Sudoku's digits (one random relabelling per copy, the "
                                       "same in input and output)", metavar="SYMBOLS")
    canvas: str | None = option(None, "the canvas every pair sits on, at least the data's largest: ROWSxCOLUMNS "
                                      "for grids (e.g. 6x6), LENGTH for strings; with --symbols a store of 4 x 4 "
                                      "puzzles shares the vocabulary and length of 6 x 6 ones (trmkit adapt)",
                                metavar="RxC")
    symbols: str | None = option(None, "extra vocabulary symbols beyond those in the file, comma-separated, A-B "
                                       "a range (e.g. 0-6; for strings a-z)", metavar="LIST")
    max_cells: int = option(MAX_CELLS, "longest pair kept (grid cells or characters); longer lines are reported "
                                       "and skipped")


def run_build(opts: PairsOptions, log: Log = print) -> dict[str, Any]:
    if source_format(opts.source, opts.format, log) == "trm-reference":
        if opts.aug or opts.transforms or opts.permute or opts.canvas or opts.symbols:
            raise ValueError("--aug, --transforms, --permute, --canvas and --symbols apply to JSONL pairs; a TRM "
                             "reference folder is imported as its builder augmented it")
        return write_reference(opts.source, opts.out, lambda layout: blank_token(layout, opts.blank), log,
                               force=opts.force)
    return build_pairs(opts.source, opts.out, test_fraction=opts.test_fraction, seed=opts.seed, blank=opts.blank,
                       max_cells=opts.max_cells, aug=opts.aug, transforms=opts.transforms, permute=opts.permute,
                       canvas=opts.canvas, symbols=opts.symbols, force=opts.force, log=log)


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
    options=PairsOptions, build=run_build,
    presets={"laptop": "configs/pairs-laptop.yaml"}, checker=pairs_checker,
)
