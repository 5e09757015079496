"""The held-out set of `trmkit rl eval`: built once from a fixed seed, stored, shortcuts tagged.

`build()` draws PER_TYPE tasks per type (programs of 1 to MAX_STATEMENTS statements, one random
stream per type, duplicates skipped, so the first n tasks of a type do not depend on how many are
drawn) and tags each one; `write()` stores them in heldout.json next to this file (committed), and
`for_config()` loads them when the run's rl.heldout_seed and rl.heldout_per_type match the stored
set, else builds the asked set in memory and says so. `trmkit rl heldout` rebuilds it and checks
the stored file.

Shortcut tasks (reported as their own slice, left out of the headline `solve_rate/nontrivial`):
- deduction "empty": the output is the empty list;
- deduction "constant": the program gives the same output on every input of the task's input
  length (checked on PROBES_PER_LENGTH fixed inputs of that length), so the answer needs the
  program and the input's length, not its items;
- deduction "copy": the output equals the input;
- abduction "copy": the output itself is a valid input (the program maps it to itself);
- induction "one-statement": a single statement maps all four pairs (the hidden one included).

Difficulty (`depth`, the number of statements a solver has to compose; breadth-first search over
the 62 statements up to BOUND, BOUND + 1 meaning "none within BOUND"):
- deduction: the shortest program that agrees with the task's program on the task's input and on
  the three fixed DEDUCTION_PROBES (the function it computes, not the statements it is written in);
- abduction: the fewest statements that turn the output into a valid input (0: the copy shortcut);
- induction: the shortest program that maps all four pairs (1: the one-statement shortcut).
Slices of the non-shortcut tasks: depth1, depth2, depth3+ (no program within BOUND statements).

The searches run the 62 fixed statement lines of programs.py in this process (`statement_functions`):
they are this package's own code, not the policy's. Whatever the policy writes runs in the sandbox.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trmkit.rl import programs as P

SEED = 47  # the stored set's seed
PER_TYPE = 1000  # tasks per type in the stored set
BOUND = 2  # depth of the difficulty searches
PROBES_PER_LENGTH = 32  # inputs per length of the "constant" check (the 10 one-digit lists among them)
DEDUCTION_PROBES = ((3, 1, 4, 1, 5, 9), (2, 7, 1, 8, 2), (0, 6, 9, 4))
SHORTCUTS = ("empty", "constant", "copy", "one-statement")
SLICES = ("depth1", "depth2", f"depth{BOUND + 1}+")
STORED = Path(__file__).with_name("heldout.json")
Log = Callable[[str], None]
State = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Tags:
    shortcut: str  # "" (none) or one of SHORTCUTS
    depth: int  # 0 .. BOUND + 1

    @property
    def slice(self) -> str:
        """"shortcut", or the difficulty slice of a non-shortcut task."""
        if self.shortcut:
            return "shortcut"
        return SLICES[min(max(self.depth, 1), BOUND + 1) - 1]


def statement_functions() -> list[Callable[[list[int]], list[int]]]:
    """The statements of programs.py as functions of this process, compiled from their own lines."""
    env = {"sorted": sorted, "sum": sum, "range": range, "len": len, "min": min, "max": max, "abs": abs}
    out = []
    for _, line in P.STATEMENTS:
        ns: dict = {}
        exec(compile(f"def f(x):\n    {line}\n    return x\n", "<statement>", "exec"), dict(env), ns)
        out.append(ns["f"])
    return out


class Searcher:
    """Runs programs in-process and measures a task's shortcut and depth (module docstring)."""

    def __init__(self) -> None:
        self.fns = statement_functions()
        self._probes: dict[int, list[tuple[int, ...]]] = {}

    def run(self, program, values) -> tuple[int, ...]:
        x = list(values)
        for s in program:
            x = self.fns[s](x)
        return tuple(x)

    def complete(self, task: P.CodeTask) -> P.CodeTask:
        return P.CodeTask(task.kind, task.program, task.inputs, tuple(self.run(task.program, i) for i in task.inputs))

    def probes(self, length: int) -> list[tuple[int, ...]]:
        """PROBES_PER_LENGTH fixed inputs of one length: the ten one-digit lists, then random ones."""
        if length not in self._probes:
            rng = random.Random(1000 + length)
            same = [(d,) * length for d in range(10)]
            self._probes[length] = same + [tuple(rng.randrange(10) for _ in range(length))
                                           for _ in range(PROBES_PER_LENGTH - len(same))]
        return self._probes[length]

    def shortcut(self, task: P.CodeTask) -> str:
        out = task.outputs[0]
        if task.kind == "deduction":
            if not out:
                return "empty"
            if all(self.run(task.program, x) == out for x in self.probes(len(task.inputs[0]))):
                return "constant"
            return "copy" if out == task.inputs[0] else ""
        if task.kind == "abduction":
            return "copy" if self.run(task.program, out) == out else ""
        fits = any(all(tuple(f(list(i))) == o for i, o in zip(task.inputs, task.outputs)) for f in self.fns)
        return "one-statement" if fits else ""

    def depth(self, task: P.CodeTask) -> int:
        if task.kind == "abduction":
            return self.inverse_depth(task.program, task.outputs[0])
        starts, goals = task.inputs, task.outputs
        if task.kind == "deduction":
            starts = starts + DEDUCTION_PROBES
            goals = goals + tuple(self.run(task.program, x) for x in DEDUCTION_PROBES)
        return self.shortest(starts, goals)

    def shortest(self, starts: State, goals: State) -> int:
        """The fewest statements that map every start to its goal (BOUND + 1: none within BOUND)."""
        if starts == goals:
            return 0
        program = self.shortest_program(starts, goals, BOUND)
        return BOUND + 1 if program is None else len(program)

    def shortest_program(self, starts: State, goals: State, bound: int) -> tuple[int, ...] | None:
        """The first program of 1..bound statements, breadth first with statements in order (so the
        shortest, then the lexicographically smallest), that maps every start to its goal; None if none."""
        frontier, seen = [((), starts)], {starts}
        for _ in range(bound):
            nxt = []
            for prog, state in frontier:
                for s, f in enumerate(self.fns):
                    after = tuple(tuple(f(list(x))) for x in state)
                    if after == goals:
                        return prog + (s,)
                    if after not in seen:
                        seen.add(after)
                        nxt.append((prog + (s,), after))
            frontier = nxt
        return None

    def inverse_depth(self, program, out: tuple[int, ...]) -> int:
        """The fewest statements that turn `out` into an input the program maps to `out`."""
        frontier, seen = {out}, {out}
        if self.run(program, out) == out:
            return 0
        for d in range(1, BOUND + 1):
            nxt = set()
            for x in frontier:
                for f in self.fns:
                    s = tuple(f(list(x)))
                    if s in seen:
                        continue
                    if self.run(program, s) == out:
                        return d
                    seen.add(s)
                    nxt.add(s)
            frontier = nxt
        return BOUND + 1

    def tags(self, task: P.CodeTask) -> Tags:
        return Tags(self.shortcut(task), self.depth(task))


