"""The Sudoku checker `trmkit adapt` keeps answers by (tasks/base.py Checking): a full grid that breaks no
row, column or box rule and keeps every given. It is the rule the test-time vote counts ballots by
(variants.keeps_rules: the puzzle and the answer alone, never the label), so there is one copy of it."""

from __future__ import annotations

from trmkit.config import ConfigError
from trmkit.data.store import StoreMeta
from trmkit.tasks.base import Checking, refuse_spec
from trmkit.tasks.sudoku.solver import SIZE
from trmkit.tasks.sudoku.variants import keeps_rules

RULES = "Sudoku rules: a full grid, every row, column and box a permutation of 1..9, givens kept"


def sudoku_checker(meta: StoreMeta, spec: str | None) -> Checking:
    """The Sudoku rules for a store of 81-cell puzzles; a --checker spec is refused (the rules are built in)."""
    refuse_spec("sudoku", spec, RULES)
    if meta.seq_len != SIZE:
        raise ConfigError(f"the sudoku checker reads 9 x 9 grids of {SIZE} cells; this store's rows hold "
                          f"{meta.seq_len}: give a store built by `trmkit data sudoku`")
    return Checking(check=keeps_rules, describe=RULES)  # a valid answer is the label's own tokens (digit + 1)
