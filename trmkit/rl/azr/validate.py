"""Programs become tasks only after validation: every rejection has a reason, and reasons are counted.

A program (with the inputs it comes with) is valid when it parses, stays inside the AZR policy
(policy.py: no banned modules, no interpreter internals), defines f, every input is the
argument text of one call, and in the sandbox ``f(input)`` returns, for every input, a value
written as a Python literal of at most ``Limits.max_output_chars`` characters, the same in two
runs in one worker (the sandbox runs every job twice) and again in ``hash_checks`` fresh
workers, each with its own random string-hash seed: a program whose output follows the order
of a set of strings is refused as ``hash_order``, since no solver could predict it. The check
is by chance: an output that shows a 2-element set of strings in hash order differs between
two workers half the time, so 3 checks miss it once in 8 (the worker runs with ``-I``, which
ignores PYTHONHASHSEED, so the seed cannot be chosen). The outputs kept are
the sandbox's, not the ones a seed file records (those came from another Python).

Rejection keys, in the order a program meets them: ``syntax``, ``size``, ``banned_module``,
``module``, ``name``, ``attribute``, ``construct`` (the policy's), ``no_function``, ``input``,
then the sandbox's outcome kinds (``error``, ``timeout``, ``memory``, ``recursion``,
``output``, ``nondeterministic``, ``crash``, ``rejected``) and ``hash_order``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from trmkit.rl.azr.policy import AZR, UnsafeProgram, call_problem, check_program
from trmkit.rl.azr.seeds import CodeFSeed, IoSeed, program_source
from trmkit.rl.sandbox import Job, Limits, Outcome, Sandbox

# What one AZR job may use: AZR's programs are small; outputs go into prompts, so they stay short.
AZR_LIMITS = Limits(cpu_seconds=1.0, wall_seconds=5.0, memory_bytes=512 * 2**20, max_output_chars=2000)


@dataclass(frozen=True)
class Program:
    """A program to validate: its source (defining f), its inputs (argument texts), where from."""

    source: str
    inputs: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class Valid:
    """A program that passed, with the outputs the sandbox computed for its inputs."""

    source: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class Rejection:
    key: str
    reason: str
    where: str = ""


@dataclass
class Report:
    """What validation kept and refused; ``counts`` holds "valid" and every rejection key."""

    valid: list[Valid] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def add(self, item: Valid | Rejection) -> None:
        (self.valid if isinstance(item, Valid) else self.rejected).append(item)
        self.counts["valid" if isinstance(item, Valid) else item.key] += 1


def from_io_seed(seed: IoSeed) -> Program:
    return Program(program_source(seed.snippet, seed.imports), (seed.input,), seed.where)


def from_code_f_seed(seed: CodeFSeed) -> Program:
    return Program(program_source(seed.snippet, seed.imports), seed.inputs, seed.where)


def static_problem(program: Program) -> Rejection | None:
    """The rejection a program gets before anything runs, or None."""
    try:
        check_program(program.source, "f")
    except UnsafeProgram as e:
        return Rejection(e.key, str(e), program.where)
    if not program.inputs:
        return Rejection("input", "the program comes with no input", program.where)
    for text in program.inputs:
        problem = call_problem(text)
        if problem:
            return Rejection("input", problem, program.where)
    return None


class Validator:
    """Validates programs in one sandbox, then again in ``hash_checks`` fresh workers of a
    second one (a new hash seed each); close it after use."""

    def __init__(self, limits: Limits = AZR_LIMITS, hash_checks: int = 3):
        if hash_checks < 1:
            raise ValueError(f"hash_checks must be >= 1, got {hash_checks}")
        self.first = Sandbox(limits, policy=AZR)
        self.second = Sandbox(limits, policy=AZR)
        self.hash_checks = hash_checks

    def __enter__(self) -> "Validator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.first.close()
        self.second.close()

    def validate(self, programs: Iterable[Program], report: Report | None = None) -> Report:
        """Each program kept or refused with its reason, added to ``report`` (a new one if None)."""
        report = report if report is not None else Report()
        runnable = []
        for program in programs:
            problem = static_problem(program)
            if problem:
                report.add(problem)
            else:
                runnable.append(program)
        first = self._run(self.first, runnable)
        passed = [p for p, o in zip(runnable, first) if _failure(o) is None]
        again: dict[int, list[list[Outcome]]] = {id(p): [] for p in passed}
        for _ in range(self.hash_checks):
            self.second.close()  # the next job starts a fresh worker: a new hash seed
            for program, outcomes in zip(passed, self._run(self.second, passed)):
                again[id(program)].append(outcomes)
        for program, outcomes in zip(runnable, first):
            report.add(_judge(program, outcomes, again.get(id(program), [])))
        return report

    @staticmethod
    def _run(sandbox: Sandbox, programs: list[Program]) -> list[list[Outcome]]:
        jobs = [Job(p.source, "f", (text,)) for p in programs for text in p.inputs]
        outcomes = iter(sandbox.run(jobs))
        return [[next(outcomes) for _ in p.inputs] for p in programs]


def _failure(outcomes: list[Outcome]) -> Outcome | None:
    return next((o for o in outcomes if not o.ok), None)


def _judge(program: Program, first: list[Outcome], again: list[list[Outcome]]) -> Valid | Rejection:
    failed = _failure(first)
    if failed is not None:
        return Rejection(failed.kind, failed.reason, program.where)
    for other in again:
        rejection = _compare(program, first, other)
        if rejection:
            return rejection
    return Valid(program.source, program.inputs, tuple(o.value for o in first), program.where)


def _compare(program: Program, first: list[Outcome], other: list[Outcome]) -> Rejection | None:
    failed = _failure(other)
    if failed is not None:
        return Rejection(failed.kind, f"in another worker: {failed.reason}", program.where)
    for text, a, b in zip(program.inputs, first, other):
        if a.value != b.value:
            return Rejection("hash_order", f"f({text[:60]}) gave {a.value[:60]} in one worker and "
                             f"{b.value[:60]} in another: the output follows the hash seed "
                             "(the order of a set or of str hashes)", program.where)
    return None