# ---- the set: build, store, load --------------------------------------------------------------

def build(seed: int = SEED, per_type: int = PER_TYPE) -> list[tuple[P.CodeTask, Tags]]:
    """per_type tasks per type, in P.TYPES order, each completed and tagged; a fixed seed gives the
    same list, and the first n tasks of a type are those of any larger build."""
    searcher, out = Searcher(), []
    for kind in P.TYPES:
        rng, keys = random.Random(f"{seed}/{kind}"), set()
        while len(keys) < per_type:
            task = P.random_task(rng, kind, 1, P.MAX_STATEMENTS)
            if task.key() in keys:
                continue
            keys.add(task.key())
            task = searcher.complete(task)
            out.append((task, searcher.tags(task)))
    return out


def dumps(items: list[tuple[P.CodeTask, Tags]], seed: int) -> str:
    """JSON, one task a line: [kind, program, inputs, outputs, shortcut, depth]."""
    per_type = sum(1 for t, _ in items if t.kind == P.TYPES[0])
    head = {"seed": seed, "per_type": per_type, "bound": BOUND, "probes_per_length": PROBES_PER_LENGTH}
    rows = [json.dumps([t.kind, list(t.program), [list(i) for i in t.inputs], [list(o) for o in t.outputs],
                        g.shortcut, g.depth], separators=(",", ":")) for t, g in items]
    return json.dumps(head)[:-1] + ', "tasks": [\n' + ",\n".join(rows) + "\n]}\n"


