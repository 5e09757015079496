"""ARC as a task: its `trmkit data arc` arguments and TASK."""

from __future__ import annotations

import argparse
from typing import Any

from trmkit.tasks.arc.build import build
from trmkit.tasks.arc.data import DEFAULT_SOURCE, SUBSETS
from trmkit.tasks.arc.score import ArcScorer
from trmkit.tasks.base import Log, Task


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default=DEFAULT_SOURCE,
                   help="folder of arc-agi_<subset>_{challenges,solutions}.json (ARC Prize 'combined' layout)")
    p.add_argument("--subsets", default="training,concept",
                   help=f"comma list of subsets trained on, all pairs ({', '.join(SUBSETS)})")
    p.add_argument("--eval-subset", default="evaluation",
                   help="subset whose test inputs form the test split (its demonstrations are trained on)")
    p.add_argument("--aug", type=int, default=100,
                   help="augmented copies per task besides the original (paper: 1000)")
    p.add_argument("--limit", type=int, default=None, help="use the first N usable tasks of each subset")
    p.add_argument("--allow-overlap", action="store_true",
                   help="build even when trained subsets hold eval tasks (e.g. training2 with evaluation); "
                        "recorded in meta.json, its scores are not honest test scores")


def run_build(args: argparse.Namespace, log: Log = print) -> dict[str, Any]:
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()]
    return build(args.source, args.out, subsets=subsets, eval_subset=args.eval_subset, aug=args.aug,
                 limit=args.limit, test_fraction=args.test_fraction, seed=args.seed,
                 allow_overlap=args.allow_overlap, log=log)


TASK = Task(
    name="arc", shape="grid",
    summary="ARC-AGI few-shot grid puzzles (ARC Prize JSON files); --test-fraction is ignored except 1 "
            "(a test-only store)",
    add_arguments=add_arguments, build=run_build, scorer=ArcScorer,
    presets={"paper": "configs/arc-paper.yaml", "laptop": "configs/arc-laptop.yaml"},
)
