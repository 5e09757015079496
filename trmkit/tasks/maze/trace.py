"""The search's trace as training labels: a wave from G at a fixed speed, then the route traced from S.

With data.trace=r (data.stream=generate), a training maze is labelled at every supervision step k
(1..N_sup), not only with its answer. The labels are a breadth-first search from G that a 3 x 3
convolution can carry out, r cells per supervision step:
- an open cell within r*k steps of G holds its *direction*: the first move of a shortest route from it
  to G (" ^", " >", " v", " <"; of equal moves the first in that order, in the grid as the model sees it);
- an open cell the wave has not reached yet holds " " (open, nothing known);
- once the wave has reached S (r*k >= L, the route's length), the route is traced back from S along
  the directions, r cells per step: a route cell j steps from S turns into "o^", "o>", "ov" or "o<" when
  r*k >= L + j. After 2L / r steps the labels are the whole trace and stay so.

Every label is a function of the question alone (walls, S, G): no information beyond the task's
own answer, but the answer's *algorithm* step by step, as neural algorithmic reasoning supervises the
steps of breadth-first search (Velickovic et al. 2020, "Neural execution of graph algorithms"). Each
supervision step has one local job - move the wave r cells, move the trace r cells, keep what is
set - the same on any grid, so the learned step runs on grids larger than the training ones for as
many steps as their routes need (`trmkit eval RUN --steps auto`). The eight trace tokens stand for
the answer's " " and "o" (TRACE_TOKENS): evaluation reads the answer by adding each trace token's
probability to the answer token it stands for (model.trace_answers; the model part fold.py's AnswerFold).
"""

from __future__ import annotations

import numpy as np

from trmkit.tasks.maze.generate import GOAL, OPEN, PATH, START, WALL, distances

MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # up, right, down, left: the order ties are broken in
FIRST_TRACE = 6  # the maze vocabulary's 6 ids come first (generate.VOCAB)
# (name, the answer token it stands for): a direction on an open cell, then the same on a route cell
TRACE_TOKENS = tuple((f" {arrow}", OPEN) for arrow in "^>v<") + tuple((f"o{arrow}", PATH) for arrow in "^>v<")
# a folded label (model/losses.py): the answer " " under the fold, whichever of " ", " ^" ... the step holds
NOT_ROUTE = FIRST_TRACE + len(TRACE_TOKENS) + OPEN


