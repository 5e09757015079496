"""Maze generation: a randomised depth-first carve with extra openings (loops), and shortest paths.

A maze is a grid of tokens (see the package docstring, tasks/maze/__init__.py); a perfect maze is
carved over the cells at even coordinates, then each remaining inner wall is opened with probability
`loops`, so the maze has cycles and the model must find the *shortest* of several routes. S is drawn
at random, G at random among the cells at least `min_path` steps away; a maze whose shortest path is
not unique is drawn again (with `unique=False` it is kept: its answer marks one of the shortest paths,
and the task's metric accepts any of them). Builds draw through generate_within: a maze whose bound
is at the edge of the generator's reach gets more draws, then a bound up to 10 % lower, and the build
counts and says so, rather than one unlucky seed ending it."""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

CHARS = "# SGo"
VOCAB = ("<pad>", "#", " ", "S", "G", "o")
PAD, WALL, OPEN, START, GOAL, PATH = range(6)
RELAX_STEP, RELAX_FLOOR = 0.02, 0.9  # a maze out of reach: its bound drops 2 % a round, to 90 % at most


class NoMaze(ValueError):
    """generate_maze found no maze meeting its bounds in its tries."""


class Draw(NamedTuple):
    """One maze from generate_within: the bound asked, the bound its path met (lower when relaxed) and
    whether it took more than the first `tries`."""

    question: np.ndarray
    answer: np.ndarray
    length: int
    asked: int
    min_path: int
    widened: bool

    @property
    def relaxed(self) -> bool:
        return self.min_path < self.asked


def default_min_path(n: int) -> int:
    """Maze-Hard's hardness (path > 110 on 30 x 30) scaled by area up to 30 x 30, by side length past it.

    With loops the longest shortest path grows about linearly with the side (measured, 20 mazes each:
    the median farthest cell from a random start is 44 / 82 / 146 / 267 steps at 15 / 30 / 61 / 121),
    so the area rule (455 steps at 61 x 61) is out of the generator's reach past 30; 110 x n / 30
    (224 at 61 x 61) is in its tail, as 110 is at 30 x 30."""
    if n <= 30:
        return max(1, round(110 * n * n / 900))
    return round(110 * n / 30)


def carve(n: int, rng: np.random.Generator, loops: float) -> np.ndarray:
    """An (n, n) grid of WALL/OPEN: a perfect maze with extra walls opened at rate `loops`."""
    grid = np.full((n, n), WALL, dtype=np.uint8)
    m = (n + 1) // 2  # cells per side, at even coordinates
    seen = np.zeros((m, m), dtype=bool)
    start = (int(rng.integers(m)), int(rng.integers(m)))
    stack, seen[start] = [start], True
    grid[2 * start[0], 2 * start[1]] = OPEN
    while stack:  # randomised depth-first search
        r, c = stack[-1]
        options = [(r + dr, c + dc) for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))
                   if 0 <= r + dr < m and 0 <= c + dc < m and not seen[r + dr, c + dc]]
        if not options:
            stack.pop()
            continue
        nr, nc = options[int(rng.integers(len(options)))]
        grid[r + nr, c + nc] = OPEN  # the passage between (2r, 2c) and (2nr, 2nc)
        grid[2 * nr, 2 * nc] = OPEN
        seen[nr, nc] = True
        stack.append((nr, nc))
    if loops > 0:
        walls = np.zeros((n, n), dtype=bool)
        walls[0::2, 1::2] = True  # between horizontal neighbours
        walls[1::2, 0::2] = True  # between vertical neighbours
        walls &= grid == WALL
        walls[n - 1 if n % 2 == 0 else n:, :] = False  # the closing row/column of an even n
        walls[:, n - 1 if n % 2 == 0 else n:] = False
        grid[walls & (rng.random((n, n)) < loops)] = OPEN
    return grid


def distances(grid: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """BFS steps from source through non-wall cells; -1 where unreachable."""
    n = grid.shape[0]
    dist = np.full(grid.shape, -1, dtype=np.int32)
    dist[source] = 0
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] < 0 and grid[nr, nc] != WALL:
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


