"""The three AZR task types as text prompts, the answers read from a model's text, and scores by
execution in the sandbox (Zhao et al., 2025, "Absolute Zero").

- deduction: given f and an input, predict ``f(input)``; the answer is a Python literal, read with
  ``ast.literal_eval`` and compared with the output the sandbox computed (strict equality:
  ``1``, ``1.0`` and ``True`` differ, as do a list and a tuple);
- abduction: given f and an output, give an input that yields it; the answer is the call's
  argument text (``[3, 1], 2``), run as ``f(ANSWER)`` in the sandbox and compared the same way;
- induction: given some input/output pairs and a message, write f; the written program runs in
  the sandbox on the held-back inputs. Departure: the score is the fraction of held-back pairs
  it gets right (1 only when all are), a graded reward rather than all-or-nothing.

Answers are read from ``<answer>...</answer>`` tags or a fenced code block (```` ```python ````,
```` ```py ```` or bare ```` ``` ````); the one that ends last in the text wins, and a fenced
block inside the tags is unwrapped. Text with neither, or whose answer does not parse as its
kind needs, is ``Unparsable``: scored 0 and counted (``AzrScorer.counts["unparsable"]``). An
answer that parses but breaks the sandbox's policy or fails when run also scores 0, with the
sandbox's outcome kind and reason.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from trmkit.rl.sandbox import Job, Sandbox

KINDS = ("deduction", "abduction", "induction")
MAX_ANSWER_CHARS = 20_000
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_INNER_FENCE = re.compile(r"^\s*```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```\s*$", re.DOTALL | re.IGNORECASE)
FORMATS = {
    "deduction": "the output as a Python literal inside <answer></answer> tags, e.g. <answer>[1, 2]</answer>",
    "abduction": ("the arguments of the call f(...) inside <answer></answer> tags, e.g. "
                  "<answer>'abc', 3</answer> for f('abc', 3)"),
    "induction": "the whole program (its imports and def f) in a ```python block",
}


@dataclass(frozen=True)
class AzrTask:
    """One task. ``inputs`` are argument texts; ``outputs`` are the literal texts the sandbox
    computed for them. Deduction and abduction have one pair; induction shows the first
    ``shown`` pairs and holds the rest back for scoring."""

    kind: str
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""
    shown: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ValueError("inputs and outputs must be non-empty and pair up")
        if self.kind == "induction" and not 0 < self.shown < len(self.inputs):
            raise ValueError(f"an induction task shows 1..{len(self.inputs) - 1} of its "
                             f"{len(self.inputs)} pairs and holds the rest back, got shown={self.shown}")

    @property
    def held_back(self) -> tuple[tuple[str, str], ...]:
        return tuple(zip(self.inputs, self.outputs))[self.shown:]


def induction_task(program: str, inputs, outputs, message: str) -> AzrTask:
    """An induction task showing half the pairs (at least one) and holding back the rest."""
    return AzrTask("induction", program, tuple(inputs), tuple(outputs), message,
                   shown=max(1, len(inputs) // 2))


def tasks_from(program: str, inputs, outputs, message: str = "") -> list[AzrTask]:
    """The tasks one validated program gives: a deduction and an abduction for its first pair,
    and an induction when it has two pairs or more and a message (AZR's code_f seeds)."""
    pair = (tuple(inputs[:1]), tuple(outputs[:1]))
    tasks = [AzrTask("deduction", program, *pair), AzrTask("abduction", program, *pair)]
    if len(inputs) >= 2 and message:
        tasks.append(induction_task(program, inputs, outputs, message))
    return tasks


# --------------------------------------------------------------------------- prompts


def _block(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def prompt(task: AzrTask) -> str:
    """The task as text for a language model, ending with its answer format."""
    if task.kind == "deduction":
        body = (f"Predict the output of the function f below for the given input.\n\n{_block(task.program)}"
                f"\n\nInput: f({task.inputs[0]})")
    elif task.kind == "abduction":
        body = (f"Find an input for which the function f below returns the given output.\n\n"
                f"{_block(task.program)}\n\nOutput: {task.outputs[0]}")
    else:
        pairs = "\n".join(f"f({i}) == {o}" for i, o in zip(task.inputs[:task.shown], task.outputs))
        body = (f"Write a Python function f that gives these outputs for these inputs.\n\n{pairs}"
                + (f"\n\nMessage: {task.message}" if task.message else "")
                + "\n\nIt will be checked on other inputs too.")
    return (f"{body}\n\nThink step by step, then give {FORMATS[task.kind]}. "
            "If your text holds several answers, the last one counts.")


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Answer:
    """An answer read from a model's text: ``text`` as written, ``value`` for deduction."""

    kind: str
    text: str
    value: Any = None


@dataclass(frozen=True)
class Unparsable:
    """Text from which no answer of the kind could be read; scored 0 and counted."""

    kind: str
    reason: str


def last_answer_text(text: str) -> str | None:
    """The content of the last ``<answer>`` tags or fenced block (by where it ends), or None."""
    found = [(m.end(), m.group(1)) for m in _TAG.finditer(text)]
    found += [(m.end(), m.group(1)) for m in _FENCE.finditer(text)]
    if not found:
        return None
    content = max(found, key=lambda f: f[0])[1]
    inner = _INNER_FENCE.match(content)
    return (inner.group(1) if inner else content).strip()


def parse_answer(text: str, kind: str) -> Answer | Unparsable:
    """The answer of ``kind`` in a model's text, e.g. ``parse_answer("so <answer>[1, 2]</answer>",
    "deduction") == Answer("deduction", "[1, 2]", [1, 2])``; anything else is Unparsable."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(text, str):
        return Unparsable(kind, f"the answer is not text ({type(text).__name__})")
    content = last_answer_text(text)
    if content is None:
        return Unparsable(kind, "no <answer>...</answer> tags and no ```python block")
    if not content:
        return Unparsable(kind, "the answer is empty")
    if len(content) > MAX_ANSWER_CHARS:
        return Unparsable(kind, f"the answer is {len(content)} chars, more than {MAX_ANSWER_CHARS}")
    return {"deduction": _literal_answer, "abduction": _input_answer, "induction": _program_answer}[kind](content)


def _literal_answer(content: str) -> Answer | Unparsable:
    try:
        return Answer("deduction", content, ast.literal_eval(content))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        return Unparsable("deduction", f"not a Python literal: {type(e).__name__}")


def _input_answer(content: str) -> Answer | Unparsable:
    try:
        call = ast.parse(f"f({content})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return Unparsable("abduction", f"not the arguments of a call: {type(e).__name__}")
    if not isinstance(call, ast.Call):
        return Unparsable("abduction", "not the arguments of one call f(...)")
    return Answer("abduction", content)


def _program_answer(content: str) -> Answer | Unparsable:
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return Unparsable("induction", f"not Python: {type(e).__name__}")
    if not any(isinstance(s, ast.FunctionDef) and s.name == "f" for s in tree.body):
        return Unparsable("induction", "the program defines no top-level function f")
    return Answer("induction", content)


# --------------------------------------------------------------------------- scores


@dataclass(frozen=True)
class Verdict:
    """The score of one answer: ``status`` is "right", "wrong", "unparsable" or the sandbox's
    outcome kind ("rejected", "timeout", "error", ...) with its reason."""

    score: float
    status: str
    reason: str = ""


def read_literal(text: str) -> tuple[bool, Any]:
    """(True, value) for a literal's text, else (False, None)."""
    try:
        return True, ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def same_value(a: Any, b: Any) -> bool:
    """Equality with the types too: 1, 1.0 and True differ, a list is not a tuple."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def _matches(outcome, want: str) -> bool:
    ok, got = read_literal(outcome.value) if outcome.ok else (False, None)
    return ok and same_value(got, read_literal(want)[1])


class AzrScorer:
    """Scores answers by execution in one sandbox (which must use the AZR policy); counts every
    status in ``counts``."""

    def __init__(self, sandbox: Sandbox):
        if sandbox.policy.name != "azr":
            raise ValueError("AzrScorer needs Sandbox(policy=trmkit.rl.azr.policy.AZR)")
        self.sandbox = sandbox
        self.counts: Counter = Counter()

    def score(self, items: list[tuple[AzrTask, str]]) -> list[Verdict]:
        """One Verdict per (task, model text), in order; all the jobs go to the sandbox at once."""
        answers = [parse_answer(text, task.kind) for task, text in items]
        jobs, spans = [], []
        for (task, _), answer in zip(items, answers):
            start = len(jobs)
            if isinstance(answer, Answer) and task.kind == "abduction":
                jobs.append(Job(task.program, "f", (answer.text,)))
            elif isinstance(answer, Answer) and task.kind == "induction":
                jobs += [Job(answer.text, "f", (i,)) for i, _ in task.held_back]
            spans.append((start, len(jobs)))
        outcomes = self.sandbox.run(jobs) if jobs else []
        verdicts = [self._verdict(task, answer, outcomes[a:b])
                    for (task, _), answer, (a, b) in zip(items, answers, spans)]
        self.counts.update(v.status for v in verdicts)
        return verdicts

    @staticmethod
    def _verdict(task: AzrTask, answer, outcomes: list) -> Verdict:
        if isinstance(answer, Unparsable):
            return Verdict(0.0, "unparsable", answer.reason)
        if task.kind == "deduction":
            right = same_value(answer.value, read_literal(task.outputs[0])[1])
            return Verdict(float(right), "right" if right else "wrong")
        failed = next((o for o in outcomes if not o.ok), None)
        want = [o for _, o in task.held_back] if task.kind == "induction" else list(task.outputs)
        score = sum(_matches(o, w) for o, w in zip(outcomes, want)) / len(want)
        if score == 1.0:
            return Verdict(1.0, "right")
        if failed is not None and score == 0.0:
            return Verdict(0.0, failed.kind, failed.reason)
        return Verdict(score, "wrong", f"{failed.kind}: {failed.reason}" if failed else "")
