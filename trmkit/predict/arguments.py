"""The options of `trmkit predict`; this module imports nothing (every command builds the CLI's parser,
and importing torch, 1.5-3 s, before `email predict` starts its parsing workers would delay them)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `trmkit train` on a sudoku, maze or pairs store")
    p.add_argument("inputs", help="Sudoku: 81-character lines ('0' or '.' blank) or 9 x 9 JSON grids; maze: text "
                                  "mazes ('#', ' ' or '.', 'S', 'G'), an empty line after each; pairs: JSONL, one "
                                  '{"input": ...} per line (an "output" key is scored)')
    p.add_argument("--out", default=None, help="write the answers here (atomically) instead of stdout")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file that is not answers written by `trmkit predict`")
    p.add_argument("--steps", default=None,
                   help="supervision steps: K, or auto[:CAP] (each input until its answer is stable); default: "
                        "auto for mazes (a larger maze needs more steps than trained with), the trained N_sup else")
    p.add_argument("--data", default=None, help="the run's training store (default: the run's data.path)")
    p.add_argument("--verbose", action="store_true", help="also print the plan's choices (threads, dtype, batch)")
