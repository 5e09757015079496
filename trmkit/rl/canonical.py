"""Canonical SFT labels for the tasks with many right answers (rl.sft_label: canonical).

The checker accepts any abduction input the program maps to the output, and any induction program
that maps all four pairs; the generator's own input or program is one of many. A TRM writes every
position at once, so cross-entropy on one arbitrary right answer out of several teaches flat
per-position distributions. A canonical label is one fixed answer per task, chosen by a rule the
policy can learn:

- abduction: the output itself when it is a valid input (the program maps it to itself); else the
  smallest valid input, "smallest" meaning shortest, then lexicographically smallest digit tuple.
  Found exactly by walking the program backwards: the set of lists of at most n items each
  statement maps into the current set (`preimages`), for n = len(output), len(output) + 1, ...
  (no statement grows a list, so no input is shorter than the output); the first n with a non-empty
  set gives the answer. A set larger than SET_LIMIT, or a walk that tries more than WORK_LIMIT
  candidate lists, stops the search: the label is then the generator's input (valid, not proven
  smallest) and the fallback is counted.
- induction: the shortest program that maps all four pairs (the hidden one too, as the checker
  does), ties broken by the lexicographically smallest statement indices; programs of up to
  min(DEPTH, len(generator program)) statements are tried in that order (breadth-first, a
  prefix that gives the same lists as an earlier one is skipped: the earlier one covers it), else
  the generator's program. With seeding's programs of at most 3 statements and DEPTH = 2 the
  result is always a shortest program.
- deduction has one right answer: unchanged.

The statements run in this process (heldout.statement_functions, this package's own code); a label
is an answer the checker accepts (tests/rl/test_canonical.py runs it through the sandbox).
"""

from __future__ import annotations

from itertools import permutations, product
from math import factorial, prod

from trmkit.rl import programs as P
from trmkit.rl.heldout import Searcher

SET_LIMIT = 20_000  # abduction: the largest set of candidate lists the backward walk keeps
WORK_LIMIT = 50_000  # abduction: the most candidate lists one backward walk may try
DEPTH = 2  # induction: the longest program the search tries (3,906 programs at most)
CACHE_TASKS = 50_000  # labels kept (oldest dropped first): a pool's all, fresh tasks' most recent
Values = tuple[int, ...]
NAMES = [name for name, _ in P.STATEMENTS]


class TooMany(Exception):
    """The backward walk passed SET_LIMIT (one set) or WORK_LIMIT (lists tried)."""


class Labeler(Searcher):
    """Canonical answers (module docstring), cached per task: a pool's labels are computed once."""

    def __init__(self) -> None:
        super().__init__()
        self.digit = [[tuple(f([u]))[0] if f([u]) else None for u in range(10)] for f in self.fns]
        self.cache: dict[str, Values] = {}
        self.fallbacks = 0  # abduction labels left at the generator's input (a limit reached)
        self.work = 0  # candidate lists tried by the current backward walk

    def answer(self, task: P.CodeTask):
        """The canonical answer: the output (deduction), an input (abduction), a program (induction)."""
        if task.kind == "deduction":
            return task.outputs[0]
        key = task.key()
        if key not in self.cache:
            if len(self.cache) >= CACHE_TASKS:
                del self.cache[next(iter(self.cache))]
            self.cache[key] = self.abduction(task) if task.kind == "abduction" else self.induction(task)
        return self.cache[key]

    # ---- abduction --------------------------------------------------------------------------------

    def abduction(self, task: P.CodeTask) -> Values:
        out = task.outputs[0]
        if self.run(task.program, out) == out:
            return out
        for n in range(len(out), P.MAX_ITEMS + 1):
            try:
                found = self.inputs_giving(task.program, out, n)
            except TooMany:
                self.fallbacks += 1
                return task.inputs[0]
            if found:
                return min(found, key=lambda x: (len(x), x))
        return task.inputs[0]  # not reached: the generator's input is valid and has at most MAX_ITEMS items

    def inputs_giving(self, program, out: Values, n: int) -> set[Values]:
        """Every list of at most n items the program maps to `out` (TooMany past SET_LIMIT or WORK_LIMIT)."""
        current, self.work = {out}, 0
        for s in reversed(program):
            nxt: set[Values] = set()
            for y in current:
                nxt |= self.preimages(s, y, n)
                if len(nxt) > SET_LIMIT:
                    raise TooMany
            current = nxt
            if not current:
                break
        return current

    def preimages(self, s: int, y: Values, n: int) -> set[Values]:
        """Every list x of at most n items with statement s mapping x to y (each one checked forward)."""
        name, f = NAMES[s], self.fns[s]
        if name.startswith(("add", "mul", "min", "max", "dist")):  # item by item
            choices = [[u for u in range(10) if self.digit[s][u] == v] for v in y]
            self._spend(prod(len(c) for c in choices))
            cands = list(product(*choices))
        elif name in ("reverse", "rotl", "rotr"):  # one preimage each
            cands = [{"reverse": y[::-1], "rotl": y[-1:] + y[:-1], "rotr": y[1:] + y[:1]}[name]]
        elif name in ("sort", "sortd"):  # a permutation of y
            self._spend(factorial(len(y)))
            cands = list(set(permutations(y)))
        elif name == "cumsum":  # one preimage: the differences
            cands = [tuple((b - a) % 10 for a, b in zip((0,) + y[:-1], y))]
        elif name.startswith("take"):
            k = max(0, n - len(y)) if len(y) == int(name[4:]) else 0
            self._spend(sum(10**j for j in range(k + 1)))
            cands = [y + t for j in range(k + 1) for t in product(range(10), repeat=j)]
        else:  # gt c: y with items <= c inserted anywhere
            cands = list(self._with_small_items(y, int(name[2:]), n))
            self._spend(len(cands))
        return {tuple(x) for x in cands if len(x) <= n and tuple(f(list(x))) == y}

    def _spend(self, candidates: int) -> None:
        self.work += candidates
        if self.work > WORK_LIMIT:
            raise TooMany

    @staticmethod
    def _with_small_items(y: Values, c: int, n: int) -> set[Values]:
        out = {y}
        for _ in range(n - len(y)):
            out |= {x[:i] + (v,) + x[i:] for x in out for i in range(len(x) + 1) for v in range(c + 1)}
            if len(out) > SET_LIMIT:
                raise TooMany
        return out

    # ---- induction --------------------------------------------------------------------------------

    def induction(self, task: P.CodeTask) -> tuple[int, ...]:
        bound = min(DEPTH, len(task.program))
        return self.shortest_program(tuple(task.inputs), task.outputs, bound) or task.program
