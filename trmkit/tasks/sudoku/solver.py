"""Sudoku digit grids and their solver.

Grids are numpy arrays of shape (81,) in row-major order with 0 for a blank
and 1..9 for digits ("digit grids"). The store encoding adds one:
token 0 = pad (unused by Sudoku), 1 = blank ".", 2..10 = digits 1..9.
Labels are the full solution, givens included.

The solver is pure Python: 9-bit candidate masks per cell, propagation of
naked and hidden singles, and depth-first search that branches on a cell
with the fewest candidates (MRV). Its guess count is the hardness measure
used by the generator (generate.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np

SIZE = 81
ALL_CANDIDATES = 0x1FF  # bits 0..8 = digits 1..9
VOCAB = ("<pad>", ".", "1", "2", "3", "4", "5", "6", "7", "8", "9")
PAD_ID, BLANK_ID = 0, 1


# ---------------------------------------------------------------- geometry


class _Geometry(NamedTuple):
    units: tuple[tuple[int, ...], ...]  # 27 units (rows, cols, boxes) of 9 cells
    peers: tuple[tuple[int, ...], ...]  # 81 cells -> 20 peers
    popcount: tuple[int, ...]  # 512 masks -> number of candidates
    digit_of: dict[int, int]  # single-bit mask -> digit 1..9


@functools.lru_cache(maxsize=1)
def _geometry() -> _Geometry:
    """Lookup tables, built on first use (not at import)."""
    rows = [tuple(r * 9 + c for c in range(9)) for r in range(9)]
    cols = [tuple(r * 9 + c for r in range(9)) for c in range(9)]
    boxes = [
        tuple((br * 3 + r) * 9 + bc * 3 + c for r in range(3) for c in range(3))
        for br in range(3)
        for bc in range(3)
    ]
    units = tuple(rows + cols + boxes)
    peers = tuple(
        tuple(sorted({p for u in units if i in u for p in u} - {i})) for i in range(SIZE)
    )
    popcount = tuple(bin(m).count("1") for m in range(ALL_CANDIDATES + 1))
    digit_of = {1 << d: d + 1 for d in range(9)}
    return _Geometry(units, peers, popcount, digit_of)


# ---------------------------------------------------------------- solver


@dataclass
class SearchResult:
    """Outcome of :func:`search`: up to ``limit`` solutions plus effort."""

    solutions: list[np.ndarray]  # each (81,) uint8
    guesses: int  # trial assignments at branch points (0 = singles suffice)
    backtracks: int  # trial assignments that led to a contradiction
    exhausted: bool  # True if the whole tree was searched (count is exact)

    @property
    def num_solutions(self) -> int:
        return len(self.solutions)


def search(grid: Sequence[int] | np.ndarray, limit: int = 2, rng: np.random.Generator | None = None) -> SearchResult:
    """Find up to ``limit`` solutions of a digit grid (0 = blank).

    ``rng`` shuffles the branching order (used to make random full grids);
    without it the search is deterministic.
    """
    cells = _cells(grid)
    cand = [ALL_CANDIDATES] * SIZE
    queue = []
    for i, v in enumerate(cells):
        if v:
            cand[i] = 1 << (v - 1)
            queue.append(i)
    return _run(cand, queue, limit, rng)


def _cells(grid: Sequence[int] | np.ndarray) -> list[int]:
    cells = np.asarray(grid).reshape(-1).tolist()
    if len(cells) != SIZE or min(cells) < 0 or max(cells) > 9:
        raise ValueError(f"a Sudoku grid has 81 cells with values 0..9, got {len(cells)} cells")
    return [int(v) for v in cells]


def _run(cand: list[int], queue: list[int], limit: int, rng: np.random.Generator | None) -> SearchResult:
    """Propagate the initial ``queue`` then search; ``cand`` is consumed."""
    geo = _geometry()
    state = _SearchState(limit=max(1, limit), rng=rng)
    if _propagate(cand, queue, geo):
        _search(cand, state, geo)
    solutions = [_to_digits(c, geo) for c in state.solutions]
    return SearchResult(solutions, state.guesses, state.backtracks, len(solutions) < state.limit)


def solve(grid: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """One solution (81,) uint8 of a digit grid, or None if it has none."""
    result = search(grid, limit=1)
    return result.solutions[0] if result.solutions else None


def count_solutions(grid: Sequence[int] | np.ndarray, limit: int = 2) -> int:
    """Number of solutions, counting no further than ``limit``."""
    return search(grid, limit=limit).num_solutions


def hardness(grid: Sequence[int] | np.ndarray) -> int:
    """Guesses needed to solve and prove uniqueness (0 = singles suffice)."""
    return search(grid, limit=2).guesses


@dataclass
class _SearchState:
    limit: int
    rng: np.random.Generator | None
    solutions: list[list[int]] = field(default_factory=list)
    guesses: int = 0
    backtracks: int = 0


def _propagate(cand: list[int], queue: list[int], geo: _Geometry) -> bool:
    """Apply naked and hidden singles until nothing changes; False on contradiction.

    ``queue`` holds cells newly reduced to one candidate whose digit has
    not yet been removed from their peers.
    """
    peers, units = geo.peers, geo.units
    while True:
        while queue:
            i = queue.pop()
            bit = cand[i]
            for p in peers[i]:
                c = cand[p]
                if c & bit:
                    c ^= bit
                    if not c:
                        return False
                    cand[p] = c
                    if not c & (c - 1):
                        queue.append(p)
        for unit in units:
            once = twice = solved = 0
            for i in unit:
                c = cand[i]
                if c & (c - 1):
                    twice |= once & c
                    once |= c
                else:
                    solved |= c
            if (once | solved) != ALL_CANDIDATES:
                return False  # some digit has no place left in this unit
            hidden = once & ~twice & ~solved
            while hidden:
                bit = hidden & -hidden
                hidden ^= bit
                for i in unit:
                    if cand[i] & bit:
                        cand[i] = bit
                        queue.append(i)
                        break
        if not queue:
            return True


def _search(cand: list[int], state: _SearchState, geo: _Geometry) -> None:
    """Depth-first search over a propagated candidate list (MRV branching)."""
    popcount = geo.popcount
    best, best_n = -1, 10
    for i in range(SIZE):
        n = popcount[cand[i]]
        if 1 < n < best_n:
            best, best_n = i, n
            if n == 2:
                break
    if best < 0:
        state.solutions.append(cand)
        return
    mask = cand[best]
    bits = [1 << d for d in range(9) if mask >> d & 1]
    if state.rng is not None:
        state.rng.shuffle(bits)
    for bit in bits:
        state.guesses += 1
        child = cand[:]
        child[best] = bit
        if _propagate(child, [best], geo):
            _search(child, state, geo)
            if len(state.solutions) >= state.limit:
                return
        else:
            state.backtracks += 1


def _to_digits(cand: list[int], geo: _Geometry) -> np.ndarray:
    return np.array([geo.digit_of[c] for c in cand], dtype=np.uint8)  # (81,)


def only_digit(puzzle: list[int], i: int, digit: int) -> bool:
    """No solution of ``puzzle`` puts anything but ``digit`` in cell ``i`` (the generator's uniqueness test)."""
    cand = [ALL_CANDIDATES if v == 0 else 1 << (v - 1) for v in puzzle]
    cand[i] = ALL_CANDIDATES & ~(1 << (digit - 1))
    queue = [j for j, v in enumerate(puzzle) if v]
    return _run(cand, queue, 1, None).num_solutions == 0


# ---------------------------------------------------------------- grids


class PuzzleError(ValueError):
    """A puzzle or answer that cannot be used; ``reason`` is a short key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_GRID_CHARS = frozenset("0123456789.")


def parse_grid(text: str, allow_blanks: bool = True) -> np.ndarray:
    """81 characters ('.' or '0' = blank) -> digit grid (81,) uint8."""
    if len(text) != SIZE:
        raise PuzzleError("wrong_length", f"expected {SIZE} characters, got {len(text)}")
    if not _GRID_CHARS.issuperset(text):
        col, ch = next((i, c) for i, c in enumerate(text) if c not in _GRID_CHARS)
        raise PuzzleError("bad_character", f"character {ch!r} at column {col + 1}")
    codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)  # (81,)
    grid = np.where(codes == ord("."), 0, codes - ord("0")).astype(np.uint8)
    if not allow_blanks and not grid.all():
        raise PuzzleError("bad_character", "blank in a full grid")
    return grid


def check_solution(puzzle: np.ndarray, solution: np.ndarray) -> str | None:
    """None if ``solution`` is a valid full grid that keeps every given, else why not."""
    sol = np.asarray(solution).reshape(9, 9)
    digits = np.arange(1, 10)
    boxes = sol.reshape(3, 3, 3, 3).transpose(0, 2, 1, 3).reshape(9, 9)
    for name, units in (("row", sol), ("column", sol.T), ("box", boxes)):
        bad = np.flatnonzero(~(np.sort(units, axis=1) == digits).all(axis=1))
        if bad.size:
            return f"{name} {bad[0] + 1} is not a permutation of 1..9"
    given = np.asarray(puzzle).reshape(-1) != 0
    clash = np.flatnonzero(given & (np.asarray(puzzle).reshape(-1) != sol.reshape(-1)))
    if clash.size:
        return f"cell {clash[0] + 1} differs from the given digit"
    return None


def to_tokens(grid: np.ndarray) -> np.ndarray:
    """Digit grids (..., 81) -> store tokens: blank -> 1, digit d -> d + 1."""
    return (np.asarray(grid) + 1).astype(np.uint8)


def from_tokens(tokens: np.ndarray) -> np.ndarray:
    """Store tokens (..., 81) -> digit grids; pad (0) and blank (1) -> 0."""
    t = np.asarray(tokens).astype(np.int16)
    return np.where(t >= 2, t - 1, 0).astype(np.uint8)



@dataclass(frozen=True)
class SudokuPair:
    """A puzzle with its (unique) solution and where it came from."""

    puzzle: np.ndarray  # (81,) uint8 digits, 0 = blank
    solution: np.ndarray  # (81,) uint8 digits
    origin: str  # "file:line" or "generated:index"
    guesses: int | None  # solver hardness; None when the solver was not run