def loads(text: str) -> tuple[dict, list[tuple[P.CodeTask, Tags]]]:
    data = json.loads(text)
    items = [(P.CodeTask(k, tuple(prog), tuple(map(tuple, ins)), tuple(map(tuple, outs))), Tags(cut, depth))
             for k, prog, ins, outs, cut, depth in data.pop("tasks")]
    return data, items


def write(path: Path = STORED, seed: int = SEED, per_type: int = PER_TYPE) -> Path:
    from trmkit.files import write_text

    return write_text(path, dumps(build(seed, per_type), seed))


def first(items: list[tuple[P.CodeTask, Tags]], per_type: int) -> list[tuple[P.CodeTask, Tags]]:
    """The first per_type tasks of each type."""
    return [it for kind in P.TYPES for it in [x for x in items if x[0].kind == kind][:per_type]]


def for_config(seed: int, per_type: int, log: Log = print, path: Path = STORED) -> list[tuple[P.CodeTask, Tags]]:
    """The stored set (its first per_type tasks per type) when it holds what is asked, else a set built
    in memory the same way (said, with the reason)."""
    if path.is_file():
        head, items = loads(path.read_text())
        if head["seed"] == seed and head["per_type"] >= per_type and head["bound"] == BOUND:
            return first(items, per_type)
        why = f"it holds seed {head['seed']}, {head['per_type']} per type"
    else:
        why = "it is missing"
    log(f"rl: held-out set built in memory (seed {seed}, {per_type} per type), not read from {path.name}: {why}")
    return build(seed, per_type)


def shares(items: list[tuple[P.CodeTask, Tags]]) -> dict[str, float]:
    """The share of each shortcut and difficulty slice, per type."""
    out: dict[str, float] = {}
    for kind in P.TYPES:
        tags = [g for t, g in items if t.kind == kind]
        for cut in SHORTCUTS:
            if any(g.shortcut == cut for g in tags):
                out[f"{kind}/shortcut/{cut}"] = sum(g.shortcut == cut for g in tags) / len(tags)
        for name in ("shortcut",) + SLICES:
            out[f"{kind}/{name}"] = sum(g.slice == name for g in tags) / len(tags)
    return out


# ---- evaluation figures --------------------------------------------------------------------------

def groups(items: list[tuple[P.CodeTask, Tags]]) -> dict[str, list[int]]:
    """Name -> indices of the tasks in it: "" (all), "nontrivial", "shortcut", each slice, each type,
    each type's nontrivial, shortcut and slices ("deduction/depth2"), and the nontrivial tasks of the
    two types with many right answers together ("abduction+induction/nontrivial": where self-play should
    beat SFT on one of several right answers, if anywhere)."""
    out: dict[str, list[int]] = {"": list(range(len(items)))}
    for scope in ("",) + P.TYPES:
        mine = [i for i, (t, _) in enumerate(items) if scope in ("", t.kind)]
        prefix = f"{scope}/" if scope else ""
        if scope:
            out[scope] = mine
        out[f"{prefix}nontrivial"] = [i for i in mine if not items[i][1].shortcut]
        for name in ("shortcut",) + SLICES:
            out[f"{prefix}{name}"] = [i for i in mine if items[i][1].slice == name]
    out["abduction+induction/nontrivial"] = sorted(out["abduction/nontrivial"] + out["induction/nontrivial"])
    return out


def summarize(right: list[bool], items: list[tuple[P.CodeTask, Tags]]) -> dict[str, float]:
    """solve_rate (all tasks), solve_rate/nontrivial (the headline) and every group of `groups`, each
    with its standard error (".../se") and its number of tasks ("samples/..."); empty groups are left out."""
    from trmkit.rl.stats import rate_se

    out: dict[str, float] = {}
    for name, idx in groups(items).items():
        if not idx:
            continue
        sel = [right[i] for i in idx]
        key = f"solve_rate/{name}" if name else "solve_rate"
        out[key] = sum(sel) / len(sel)
        out[f"{key}/se"] = rate_se(sel)
        out[f"samples/{name}" if name else "samples"] = len(sel)
    return out