def directions(question: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(direction (N, N) int: the index in MOVES of each cell's first move toward G, -1 where none
    (walls, G, cells G cannot reach); distance to G (N, N) int32, -1 where unreachable)."""
    goal = tuple(int(v) for v in np.argwhere(question == GOAL)[0])
    dist = distances(question, goal)
    far = np.iinfo(np.int64).max
    d = np.where(dist < 0, far, dist).astype(np.int64)
    padded = np.pad(d, 1, constant_values=far)
    n, m = question.shape
    out = np.full(question.shape, -1, dtype=np.int64)
    for k in reversed(range(len(MOVES))):  # the first move in MOVES wins a tie: written last
        dr, dc = MOVES[k]
        neighbour = padded[1 + dr:1 + dr + n, 1 + dc:1 + dc + m]
        out = np.where((dist > 0) & (neighbour == d - 1), k, out)
    return out, dist


def route(question: np.ndarray, direction: np.ndarray) -> list[tuple[int, int]]:
    """The cells from S to G (both included) that following the directions visits: a shortest route."""
    cell = tuple(int(v) for v in np.argwhere(question == START)[0])
    cells = [cell]
    while question[cell] != GOAL:
        k = int(direction[cell])
        if k < 0:
            raise ValueError("G cannot be reached from S")
        cell = (cell[0] + MOVES[k][0], cell[1] + MOVES[k][1])
        cells.append(cell)
    return cells


def trace_labels(question: np.ndarray, speed: int, steps: int) -> np.ndarray:
    """(steps, N, N) uint8: the labels of supervision steps 1..steps (module docstring); given cells
    (walls, S, G) repeat the question, as the answer does."""
    if speed < 1 or steps < 1:
        raise ValueError(f"a trace needs speed >= 1 and steps >= 1, got {speed} and {steps}")
    direction, dist = directions(question)
    cells = route(question, direction)
    length = len(cells) - 1
    on_route = np.zeros(question.shape, dtype=bool)
    for cell in cells[1:-1]:
        on_route[cell] = True
    open_cells = question == OPEN
    pointing = np.where(open_cells & (direction >= 0), FIRST_TRACE + direction, OPEN)  # " ^" ... or " "
    traced = FIRST_TRACE + 4 + direction  # "o^" ...
    k = np.arange(1, steps + 1).reshape(-1, 1, 1) * speed  # (steps, 1, 1): the wave's reach at each step
    reached = open_cells & (dist >= 0) & (dist <= k)
    done = on_route & (2 * length - dist <= k)
    out = np.where(done, traced, np.where(reached, pointing, np.where(open_cells, OPEN, question)))
    return out.astype(np.uint8)


def route_trace(question: np.ndarray, answer: np.ndarray, speed: int, steps: int) -> np.ndarray:
    """(steps, N, N) uint8: `trace_labels` of a maze whose route is given by an answer (its `o` cells), read
    from that answer alone, without a search of the maze. On the route's cells: the trace the search runs on
    the maze with every open cell off the route walled, which is the maze's own trace there when the route is
    a shortest one (the checker's preferred answer): a route cell holds its move toward G once the wave from
    G reaches it, and its route token once the route is traced back to it. On the open cells off the route:
    NOT_ROUTE at every step, the answer " " under the fold, since what the wave holds there at a step takes
    a search to know, but that the cell is not on the route does not. `trmkit adapt` trains a trace run's
    accepted paths on these step by step, where the final path alone at one step asks for what the trace
    reaches only later, and the route's cells alone let every open cell be marked (measured: docs/adapt.md)."""
    question, answer = np.asarray(question), np.asarray(answer)
    off_route = (question == OPEN) & (answer != PATH)
    out = trace_labels(np.where(off_route, WALL, question), speed, steps)
    out[:, off_route] = NOT_ROUTE
    return out


def walk(question: np.ndarray, arrows: np.ndarray, route_score: np.ndarray) -> np.ndarray | None:
    """The route read from a trace model's arrows (model part fold.py, `maze.read=walk`): from each open
    neighbour of S, follow each cell's arrow (arrows: the index in MOVES of its direction token, " ^" or "o^"
    alike) until G; of the walks that reach G the shortest, of equal ones the one starting on the cell the
    model marks most as route (route_score), then the first in MOVES' order. Returns the walked open cells
    (N, N) bool, or None where no walk reaches G (each leaves the grid, meets a wall or S, or comes back to a
    cell). No search: at most four paths, each the model's own, and the shorter preferred as the answer asked
    for is the shortest (true arrows give the shortest route from the neighbour on it, and a longer one from
    any other: the start needs no route mark)."""
    n, m = question.shape
    start = tuple(int(v) for v in np.argwhere(question == START)[0])
    beside = [(start[0] + dr, start[1] + dc) for dr, dc in MOVES]
    beside = [c for c in beside if 0 <= c[0] < n and 0 <= c[1] < m]
    if any(question[c] == GOAL for c in beside):
        return np.zeros(question.shape, dtype=bool)
    walks = [(int(w.sum()), -float(route_score[c]), k, w) for k, c in enumerate(beside)
             if question[c] == OPEN and (w := _follow(question, arrows, c)) is not None]
    return min(walks, key=lambda w: w[:3])[3] if walks else None


def _follow(question: np.ndarray, arrows: np.ndarray, cell: tuple[int, int]) -> np.ndarray | None:
    """The open cells the arrows lead through from `cell` to G, or None where they leave the grid, meet a
    wall or S, or come back to a cell."""
    n, m = question.shape
    marked = np.zeros(question.shape, dtype=bool)
    while question[cell] == OPEN and not marked[cell]:
        marked[cell] = True
        dr, dc = MOVES[int(arrows[cell])]
        cell = (cell[0] + dr, cell[1] + dc)
        if not (0 <= cell[0] < n and 0 <= cell[1] < m):
            return None
    return marked if question[cell] == GOAL else None
