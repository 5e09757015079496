"""`trmkit eval --checker`: the share of a store's test problems whose one-shot answer the task's checker accepts.

Exact accuracy scores an answer against the store's label. A new source may have no labels, and a puzzle
with several solutions (a 6 x 6 Latin square with many blanks) has answers the label does not hold; the
checker (tasks/base.py `Checking`: a Sudoku's rules, a maze's route, your own `file.py:function` on a pairs
store) says whether each answer is right, reading no label. One problem per group of the test split (its
augmented copies left out), the problem itself, no noise, at K supervision steps or thinking until stable
(`--steps auto`): what `trmkit adapt` reports for its held-out part each round (adapt/solve.py `one_shot`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from trmkit.adapt.problems import first_of_groups
from trmkit.adapt.solve import Solver, one_shot
from trmkit.config import ConfigError
from trmkit.tasks.base import Checking
from trmkit.train import halting
from trmkit.train import select as select_mod
from trmkit.train.session import Session

Log = Callable[[str], None]


def checker_one_shot(s: Session, checking: Checking, k: int | None, auto_cap: int | None, limit: int | None,
                     log: Log) -> dict:
    """{"checker_one_shot": the share accepted, "checker_problems": how many, "checker": what checked them}:
    the test split's first `limit` problems (all: None), one-shot at K (None: the trained N_sup), or until
    stable (auto_cap not None)."""
    split = s.data.test
    if split is None:
        raise ConfigError(f"{s.cfg.data.path}: no test split to check")
    inputs, pids, _ = first_of_groups(split.inputs, split.puzzle_identifiers, split.puzzle_indices,
                                      split.group_indices)
    inputs, pids = inputs[:limit], pids[:limit]
    n_sup = s.model.cfg.halt_max_steps
    k = k or n_sup
    auto = halting.rule_for(auto_cap, n_sup)[0] if auto_cap is not None else None
    solver = Solver([select_mod.Trajectory(0, False)], k, None, auto, max(1, int(s.run.plan.eval_batch.value)))
    share = one_shot(s, solver, checking, inputs, pids, np.arange(len(inputs)))
    how = "until stable" if auto is not None else f"at K={k}"
    log(f"eval: --checker: {share:.3f} of the {len(inputs)} test problems' one-shot answers ({how}) accepted by "
        f"{checking.describe or 'the task'}; no label read")
    return {"checker_one_shot": share, "checker_problems": len(inputs), "checker": checking.describe}
