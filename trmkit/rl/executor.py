"""Executing code tasks: every program runs in the sandbox (rl/sandbox.py), results cached.

The cache is a byte-bounded LRU keyed by (source, input): the same program on the same
input is run once while it stays in the cache, and the hit rate is logged. Only outcomes
that depend on the code alone are cached (a crashed or killed worker is not).
"""

from __future__ import annotations

from dataclasses import dataclass

from trmkit.rl import programs as P
from trmkit.rl.cache import ByteLRU
from trmkit.rl.sandbox import Job, Limits, Sandbox

Values = tuple[int, ...]


@dataclass(frozen=True)
class Result:
    ok: bool
    value: object = None  # a list as a tuple; a trace as a tuple of tuples
    reason: str = ""


def _as_list(value) -> Values | None:
    if isinstance(value, (list, tuple)) and len(value) <= P.MAX_ITEMS and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 9 for v in value):
        return tuple(value)
    return None


class Executor:
    """Runs programs on inputs through one sandbox, with a cache and counters."""

    def __init__(self, limits: Limits | None = None, cache_bytes: int = 64 * 2**20):
        self.sandbox = Sandbox(limits or Limits())
        self.cache = ByteLRU(cache_bytes)

    def close(self) -> None:
        self.sandbox.close()

    def run(self, calls: list[tuple[str, Values]]) -> list[Result]:
        """One Result per (source, input), in order; a program's result must be a list of digits
        (a traced program's, a list of such lists)."""
        keys = [(src, tuple(inp)) for src, inp in calls]
        found: dict = {}
        missing = []
        for key in dict.fromkeys(keys):  # each distinct call once
            hit = self.cache.get(key)
            if hit is None:
                missing.append(key)
            else:
                found[key] = hit
        outcomes = self.sandbox.run([Job(src, "f", (list(inp),)) for src, inp in missing]) if missing else []
        for key, out in zip(missing, outcomes):
            found[key] = self._result(out)
            if out.kind != "crash":  # a killed worker says nothing about the code
                self.cache.put(key, found[key])
        return [found[k] for k in keys]

    @staticmethod
    def _result(out) -> Result:
        if not out.ok:
            return Result(False, None, f"{out.kind}: {out.reason}")
        value = out.value
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            lists = [_as_list(v) for v in value]  # a trace
            if all(v is not None for v in lists):
                return Result(True, tuple(lists))
        as_list = _as_list(value)
        if as_list is not None:
            return Result(True, as_list)
        return Result(False, None, f"result {str(value)[:60]} is not a list of at most {P.MAX_ITEMS} digits")

    # ---- tasks ---------------------------------------------------------------------------------

    def complete(self, tasks: list[P.CodeTask]) -> list[P.CodeTask | str]:
        """Each task with its outputs filled by execution, or the reason it is not a valid task."""
        calls = [(P.source(t.program), i) for t in tasks for i in t.inputs]
        results = iter(self.run(calls))
        out: list[P.CodeTask | str] = []
        for t in tasks:
            rs = [next(results) for _ in t.inputs]
            bad = next((r.reason for r in rs if not r.ok), None)
            out.append(bad if bad else P.CodeTask(t.kind, t.program, t.inputs, tuple(r.value for r in rs)))
        return out

    def traces(self, pairs: list[tuple[tuple[int, ...], Values]]) -> list[tuple[Values, ...] | None]:
        """The list after every statement of each (program, input), by executing a traced program."""
        results = self.run([(P.source(prog, traced=True), inp) for prog, inp in pairs])
        return [r.value if r.ok else None for r in results]

    def check(self, items: list[tuple[P.CodeTask, tuple[int, ...]]]) -> list[bool]:
        """Is each answer right, by execution: deduction compares the output; abduction runs the program
        on the proposed input; induction runs the proposed program on every pair, the hidden one too."""
        calls, spans = [], []
        for task, answer in items:
            start = len(calls)
            if task.kind == "abduction":
                calls.append((P.source(task.program), answer))
            elif task.kind == "induction":
                calls += [(P.source(answer), i) for i in task.inputs]
            spans.append((start, len(calls)))
        results = self.run(calls)
        verdicts = []
        for (task, answer), (a, b) in zip(items, spans):
            if task.kind == "deduction":
                verdicts.append(tuple(answer) == task.outputs[0])
            else:
                want = task.outputs if task.kind == "induction" else task.outputs[:1]
                verdicts.append(all(r.ok and r.value == w for r, w in zip(results[a:b], want)))
        return verdicts
