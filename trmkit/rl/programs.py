"""The code tasks of self-play: a small, documented subset of Python, its tokens and layouts.

Programs are Python functions of one list `x` of digits (0-9, 0 to 6 items):

    def f(x):
        <statement>        # 1 to MAX_STATEMENTS lines, each one of STATEMENTS below
        return x

Every statement keeps the values digits and never grows the list, so every program
terminates at once and its values fit the vocabulary; the executor (rl/sandbox.py)
still treats every program as hostile, because the policy writes it. A statement is
one token of the policy's vocabulary: whatever tokens the policy samples in a program
field render to syntactically valid Python, and the proposer is judged on the tasks
it poses rather than on its spelling.

Task types (self-play code reasoning):
- deduction: program + input -> the output;
- abduction: program + output -> an input that gives it (any such input is right);
- induction: three input/output pairs + a description (the number of statements) ->
  a program that maps every pair, including one hidden fourth pair.

Sequences: every (role, type) group has its own fixed layout, [prompt | response], so a
group is only as long as its own fields (per-group padding), and the policy reads its
response from the response positions (the TRM fills them all at once, as a Sudoku's
cells). Every field has fixed slots: a list is MAX_ITEMS positions (digits, then <e>), a
program MAX_STATEMENTS positions (statements; <e> is an empty slot), and the solver's
think part one list field per statement. So each position always means the same thing
(the value after statement i, item j), which a model that writes all positions at once
needs, and a longer program changes single positions rather than shifting the rest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

STATEMENTS: list[tuple[str, str]] = []  # (name, Python line)


def _build_statements() -> None:
    fixed = [("reverse", "x = x[::-1]"), ("rotl", "x = x[1:] + x[:1]"), ("rotr", "x = x[-1:] + x[:-1]"),
             ("sort", "x = sorted(x)"), ("sortd", "x = sorted(x, reverse=True)"),
             ("cumsum", "x = [sum(x[:i + 1]) % 10 for i in range(len(x))]")]
    STATEMENTS.extend(fixed)
    STATEMENTS.extend((f"add{c}", f"x = [(v + {c}) % 10 for v in x]") for c in range(1, 10))
    STATEMENTS.extend((f"mul{c}", f"x = [(v * {c}) % 10 for v in x]") for c in range(2, 10))
    STATEMENTS.extend((f"min{c}", f"x = [min(v, {c}) for v in x]") for c in range(1, 9))
    STATEMENTS.extend((f"max{c}", f"x = [max(v, {c}) for v in x]") for c in range(1, 9))
    STATEMENTS.extend((f"dist{c}", f"x = [abs(v - {c}) for v in x]") for c in range(1, 10))
    STATEMENTS.extend((f"take{c}", f"x = x[:{c}]") for c in range(1, 6))
    STATEMENTS.extend((f"gt{c}", f"x = [v for v in x if v > {c}]") for c in range(0, 9))


_build_statements()

ROLES = ("propose", "solve", "critique")
TYPES = ("deduction", "abduction", "induction")
MAX_STATEMENTS = 5  # the policy's program field; seeding uses at most SEED_MAX_STATEMENTS
SEED_MAX_STATEMENTS = 3
MAX_ITEMS = 6  # list length
SHOWN_PAIRS = 3  # induction: pairs in the prompt; one more is hidden and checked
SPECIAL = ["<pad>", "<blank>", "<propose>", "<solve>", "<critique>", "<deduction>", "<abduction>",
           "<induction>", "<prog>", "<in>", "<out>", "<pair>", "<desc>", "<ref>", "<think>", "</think>",
           "<answer>", "</answer>", "<e>", "<yes>", "<no>"]
VOCAB = SPECIAL + [str(d) for d in range(10)] + [f"s:{name}" for name, _ in STATEMENTS]
TOKEN = {t: i for i, t in enumerate(VOCAB)}
PAD, BLANK, EMPTY = TOKEN["<pad>"], TOKEN["<blank>"], TOKEN["<e>"]
DIGIT0 = TOKEN["0"]
STMT0 = TOKEN[f"s:{STATEMENTS[0][0]}"]
MAX_SCORE = 5


@dataclass(frozen=True)
class CodeTask:
    """One task: a program (statement indices) and its inputs; outputs come from the executor."""

    kind: str  # one of TYPES
    program: tuple[int, ...]
    inputs: tuple[tuple[int, ...], ...]  # 1 for deduction/abduction, SHOWN_PAIRS + 1 for induction
    outputs: tuple[tuple[int, ...], ...] = ()  # filled by executing the program

    def key(self) -> str:
        return f"{self.kind}|{','.join(map(str, self.program))}|" + ";".join(
            "".join(map(str, i)) for i in self.inputs)


def source(program: tuple[int, ...] | list[int], traced: bool = False) -> str:
    """Python source of a program; traced=True returns the list after every statement instead."""
    lines = ["def f(x):"] + (["    t = []"] if traced else [])
    for s in program:
        lines.append("    " + STATEMENTS[s][1])
        if traced:
            lines.append("    t = t + [x]")
    lines.append("    return t" if traced else "    return x")
    return "\n".join(lines) + "\n"


def inputs_needed(kind: str) -> int:
    return SHOWN_PAIRS + 1 if kind == "induction" else 1


def random_list(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randrange(10) for _ in range(rng.randint(1, MAX_ITEMS)))


def random_task(rng: random.Random, kind: str, min_len: int = 1, max_len: int = SEED_MAX_STATEMENTS) -> CodeTask:
    program = tuple(rng.randrange(len(STATEMENTS)) for _ in range(rng.randint(min_len, max_len)))
    return CodeTask(kind, program, tuple(random_list(rng) for _ in range(inputs_needed(kind))))


# ---- token layouts: fixed slots ------------------------------------------------------------------

def list_tokens(values) -> list[int]:
    """MAX_ITEMS slots: the digits, then <e>."""
    return [DIGIT0 + v for v in values] + [EMPTY] * (MAX_ITEMS - len(values))


def program_tokens(program) -> list[int]:
    """MAX_STATEMENTS slots: the statements, then <e>."""
    return [STMT0 + s for s in program] + [EMPTY] * (MAX_STATEMENTS - len(program))


def task_tokens(task: CodeTask) -> list[int]:
    """The task as the solver (and the critique, and a proposer's reference) sees it."""
    if task.kind == "induction":
        out = [TOKEN["<desc>"], DIGIT0 + len(task.program)]
        for i, o in zip(task.inputs[:SHOWN_PAIRS], task.outputs[:SHOWN_PAIRS]):
            out += [TOKEN["<pair>"]] + list_tokens(i) + list_tokens(o)
        return out
    prog = [TOKEN["<prog>"]] + program_tokens(task.program)
    if task.kind == "deduction":
        return prog + [TOKEN["<in>"]] + list_tokens(task.inputs[0])
    return prog + [TOKEN["<out>"]] + list_tokens(task.outputs[0])


def proposal_tokens(task: CodeTask) -> list[int]:
    """What the proposer writes: the program and its inputs (outputs come from executing it)."""
    out = [TOKEN["<prog>"]] + program_tokens(task.program)
    for i in task.inputs:
        out += [TOKEN["<in>"]] + list_tokens(i)
    return out


def answer_tokens(task: CodeTask, answer) -> list[int]:
    return program_tokens(answer) if task.kind == "induction" else list_tokens(answer)


def solve_tokens(trace: list[tuple[int, ...]], answer_toks: list[int]) -> list[int]:
    """<think> one list field per statement slot (<e> after the program's end) </think> <answer> .. </answer>"""
    think = [t for values in trace for t in list_tokens(values)]
    think += [EMPTY] * (MAX_STATEMENTS * MAX_ITEMS - len(think))
    return [TOKEN["<think>"]] + think + [TOKEN["</think>"], TOKEN["<answer>"]] + answer_toks + [TOKEN["</answer>"]]


def critique_tokens(verdict: bool, score: int) -> list[int]:
    return [TOKEN["<yes>" if verdict else "<no>"], DIGIT0 + score]


_TASK_LEN = {"deduction": 2 + MAX_STATEMENTS + MAX_ITEMS, "abduction": 2 + MAX_STATEMENTS + MAX_ITEMS,
             "induction": 2 + SHOWN_PAIRS * (1 + 2 * MAX_ITEMS)}


def _answer_len(kind: str) -> int:
    return MAX_STATEMENTS if kind == "induction" else MAX_ITEMS


def _solve_len(kind: str) -> int:
    return 1 + MAX_STATEMENTS * MAX_ITEMS + 2 + _answer_len(kind) + 1


@dataclass(frozen=True)
class Layout:
    """Where a (role, type) group's prompt and response sit: [prompt | response]."""

    prompt: int
    response: int

    @property
    def length(self) -> int:
        return self.prompt + self.response


def layout(role: str, kind: str) -> Layout:
    if role == "solve":
        return Layout(2 + _TASK_LEN[kind], _solve_len(kind))
    if role == "critique":
        return Layout(2 + _TASK_LEN[kind] + _solve_len(kind), 2)
    return Layout(3 + _TASK_LEN[kind], 1 + MAX_STATEMENTS + inputs_needed(kind) * (1 + MAX_ITEMS))


def max_length() -> int:
    return max(layout(r, k).length for r in ROLES for k in TYPES)


def prompt(role: str, kind: str, body: list[int]) -> list[int]:
    """Role and type tokens, the body, then <blank> response positions."""
    lay = layout(role, kind)
    head = [TOKEN[f"<{role}>"], TOKEN[f"<{kind}>"]] + ([TOKEN["<ref>"]] if role == "propose" else [])
    toks = head + body
    if len(toks) != lay.prompt:
        raise ValueError(f"{role}/{kind} prompt of {len(toks)} tokens; its layout has {lay.prompt}")
    return toks + [BLANK] * lay.response


def check_response(tokens: list[int], role: str, kind: str) -> list[int]:
    n = layout(role, kind).response
    if len(tokens) != n:
        raise ValueError(f"{role}/{kind} response of {len(tokens)} tokens; its layout has {n}")
    return tokens


# ---- parsing what the policy wrote --------------------------------------------------------------

class Malformed(ValueError):
    """A response that does not follow its role's format (it earns the format penalty)."""


def _read_list(toks: list[int], i: int) -> tuple[tuple[int, ...], int]:
    field = toks[i:i + MAX_ITEMS]
    if len(field) < MAX_ITEMS:
        raise Malformed("a list field is cut short")
    values = []
    for j, t in enumerate(field):
        if DIGIT0 <= t < DIGIT0 + 10:
            if len(values) != j:
                raise Malformed("a digit after an empty list slot")
            values.append(t - DIGIT0)
        elif t != EMPTY:
            raise Malformed(f"a list slot holds {VOCAB[t]} (digits, then <e>)")
    return tuple(values), i + MAX_ITEMS


def _read_program(toks: list[int], i: int, allow_gaps: bool) -> tuple[tuple[int, ...], int]:
    """Statements of a program field; a proposer may leave empty slots between statements."""
    field = toks[i:i + MAX_STATEMENTS]
    prog = []
    for j, t in enumerate(field):
        if STMT0 <= t < STMT0 + len(STATEMENTS):
            if not allow_gaps and len(prog) != j:
                raise Malformed("a statement after an empty program slot")
            prog.append(t - STMT0)
        elif t != EMPTY:
            raise Malformed(f"a program slot holds {VOCAB[t]} (statements or <e>)")
    if not prog:
        raise Malformed("an empty program")
    return tuple(prog), i + MAX_STATEMENTS


def _expect(toks: list[int], i: int, name: str) -> int:
    if i >= len(toks) or toks[i] != TOKEN[name]:
        raise Malformed(f"expected {name} at response position {i}")
    return i + 1


@dataclass(frozen=True)
class SolveAnswer:
    think_tokens: int  # tokens written in the think part (digits; the empty slots do not count)
    trace: tuple[tuple[int, ...], ...]
    answer: tuple[int, ...]  # a list, or statement indices (induction)


def parse_solve(tokens, kind: str) -> SolveAnswer:
    """`<think> slots </think><answer> slots </answer>`; a missing or malformed part raises Malformed."""
    toks = list(tokens)
    i = _expect(toks, 0, "<think>")
    trace = []
    for _ in range(MAX_STATEMENTS):
        values, i = _read_list(toks, i)
        trace.append(values)
    i = _expect(toks, i, "</think>")
    i = _expect(toks, i, "<answer>")
    if kind == "induction":
        answer, i = _read_program(toks, i, allow_gaps=False)
    else:
        answer, i = _read_list(toks, i)
    _expect(toks, i, "</answer>")
    return SolveAnswer(sum(len(v) for v in trace), tuple(trace), answer)


def answer_span(kind: str) -> tuple[int, int]:
    """Response positions [start, end) of the solver's answer slots (after <think> .. </think> <answer>)."""
    start = 1 + MAX_STATEMENTS * MAX_ITEMS + 2
    return start, start + _answer_len(kind)


def parse_answer(tokens, kind: str) -> tuple[int, ...]:
    """Only the answer slots of a solver's response: the part the executor checks (and the part the
    self-play gradient covers); the think slots and tags are the seeding loss's to teach."""
    start, end = answer_span(kind)
    toks = list(tokens)[start:end]
    if kind == "induction":
        return _read_program(toks, 0, allow_gaps=False)[0]
    return _read_list(toks, 0)[0]


def parse_proposal(tokens, kind: str) -> CodeTask:
    """A proposer's task; empty program slots are skipped (the task is stored left-aligned)."""
    toks = list(tokens)
    i = _expect(toks, 0, "<prog>")
    program, i = _read_program(toks, i, allow_gaps=True)
    inputs = []
    for _ in range(inputs_needed(kind)):
        i = _expect(toks, i, "<in>")
        values, i = _read_list(toks, i)
        if not values:
            raise Malformed("an empty input list")
        inputs.append(values)
    return CodeTask(kind, program, tuple(inputs))


def parse_critique(tokens) -> tuple[bool, int]:
    toks = list(tokens)
    if len(toks) != 2 or toks[0] not in (TOKEN["<yes>"], TOKEN["<no>"]) \
            or not DIGIT0 <= toks[1] <= DIGIT0 + MAX_SCORE:
        raise Malformed(f"a critique is <yes>|<no> then a score 0..{MAX_SCORE}")
    return toks[0] == TOKEN["<yes>"], toks[1] - DIGIT0


def decode(tokens) -> str:
    return " ".join(VOCAB[t] for t in tokens if t != PAD)
