"""Your own puzzle's checker: `--checker file.py:function` on a store built by `trmkit data pairs`.

Each answer is decoded into your puzzle's own form, as `trmkit predict` writes it (codec.Layout: a grid
as a list of lists of ints, or a string), on the input's own shape (its cells that are not padding), and
your function is called as `function(input, output) -> bool` in a process of its own, at most
TIME_LIMIT seconds a call (tasks/checking.py). An answer with padding inside the puzzle's shape is
rejected without a call: it is no grid of yours. An error names the JSONL line the puzzle came from
(the store's "source_lines", build.py); a store built before they were recorded shows the puzzle.
The store's labels are never read.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trmkit.config import ConfigError
from trmkit.data.store import StoreMeta
from trmkit.tasks.base import Checking
from trmkit.tasks.checking import EXAMPLE, Spec, UserFunction, parse_spec
from trmkit.tasks.pairs.build import input_key
from trmkit.tasks.pairs.codec import Layout

TIME_LIMIT = 10.0  # seconds a call of the user's function may take (a check takes microseconds; a hang stops)
MISSING = ("a pairs store has no built-in checker: pass --checker FILE.py:FUNCTION, your function "
           "`def FUNCTION(input, output) -> bool` that says whether output answers input (docs/tasks.md, "
           f"Checkers; e.g. {EXAMPLE})")


def pairs_checker(meta: StoreMeta, spec: str | None) -> Checking:
    """The user's function (required) for a pairs store, at most TIME_LIMIT seconds a call."""
    return user_checker(meta, spec, TIME_LIMIT)


def user_checker(meta: StoreMeta, spec: str | None, time_limit: float) -> Checking:
    """As pairs_checker, with the time limit a test may shorten. The function is loaded now, in its own
    process, so a file that does not load is refused before any work."""
    if spec is None:
        raise ConfigError(MISSING)
    try:
        layout = Layout.from_meta(meta)
    except ValueError as e:
        raise ConfigError(f"--checker {spec}: {e}; a user's checker takes a store built by `trmkit data pairs`"
                          ) from None
    parsed = parse_spec(spec)
    function = UserFunction(parsed, time_limit)
    function.start()
    lines = {str(k): int(v) for k, v in meta.build.get("source_lines", {}).items()}

    def check(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
        inputs, answers = np.asarray(inputs), np.asarray(answers)
        verdicts = np.zeros(len(inputs), dtype=bool)
        asked, pairs = [], []
        for i, (x, answer) in enumerate(zip(inputs, answers)):
            pair = decoded(layout, x, answer)
            if pair is not None:
                asked.append(i)
                pairs.append(pair)
        verdicts[asked] = function.run(pairs, lambda j: puzzle_name(inputs[asked[j]], pairs[j][0], lines, meta))
        return verdicts

    return Checking(check=check, describe=describe(parsed, time_limit))


def describe(spec: Spec, time_limit: float) -> str:
    return (f"your function {spec.function}(input, output) of {spec.path.name}, in a process of its own, "
            f"at most {time_limit:g} s a call (the time limit)")


def shape_of(layout: Layout, x: np.ndarray) -> tuple[int, ...]:
    """The input's own shape on the canvas: every cell of a puzzle is a symbol, padding lies only around it."""
    filled = np.asarray(x).reshape(layout.canvas) != 0
    return tuple(int(np.flatnonzero(filled.any(axis=tuple(a for a in range(filled.ndim) if a != d)))[-1]) + 1
                 for d in range(filled.ndim))


def decoded(layout: Layout, x: np.ndarray, answer: np.ndarray) -> tuple[Any, Any] | None:
    """(input, output) in the user's form, or None for an answer with padding inside the input's shape."""
    if answer.size and int(answer.max()) >= len(layout.vocab):
        raise ValueError(f"an answer holds token {int(answer.max())}, past the store's {len(layout.vocab)}")
    shape = shape_of(layout, x)
    inside = np.asarray(answer).reshape(layout.canvas)[tuple(slice(0, n) for n in shape)]
    if (inside == 0).any():
        return None
    return layout.decode(x, shape), layout.decode(answer, shape)


def puzzle_name(x: np.ndarray, value: Any, lines: dict[str, int], meta: StoreMeta) -> str:
    """"the puzzle of line 17 of data/latin6.jsonl", or, for a store without its lines, the puzzle itself."""
    line = lines.get(input_key(x))
    if line is not None:
        return f"the puzzle of line {line} of {meta.source}"
    text = json.dumps(value)
    return (f"the puzzle with input {text[:80]}{'...' if len(text) > 80 else ''} (this store records no source "
            "lines: one built before they were, or an augmented copy; rebuild it with `trmkit data pairs` to "
            "have its line named)")
