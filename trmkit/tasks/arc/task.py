"""ARC as a task: its `trmkit data arc` options and TASK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trmkit.tasks.arc.build import build
from trmkit.tasks.arc.data import DEFAULT_SOURCE, SUBSETS
from trmkit.tasks.arc.score import ArcScorer
from trmkit.tasks.base import Log, Task
from trmkit.tasks.options import BuildOptions, option


@dataclass(frozen=True, kw_only=True)
class ArcOptions(BuildOptions):
    """`trmkit data arc`: the ARC Prize JSON files, the subsets trained on and the one tested."""

    source: str = option(DEFAULT_SOURCE, "folder of arc-agi_<subset>_{challenges,solutions}.json (ARC Prize "
                                         "'combined' layout)")
    subsets: str = option("training,concept", f"comma list of subsets trained on, all pairs ({', '.join(SUBSETS)})")
    eval_subset: str = option("evaluation", "subset whose test inputs form the test split (its demonstrations "
                                            "are trained on)")
    aug: int = option(100, "augmented copies per task besides the original (paper: 1000)")
    limit: int | None = option(None, "use the first N usable tasks of each subset")
    allow_overlap: bool = option(False, "build even when trained subsets hold eval tasks (e.g. training2 with "
                                        "evaluation); recorded in meta.json, its scores are not honest test scores")


def run_build(opts: ArcOptions, log: Log = print) -> dict[str, Any]:
    subsets = [s.strip() for s in opts.subsets.split(",") if s.strip()]
    return build(opts.source, opts.out, subsets=subsets, eval_subset=opts.eval_subset, aug=opts.aug,
                 limit=opts.limit, test_fraction=opts.test_fraction, seed=opts.seed,
                 allow_overlap=opts.allow_overlap, force=opts.force, log=log)


TASK = Task(
    name="arc", shape="grid",
    summary="ARC-AGI few-shot grid puzzles (ARC Prize JSON files); --test-fraction is ignored except 1 "
            "(a test-only store)",
    options=ArcOptions, build=run_build, scorer=ArcScorer,
    presets={"paper": "configs/arc-paper.yaml", "laptop": "configs/arc-laptop.yaml"},
)
