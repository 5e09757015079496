"""The trace's answer folding: the model part that makes a trace model answer in the maze's own tokens.

A model trained on a search's trace (data.trace, trace.py) has a token head with one output per trace
token past the maze vocabulary, each standing for an answer id (model.trace_answers, which the trainer
records from the sampler's TRACE_TOKENS). `AnswerFold` is that part (model/parts.py): it adds the
outputs to the head and folds them into the answer, each answer id's probability its own plus that of
the trace tokens standing for it, exactly, under the model's loss (model/losses.py merge_logits).

How the route is read (`maze.read`, the maze section; an evaluation may set it, `trmkit eval RUN
maze.read=fold`):
- "walk" (the default): the route is the model's own arrows followed from S (trace.py `walk`): each cell's
  direction, " ^" and "o^" alike, is the step toward G the wave from G put there, which is what the trace
  itself follows back from S, 8 cells a supervision step. Read at once, the route needs only the wave to
  have reached S, and a stray "o" mark off the route changes nothing. It walks from each open neighbour of S
  and keeps the shortest walk that reaches G. A walk that leaves the grid, meets a wall or S or comes back to
  a cell reads nothing: where none reaches G, the answer is the folded one. `--steps auto` stops on the walk
  (`settled`): once it reaches G through cells that hold a trace token and has not changed for two steps.
- "fold": the cells whose folded answer is "o".
Both read one try's logits: no vote, no checker. Training's loss and TR-RPG's policy read the folded logits
(no input is handed to `answer` there).
"""

from __future__ import annotations

import numpy as np
import torch

from trmkit.config import Config
from trmkit.tasks.maze.config import maze_config
from trmkit.model.losses import merge_logits
from trmkit.model.parts import Part
from trmkit.tasks.maze.generate import OPEN, PATH
from trmkit.tasks.maze.trace import TRACE_TOKENS, walk


class AnswerFold(Part):
    """Trace tokens folded into the answer ids `into` (one per token past the answer vocabulary); with
    `read="walk"` and the input at hand, the route the model's arrows lead along from S marked instead."""

    def __init__(self, into: tuple[int, ...], kind: str = "stablemax", read: str = "walk"):
        super().__init__(extra_outputs=len(into))  # `read` is checked with the maze section (config.py)
        self.into, self.kind, self.read = tuple(into), kind, read

    def answer(self, logits: torch.Tensor, inputs: torch.Tensor | None = None) -> torch.Tensor:
        folded = merge_logits(logits, self.into, self.kind)  # (B, L, V + H) -> (B, L, V)
        if self.read != "walk" or inputs is None or len(self.into) != len(TRACE_TOKENS):
            return folded
        return walked(folded, logits, inputs, self.kind)

    def settled(self, logits: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """With read="walk": (done (B,) bool, the walked answer's ids (B, L)), done where the walk reaches G
        through cells that each hold a trace token (the wave from G has been there): the route it reads is
        complete, so `--steps auto` may stop on it. The ids are `answer`'s argmax, from the same walks."""
        if self.read != "walk" or len(self.into) != len(TRACE_TOKENS):
            return None
        folded = merge_logits(logits, self.into, self.kind)
        routes = walks(folded, logits, inputs, self.kind)
        if routes is None:
            return None
        reached = (logits.argmax(-1) >= folded.shape[-1]).cpu().numpy()  # (B, L): a trace token, not " " or "o"
        done = [m is not None and bool(reached[i][m.reshape(-1)].all()) for i, m in enumerate(routes)]
        ids = folded.argmax(-1).cpu().numpy()
        grids = inputs.cpu().numpy()
        for i, marked in enumerate(routes):
            if done[i]:  # what `walked` makes the argmax: the walk's cells "o", the other "o" cells " "
                on, open_cells = marked.reshape(-1), grids[i] == OPEN
                ids[i] = np.where(open_cells & on, PATH, np.where(open_cells & (ids[i] == PATH), OPEN, ids[i]))
        return (torch.tensor(done, dtype=torch.bool, device=logits.device),
                torch.from_numpy(ids).to(logits.device))

    def extra_repr(self) -> str:
        return f"into={self.into}, kind={self.kind!r}, read={self.read!r}"


def walks(folded: torch.Tensor, logits: torch.Tensor, inputs: torch.Tensor, kind: str) -> list | None:
    """Each maze's walk (trace.py `walk`: its marked cells (N, N), or None where it reads nothing) from a step's
    logits (B, L, V + 8) and their fold (B, L, V); None for inputs (B, L) that are not square grids."""
    side = int(round(inputs.shape[1] ** 0.5))
    if side * side != inputs.shape[1]:
        return None
    V = folded.shape[-1]
    trace = logits[..., V:].detach()  # (B, L, 8): " ^" ... " <", then "o^" ... "o<"
    arrows = merge_logits(trace, (0, 1, 2, 3), kind).argmax(-1).cpu().numpy()  # (B, L): the direction
    route = (folded[..., PATH] - folded[..., OPEN]).detach().float().cpu().numpy()
    grids = inputs.cpu().numpy().reshape(len(inputs), side, side)
    return [walk(grid, arrows[i].reshape(side, side), route[i].reshape(side, side)) for i, grid in enumerate(grids)]


def walked(folded: torch.Tensor, logits: torch.Tensor, inputs: torch.Tensor, kind: str) -> torch.Tensor:
    """The folded answer logits (B, L, V) with, in each maze whose walk reaches G, every open cell's "o" and
    " " logits exchanged where the folded answer disagrees with the walk (each cell keeps its set of logits,
    so its answer, and no more, is the walk's). Inputs (B, L) of square grids."""
    routes = walks(folded, logits, inputs, kind)
    if routes is None:
        return folded
    grids = inputs.cpu().numpy()
    out = folded.detach().float().cpu().numpy().copy()
    for i, marked in enumerate(routes):
        if marked is None:
            continue
        cell, grid = out[i], grids[i]
        says_path = cell.argmax(-1) == PATH
        swap = (grid == OPEN) & (says_path != marked.reshape(-1))
        other = np.where(says_path, OPEN, cell.argmax(-1))[swap]  # the id PATH trades places with
        rows = np.flatnonzero(swap)
        cell[rows, PATH], cell[rows, other] = cell[rows, other], cell[rows, PATH].copy()
    return torch.from_numpy(out).to(folded.device, folded.dtype)


def model_parts(cfg: Config) -> tuple[Part, ...]:
    """The maze task's parts for a config: the fold when its model was trained on a trace, else none."""
    m = cfg.model
    return (AnswerFold(m.trace_ids, m.loss, maze_config(cfg).read),) if m.trace_ids else ()
