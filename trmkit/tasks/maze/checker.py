"""The maze checker `trmkit adapt` keeps answers by (tasks/base.py Checking).

An answer is accepted when its `o` cells are exactly the inner cells of one simple path of open cells
from S to G: the rule the test-time vote counts ballots by (variants.maze_variants, data.is_path: it reads
the maze alone, never the label nor a solver's shortest path), and of two accepted answers the shorter
path is preferred (the answer asked for is the shortest). Nothing here searches the maze.

A trace run (data.trace) trains on the search's trace, but its store's labels are the plain answers
(`#`, ` `, `S`, `G`, `o`; the trace is drawn by the sampler at each step) and its answers reach the
checker folded back into those tokens (fold.py). `to_label` writes the accepted path as that final answer:
the maze with the path's cells `o`, walls, S and G repeated from the input, as the store's labels are.
A trace run trains it step by step with `to_trace` (trace.py route_trace): the trace's labels on the
path's cells, read from the path (no search of the maze), and "not the route" on every other open cell.
"""

from __future__ import annotations

import numpy as np

from trmkit.config import ConfigError
from trmkit.data.store import StoreMeta
from trmkit.tasks.base import Checking, refuse_spec
from trmkit.tasks.maze.generate import OPEN, PATH, VOCAB
from trmkit.tasks.maze.trace import route_trace
from trmkit.tasks.maze.variants import maze_variants

RULES = "maze: the o cells a simple path of open cells from S to G; the shorter preferred"


def maze_checker(meta: StoreMeta, spec: str | None) -> Checking:
    """The path rule for a store of N x N mazes; a --checker spec is refused (the rule is built in)."""
    refuse_spec("maze", spec, RULES)
    if tuple(meta.vocab[:len(VOCAB)]) != VOCAB:
        raise ConfigError(f"the maze checker reads the maze vocabulary {list(VOCAB)}; this store's is "
                          f"{list(meta.vocab)}: give a store built by `trmkit data maze`")
    rules = maze_variants(meta, 1)  # variant 0 alone: the vote's check and preference, one copy of the rule
    vocab = len(VOCAB)

    def check(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
        return rules.check(inputs, in_vocab(answers, vocab))

    def to_trace(inputs: np.ndarray, labels: np.ndarray, speed: int, steps: int) -> np.ndarray:
        shape = tuple(meta.grid_shape)
        grids = [route_trace(x.reshape(shape), y.reshape(shape), speed, steps) for x, y in zip(inputs, labels)]
        return np.stack(grids).reshape(len(grids), steps, -1).astype(np.int64)

    return Checking(check=check, prefer=rules.prefer, describe=RULES, to_label=path_label, to_trace=to_trace)


def in_vocab(answers: np.ndarray, vocab: int) -> np.ndarray:
    """The answers, refused when they hold a trace token: a trace run's answers are read folded."""
    answers = np.asarray(answers)
    if answers.size and int(answers.max()) >= vocab:
        raise ValueError(f"maze answers hold token {int(answers.max())}, past the maze's {vocab}: a trace run's "
                         "answers must be read with its trace tokens folded into the answer (tasks/maze/fold.py)")
    return answers


def path_label(inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """(b, L) accepted answers -> the training labels: the maze with the answer's path cells `o` and every
    other open cell open; walls, S and G as in the input (the store's labels repeat them)."""
    inputs, answers = np.asarray(inputs), np.asarray(answers)
    open_cells = inputs == OPEN
    return np.where(open_cells, np.where(answers == PATH, PATH, OPEN), inputs).astype(inputs.dtype)