def shortest_paths(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]
                   ) -> tuple[int, int, list[tuple[int, int]]]:
    """(length, number of shortest paths capped at 2, one shortest path S..G); length -1 if none."""
    dist = distances(grid, start)
    if dist[goal] < 0:
        return -1, 0, []
    n = grid.shape[0]
    order = np.argsort(dist, axis=None, kind="stable")
    count = np.zeros(grid.shape, dtype=np.int64)
    count[start] = 1
    for flat in order:
        r, c = divmod(int(flat), n)
        d = dist[r, c]
        if d <= 0:
            continue
        total = 0
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] == d - 1:
                total += count[nr, nc]
        count[r, c] = min(total, 2)
    path, cell = [goal], goal
    while cell != start:  # walk back along decreasing distance
        r, c = cell
        cell = next((nr, nc) for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
                    if 0 <= nr < n and 0 <= nc < n and dist[nr, nc] == dist[r, c] - 1)
        path.append(cell)
    return int(dist[goal]), int(count[goal]), path[::-1]


def generate_maze(n: int, rng: np.random.Generator, loops: float = 0.1, min_path: int | None = None,
                  tries: int = 200, max_path: int | None = None, unique: bool = True
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """One maze: (question (n, n), answer (n, n), shortest path length) as tokens; the path has
    min_path..max_path steps (no upper bound when max_path is None) and, when `unique`, is the only
    shortest path."""
    min_path = default_min_path(n) if min_path is None else min_path
    for _ in range(tries):
        grid = carve(n, rng, loops)
        cells = np.argwhere(grid == OPEN)
        start = tuple(int(v) for v in cells[rng.integers(len(cells))])
        dist = distances(grid, start)
        far = np.argwhere((dist >= min_path) & (dist <= (max_path if max_path is not None else dist.max())))
        if len(far) == 0:
            continue
        goal = tuple(int(v) for v in far[rng.integers(len(far))])
        length, count, path = shortest_paths(grid, start, goal)
        if unique and count != 1:
            continue
        question = grid.copy()
        question[start], question[goal] = START, GOAL
        answer = question.copy()
        for cell in path[1:-1]:
            answer[cell] = PATH
        return question, answer, length
    rule = "a unique shortest path" if unique else "a shortest path"
    fix = "lower --min-path or pass --no-unique-path" if unique else "lower --min-path"
    raise NoMaze(f"no {n}x{n} maze with {rule} of at least {min_path} steps in {tries} tries: {fix} "
                 f"(the longest possible is about {n * n // 2})")


def relaxed_bounds(min_path: int) -> list[int]:
    """The bounds generate_within tries after the first `tries` fail: min_path once more (a widened
    budget), then 2 % lower a round down to 90 % of min_path."""
    rounds = round((1 - RELAX_FLOOR) / RELAX_STEP)
    lower = [max(1, int(min_path * (1 - RELAX_STEP * k))) for k in range(1, rounds + 1)]
    return [min_path] + sorted(set(lower) - {min_path}, reverse=True)


def generate_within(n: int, rng: np.random.Generator, loops: float = 0.1, min_path: int | None = None,
                    tries: int = 200, max_path: int | None = None, unique: bool = True) -> Draw:
    """generate_maze, but a maze at the edge of the generator's reach does not end a build: when the
    first `tries` find none, the search goes on with the same rng (so every maze generate_maze finds
    is the same here) over relaxed_bounds, `tries` each; only a bound out of reach even at 90 % fails."""
    min_path = default_min_path(n) if min_path is None else min_path
    try:
        return Draw(*generate_maze(n, rng, loops, min_path, tries, max_path, unique), min_path, min_path, False)
    except NoMaze as err:
        first = err
    for bound in relaxed_bounds(min_path):
        try:
            return Draw(*generate_maze(n, rng, loops, bound, tries, max_path, unique), min_path, bound, True)
        except NoMaze:
            continue
    raise NoMaze(f"{first}; {len(relaxed_bounds(min_path))} more rounds down to "
                 f"{relaxed_bounds(min_path)[-1]} steps found none either") from None
