"""The proposer's and the critique's text: their prompts, what is read from their answers, and the
answer texts the supervised examples target (the solver's prompts and answers are azr/tasks.py's).

- propose: the prompt shows ``K`` reference programs of the kind from the buffer (each with its
  input(s), and for induction its message) and asks for a new program in a ```` ```python ````
  block, its input(s) each in an ```` ```input ```` block (the arguments of one call ``f(...)``)
  and, for induction, a one-line hint in a ```` ```message ```` block. The last python block is
  the program; deduction and abduction use the first input block, induction all of them (2 to
  ``MAX_INPUTS``) and the last message block. Whether the program is any good is decided later by
  validation (azr/validate.py), never here.
- critique: the prompt shows a task (its statement without the answer format) and one solver
  answer, written in the task's answer format, and asks for ``<verdict>yes</verdict>`` (right) or
  ``<verdict>no</verdict>`` (wrong); the last verdict tag counts, ``right``/``correct``/``true``
  read as yes, ``wrong``/``incorrect``/``false`` as no.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trmkit.rl.azr.tasks import AzrTask, prompt

MAX_INPUTS = 8  # inputs an induction proposal may give (the first half are shown to the solver)
MAX_PROPOSAL_CHARS = 20_000
_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_]*)[ \t]*\n(.*?)```", re.DOTALL)
_VERDICT = re.compile(r"<verdict>\s*([A-Za-z]+)\s*</verdict>", re.IGNORECASE)
_YES = {"yes", "right", "correct", "true"}
_NO = {"no", "wrong", "incorrect", "false"}
_PYTHON = {"python", "python3", "py", ""}
_FORMAT_TAIL = "\n\nThink step by step, then give "  # where azr/tasks.py's prompt starts its format line
WHAT = {
    "deduction": "predicting the output f(input) of a program for an input",
    "abduction": "finding an input that makes a program return a given output",
    "induction": "writing a program f from some of its inputs and outputs and a short message",
}


@dataclass(frozen=True)
class Proposal:
    """What a proposer wrote: a program, its inputs (argument texts), a message (induction)."""

    program: str
    inputs: tuple[str, ...]
    message: str = ""


def inputs_wanted(kind: str) -> str:
    return "4 different inputs" if kind == "induction" else "one input"


def reference(task: AzrTask) -> str:
    """A buffer task as the proposer sees it (also the target text of a propose example)."""
    inputs = task.inputs if task.kind == "induction" else task.inputs[:1]
    parts = [f"```python\n{task.program.strip()}\n```"] + [f"```input\n{i}\n```" for i in inputs]
    if task.kind == "induction":
        parts.append(f"```message\n{task.message}\n```")
    return "\n".join(parts)


def propose_prompt(kind: str, references: list[AzrTask]) -> str:
    shown = "\n\n".join(f"Example {i + 1}:\n{reference(t)}" for i, t in enumerate(references))
    message = (" and a one-line message in a ```message block that hints at what f does without "
               "giving its code") if kind == "induction" else ""
    return (f"Write a new task for {WHAT[kind]}. Here are example programs of this kind with their "
            f"inputs:\n\n{shown}\n\nWrite a new Python program, different from the examples: a function f "
            "(with the imports it needs above it) that is deterministic and uses no files, network, "
            f"randomness or time, in a ```python block. Then give {inputs_wanted(kind)} for it, each the "
            f"arguments of one call f(...) in its own ```input block{message}.")


def parse_proposal(text: str, kind: str) -> Proposal | str:
    """The proposal in a proposer's text, or the reason none could be read."""
    if not isinstance(text, str):
        return f"the proposal is not text ({type(text).__name__})"
    blocks = [(m.group(1).lower(), m.group(2).strip()) for m in _BLOCK.finditer(text[:MAX_PROPOSAL_CHARS])]
    programs = [body for lang, body in blocks if lang in _PYTHON and body]
    inputs = tuple(body for lang, body in blocks if lang == "input" and body)
    messages = [body for lang, body in blocks if lang == "message" and body]
    if not programs:
        return "no ```python block"
    if not inputs:
        return "no ```input block"
    if kind != "induction":
        return Proposal(programs[-1], inputs[:1])
    if not 2 <= len(inputs) <= MAX_INPUTS:
        return f"an induction proposal needs 2 to {MAX_INPUTS} ```input blocks, got {len(inputs)}"
    if not messages:
        return "no ```message block"
    return Proposal(programs[-1], inputs, messages[-1])


def statement(task: AzrTask) -> str:
    """The task as the solver sees it, without the answer format."""
    return prompt(task).split(_FORMAT_TAIL, 1)[0]


def shown_answer(kind: str, answer: str) -> str:
    """An answer's text in the kind's answer format (what a right solver writes)."""
    if kind == "induction":
        return f"```python\n{answer.strip()}\n```"
    return f"<answer>{answer.strip()}</answer>"


def solve_target(task: AzrTask) -> str:
    """A right answer: the output (deduction), the input (abduction), the program (induction)."""
    return shown_answer(task.kind, {"deduction": task.outputs[0], "abduction": task.inputs[0],
                                    "induction": task.program}[task.kind])


def critique_prompt(task: AzrTask, answer: str) -> str:
    return (f"Here is a task and an answer to it.\n\nTask:\n{statement(task)}\n\nAnswer:\n{answer}\n\n"
            "Is the answer right? Check it step by step, then write <verdict>yes</verdict> if it is "
            "right or <verdict>no</verdict> if it is wrong.")


def parse_verdict(text: str) -> bool | None:
    """True (yes), False (no), or None when no verdict can be read."""
    if not isinstance(text, str):
        return None
    found = [m.group(1).lower() for m in _VERDICT.finditer(text)]
    if not found:
        return None
    return True if found[-1] in _YES else False if found[-1] in _NO else None


def verdict_target(right: bool) -> str:
    return f"<verdict>{'yes' if right else 'no'}</verdict>"
