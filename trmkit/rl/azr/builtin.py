"""The built-in generated programs of rl/programs.py as AZR tasks written in Python text.

A program of the list language renders as ``def f(x): ...`` (``programs.source``); inputs and
outputs are Python list literals (``[3, 1, 4]``). Deduction and abduction tasks have one pair;
induction tasks show ``programs.SHOWN_PAIRS`` pairs, hold one back, and say in their message how
many list operations f applies (the TRM's ``<desc>``). Outputs are computed in this process by
running the 62 fixed statement lines of programs.py (rl/heldout.py's ``Searcher``): they are this
package's own code. What a model writes always runs in the sandbox.

Training tasks are drawn with 1 to ``programs.MAX_STATEMENTS`` statements, as the held-out set is
(rl/heldout.py), and never equal a held-out task (same program and inputs).
"""

from __future__ import annotations

import random
from typing import Callable

from trmkit.rl import heldout
from trmkit.rl import programs as P
from trmkit.rl.azr.tasks import AzrTask

SOURCE = "builtin"  # the source's name in metrics (solve_rate/builtin/deduction)
MAX_DRAWS = 1000  # draws for one task that is not held out before giving up (never reached in practice)


def literal(values) -> str:
    """A list of digits as the Python literal a program returns: ``[3, 1]``."""
    return repr([int(v) for v in values])


def message(task: P.CodeTask) -> str:
    n = len(task.program)
    return (f"f takes a list of digits (0-9) and returns a list of digits; it applies {n} list "
            f"operation{'s' if n > 1 else ''} in turn")


def as_azr(task: P.CodeTask) -> AzrTask:
    """A completed list-language task (its outputs filled) as an AzrTask."""
    if len(task.outputs) != len(task.inputs):
        raise ValueError("as_azr needs a completed task (outputs filled by running it)")
    program = P.source(task.program).rstrip("\n")
    inputs, outputs = tuple(map(literal, task.inputs)), tuple(map(literal, task.outputs))
    if task.kind == "induction":
        return AzrTask("induction", program, inputs, outputs, message(task), shown=P.SHOWN_PAIRS)
    return AzrTask(task.kind, program, inputs, outputs)


class Builtin:
    """The generator of built-in tasks and the generated held-out set (rl.heldout_seed,
    rl.heldout_per_type), whose tasks it never draws."""

    def __init__(self, heldout_seed: int, heldout_per_type: int, log: Callable[[str], None] = print):
        self.items = heldout.for_config(heldout_seed, heldout_per_type, log)
        self.keys = {t.key() for t, _ in self.items}
        self.searcher = heldout.Searcher()

    def draw(self, rng: random.Random, kind: str) -> AzrTask:
        """A fresh task of ``kind`` from ``rng``, never a held-out one."""
        for _ in range(MAX_DRAWS):
            task = P.random_task(rng, kind, 1, P.MAX_STATEMENTS)
            if task.key() not in self.keys:
                return as_azr(self.searcher.complete(task))
        raise RuntimeError(f"no {kind} task outside the held-out set in {MAX_DRAWS} draws")

    def heldout(self, per_type: int | None = None) -> list[tuple[AzrTask, heldout.Tags]]:
        """The held-out tasks (the first ``per_type`` of each kind, all if None) with their tags."""
        items = self.items if per_type is None else heldout.first(self.items, per_type)
        return [(as_azr(t), tags) for t, tags in items]
