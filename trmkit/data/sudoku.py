"""Sudoku: solver, generator, importers, augmentation and the dataset builder.

Grids are numpy arrays of shape (81,) in row-major order with 0 for a blank
and 1..9 for digits ("digit grids"). The store encoding adds one:
token 0 = pad (unused by Sudoku), 1 = blank ".", 2..10 = digits 1..9.
Labels are the full solution, givens included.

The solver is pure Python: 9-bit candidate masks per cell, propagation of
naked and hidden singles, and depth-first search that branches on a cell
with the fewest candidates (MRV). Its guess count is the hardness measure
used by the generator.

Departures from the TRM reference data pipeline, and why:
- Plain-text puzzle collections (no solutions) are accepted; they are
  solved and checked for uniqueness here.
- Every puzzle is checked (valid answer, exactly one solution); bad lines
  are counted and reported with file:line, never dropped silently.
- The test split is drawn from the source by ``test_fraction`` instead of
  a separate file, and is never augmented (as in the reference).
"""

from __future__ import annotations

import csv
import functools
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from trmkit.data.imports import ImportReport, split_rows
from trmkit.data.store import SplitArrays, check_output_dir, write_store

SIZE = 81
ALL_CANDIDATES = 0x1FF  # bits 0..8 = digits 1..9
VOCAB = ("<pad>", ".", "1", "2", "3", "4", "5", "6", "7", "8", "9")
PAD_ID, BLANK_ID = 0, 1

Log = Callable[[str], None]


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


def format_grid(grid: np.ndarray) -> str:
    """Digit grid -> 81 characters with '.' for blanks."""
    return "".join("." if v == 0 else str(int(v)) for v in np.asarray(grid).reshape(-1))


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


# ---------------------------------------------------------------- importers


@dataclass(frozen=True)
class SudokuPair:
    """A puzzle with its (unique) solution and where it came from."""

    puzzle: np.ndarray  # (81,) uint8 digits, 0 = blank
    solution: np.ndarray  # (81,) uint8 digits
    origin: str  # "file:line" or "generated:index"
    guesses: int | None  # solver hardness; None when the solver was not run


def check_pair(question: str, answer: str | None, origin: str, require_unique: bool = True) -> SudokuPair:
    """Parse and verify one puzzle (and its answer, if given); raise PuzzleError if unusable.

    With ``require_unique`` the solver proves exactly one solution and a
    given answer must be it. Without it, a valid given answer is trusted
    and the solver is skipped; a puzzle without an answer gets the first
    solution the solver finds.
    """
    puzzle = parse_grid(question)
    given = None if answer is None else _parse_answer(answer)
    guesses = None
    if require_unique or given is None:
        result = search(puzzle, limit=2 if require_unique else 1)
        if not result.solutions:
            raise PuzzleError("no_solution", "the puzzle has no solution")
        if result.num_solutions > 1:
            raise PuzzleError("multiple_solutions", "the puzzle has more than one solution")
        solution, guesses = result.solutions[0], result.guesses
    if given is not None:
        problem = check_solution(puzzle, given)
        if problem:
            raise PuzzleError("answer_mismatch", f"the answer does not solve the question: {problem}")
        solution = given
    return SudokuPair(puzzle, solution, origin, guesses)


def _parse_answer(answer: str) -> np.ndarray:
    try:
        return parse_grid(answer, allow_blanks=False)
    except PuzzleError as e:
        raise PuzzleError("answer_mismatch", f"answer: {e.detail}") from None


def read_text(
    path: str | Path, report: ImportReport, limit: int | None = None, require_unique: bool = True
) -> Iterator[SudokuPair]:
    """Stream a plain-text collection: one 81-character puzzle per line.

    '.' or '0' mark blanks; '#' comment lines and blank lines are ignored.
    Puzzles are solved here. Stops after ``limit`` accepted puzzles.
    """
    path = Path(path)
    with _open_source(path) as f:
        for lineno, raw in enumerate(f, start=1):
            if limit is not None and report.accepted >= limit:
                return
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pair = _checked(report, line, None, f"{path.name}:{lineno}", require_unique)
            if pair is not None:
                yield pair


def _checked(
    report: ImportReport, question: str, answer: str | None, where: str, require_unique: bool
) -> SudokuPair | None:
    """check_pair, with the outcome counted in ``report``."""
    start = time.perf_counter()
    report.lines += 1
    try:
        pair = check_pair(question, answer, where, require_unique)
    except PuzzleError as e:
        report.skip(where, e.reason, e.detail)
        pair = None
    else:
        report.accepted += 1
    report.seconds += time.perf_counter() - start
    return pair


def _open_source(path: Path) -> io.TextIOWrapper:
    if not path.is_file():
        raise FileNotFoundError(f"puzzle file not found: {path}")
    # Undecodable bytes become U+FFFD and are reported as bad characters.
    return open(path, encoding="utf-8-sig", errors="replace", newline="")


def read_csv(
    path: str | Path, report: ImportReport, limit: int | None = None, require_unique: bool = True
) -> Iterator[SudokuPair]:
    """Stream a Sudoku-Extreme style CSV (header ``source,question,answer,rating``).

    Only the ``question`` and ``answer`` columns are used; each answer must
    solve its question. Stops after ``limit`` accepted puzzles.
    """
    path = Path(path)
    with _open_source(path) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return
        columns = [h.strip().lower() for h in header]
        if "question" not in columns or "answer" not in columns:
            raise ValueError(
                f"{path.name}:1: CSV header must name 'question' and 'answer' columns "
                f"(e.g. source,question,answer,rating), got {header}"
            )
        q, a = columns.index("question"), columns.index("answer")
        for row in reader:
            if limit is not None and report.accepted >= limit:
                return
            where = f"{path.name}:{reader.line_num}"
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                report.lines += 1
                report.skip(where, "bad_row", f"expected {len(header)} fields, got {len(row)}")
                continue
            pair = _checked(report, row[q].strip(), row[a].strip(), where, require_unique)
            if pair is not None:
                yield pair


def read_puzzles(
    path: str | Path, report: ImportReport, limit: int | None = None, require_unique: bool = True
) -> Iterator[SudokuPair]:
    """Read a ``.csv`` (Sudoku-Extreme style) or a plain-text collection."""
    reader = read_csv if Path(path).suffix.lower() == ".csv" else read_text
    return reader(path, report, limit, require_unique)


# ---------------------------------------------------------------- generator


def parse_givens(spec: str | int | Sequence[int]) -> tuple[int, int]:
    """'24-26', '25', 25 or (24, 26) -> inclusive range (low, high)."""
    if isinstance(spec, str):
        parts = spec.replace(" ", "").split("-")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"givens must look like '25' or '24-26', got {spec!r}") from None
    elif isinstance(spec, (int, np.integer)):
        values = [int(spec)]
    else:
        values = [int(v) for v in spec]
    if len(values) == 1:
        values *= 2
    low, high = values if len(values) == 2 else (-1, -1)
    if not 17 <= low <= high <= SIZE:
        raise ValueError(f"givens must be one number or a range within 17..81, got {spec!r}")
    return low, high


def random_solution(rng: np.random.Generator) -> np.ndarray:
    """A random complete grid (81,) uint8: randomized search from an empty grid."""
    return search(np.zeros(SIZE, dtype=np.uint8), limit=1, rng=rng).solutions[0]


def carve(solution: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray | None:
    """Blank cells of ``solution`` in random order while the solution stays unique.

    Returns a puzzle with exactly ``target`` givens, or None if the cells
    left can no longer be removed before reaching it.
    """
    cells = [int(v) for v in solution]
    puzzle = cells[:]
    givens = SIZE
    for i in rng.permutation(SIZE).tolist():
        if givens == target:
            break
        trial = puzzle[:]
        trial[i] = 0
        if _unique_with_blank(trial, cells, i):
            puzzle, givens = trial, givens - 1
    return np.array(puzzle, dtype=np.uint8) if givens == target else None


def _unique_with_blank(puzzle: list[int], solution: list[int], i: int) -> bool:
    """No solution of ``puzzle`` puts anything but ``solution[i]`` in cell ``i``."""
    cand = [ALL_CANDIDATES if v == 0 else 1 << (v - 1) for v in puzzle]
    cand[i] = ALL_CANDIDATES & ~(1 << (solution[i] - 1))
    queue = [j for j, v in enumerate(puzzle) if v]
    return _run(cand, queue, 1, None).num_solutions == 0


def generate_puzzle(
    rng: np.random.Generator,
    givens: tuple[int, int] = (24, 26),
    min_guesses: int = 0,
    max_guesses: int | None = None,
    max_attempts: int = 200,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One unique puzzle with givens in range and hardness (guesses) in range.

    Returns (puzzle, solution, guesses).
    """
    low, high = givens
    for _ in range(max_attempts):
        solution = random_solution(rng)
        puzzle = carve(solution, int(rng.integers(low, high + 1)), rng)
        if puzzle is None:
            continue
        guesses = search(puzzle, limit=2).guesses
        if guesses >= min_guesses and (max_guesses is None or guesses <= max_guesses):
            return puzzle, solution, guesses
    raise RuntimeError(
        f"no puzzle with {low}-{high} givens and {min_guesses}..{max_guesses} guesses in "
        f"{max_attempts} attempts; widen the givens range (random removal rarely gets below "
        "about 22 givens) or the hardness range"
    )


def generate_pairs(
    count: int,
    givens: str | int | Sequence[int] = "24-26",
    seed: int = 0,
    min_guesses: int = 0,
    max_guesses: int | None = None,
    report: ImportReport | None = None,
) -> Iterator[SudokuPair]:
    """``count`` generated puzzles; puzzle k depends only on (seed, k)."""
    bounds = parse_givens(givens)
    for k in range(count):
        start = time.perf_counter()
        puzzle, solution, guesses = generate_puzzle(
            np.random.default_rng([seed, 0, k]), bounds, min_guesses, max_guesses
        )
        if report is not None:
            report.lines += 1
            report.accepted += 1
            report.seconds += time.perf_counter() - start
        yield SudokuPair(puzzle, solution, f"generated:{k}", guesses)


# ---------------------------------------------------------------- augmentation


def random_transforms(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random validity-preserving Sudoku symmetries.

    Returns (cells (count, 81), digits (count, 10)): a transformed grid is
    ``digits[grid[cells]]``. Cells combine a band shuffle, row shuffles
    within bands, a stack shuffle, column shuffles within stacks and a
    transpose with probability 1/2; digits relabel 1..9 and keep 0 (blank).
    """
    rows = _line_orders(count, rng)  # (count, 9)
    cols = _line_orders(count, rng)  # (count, 9)
    cells = rows[:, :, None] * 9 + cols[:, None, :]  # (count, 9, 9)
    flip = rng.random(count) < 0.5  # (count,)
    cells = np.where(flip[:, None, None], cells.transpose(0, 2, 1), cells)
    relabel = np.argsort(rng.random((count, 9)), axis=1) + 1  # (count, 9) permutations of 1..9
    digits = np.concatenate([np.zeros((count, 1), dtype=relabel.dtype), relabel], axis=1)  # (count, 10)
    return cells.reshape(count, SIZE), digits.astype(np.uint8)


def _line_orders(count: int, rng: np.random.Generator) -> np.ndarray:
    """Row (or column) orders that shuffle bands and lines within each band."""
    bands = np.argsort(rng.random((count, 3)), axis=1)  # (count, 3)
    within = np.argsort(rng.random((count, 3, 3)), axis=2)  # (count, 3, 3)
    return (bands[:, :, None] * 3 + within).reshape(count, 9)  # (count, 9)


def apply_transforms(grid: np.ndarray, cells: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """One digit grid (81,) under each transform -> (count, 81) uint8."""
    moved = np.asarray(grid)[cells]  # (count, 81)
    return np.take_along_axis(digits, moved.astype(np.intp), axis=1).astype(np.uint8)


def augment(
    puzzle: np.ndarray, solution: np.ndarray, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` augmented copies of a pair, the same symmetry on puzzle and solution.

    Returns (puzzles (count, 81), solutions (count, 81)).
    """
    cells, digits = random_transforms(count, rng)
    return apply_transforms(puzzle, cells, digits), apply_transforms(solution, cells, digits)


# ---------------------------------------------------------------- builder


@dataclass
class BuildReport:
    """What :func:`build_sudoku` read, skipped and wrote."""

    out_dir: Path
    source: str
    read: ImportReport
    train_groups: int
    train_examples: int
    test_groups: int
    test_examples: int
    seconds: float

    def summary_lines(self) -> list[str]:
        return [
            *self.read.summary_lines(),
            f"wrote {self.out_dir}: train {self.train_examples} examples in {self.train_groups} groups, "
            f"test {self.test_examples} examples ({self.seconds:.1f} s)",
        ]

    def format(self) -> str:
        """The summary as one string (what build_sudoku already sent to ``log``)."""
        return "\n".join(self.summary_lines())


def build_sudoku(
    source: str | Path,
    out_dir: str | Path,
    *,
    test_fraction: float = 0.1,
    aug: int = 0,
    limit: int | None = None,
    num_generate: int = 1000,
    givens: str | int | Sequence[int] = "24-26",
    min_guesses: int = 0,
    max_guesses: int | None = None,
    seed: int = 0,
    require_unique: bool = True,
    log: Log = print,
) -> BuildReport:
    """Build a Sudoku store at ``out_dir`` (``train/`` and ``test/``).

    ``source`` is ``"generate"`` or a puzzle file (``.csv`` Sudoku-Extreme
    style, anything else plain text). ``limit`` caps the puzzles kept. A
    random ``test_fraction`` of them forms the test split; each training
    puzzle becomes a group with ``aug`` extra augmented copies.
    """
    start = time.perf_counter()  # the source "generate" means generate; any other string is a path
    _check_build_args(test_fraction, aug, limit, num_generate, seed)
    check_output_dir(out_dir)
    report, pairs = _open_source_pairs(
        source, limit, num_generate, givens, seed, min_guesses, max_guesses, require_unique
    )
    puzzles, solutions = _collect(pairs, report, log)  # (n, 81) each
    for line in report.summary_lines():
        log(line)
    if len(puzzles) == 0:
        hint = (" (every skipped puzzle has several solutions: pass --allow-multiple to label each "
                "with the first solution found)" if set(report.skipped_by_reason) == {"multiple_solutions"} else "")
        raise ValueError(f"{report.source}: no usable puzzles ({report.skipped} skipped); nothing written{hint}")
    test_rows, train_rows = split_rows(len(puzzles), test_fraction, seed)
    splits = {"test": _split_arrays(puzzles[test_rows], solutions[test_rows], 0, seed)}
    if len(train_rows):  # test_fraction 1: a store for evaluation only
        splits["train"] = _split_arrays(puzzles[train_rows], solutions[train_rows], aug, seed)
    settings = {
        "source": report.source, "test_fraction": test_fraction, "aug": aug, "limit": limit,
        "num_generate": num_generate if str(source) == "generate" else None,
        "givens": list(parse_givens(givens)) if str(source) == "generate" else None,
        "min_guesses": min_guesses, "max_guesses": max_guesses, "seed": seed, "require_unique": require_unique,
    }
    write_store(out_dir, splits, _store_meta(report, settings, splits))
    built = BuildReport(
        Path(out_dir), report.source, report, len(train_rows), len(splits["train"].inputs) if len(train_rows) else 0,
        len(test_rows), len(splits["test"].inputs), time.perf_counter() - start,
    )
    log(built.summary_lines()[-1])
    return built


def _check_build_args(test_fraction: float, aug: int, limit: int | None, num_generate: int, seed: int) -> None:
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1] (1: every puzzle in test, for evaluation only), "
                         f"got {test_fraction}")
    if aug < 0:
        raise ValueError(f"aug must be >= 0, got {aug}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 (or None for no limit), got {limit}")
    if num_generate < 1:
        raise ValueError(f"num_generate must be >= 1, got {num_generate}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")


def _open_source_pairs(
    source: str | Path, limit: int | None, num_generate: int, givens: str | int | Sequence[int],
    seed: int, min_guesses: int, max_guesses: int | None, require_unique: bool,
) -> tuple[ImportReport, Iterator[SudokuPair]]:
    """The report to fill and the (lazy) stream of pairs for a build."""
    if str(source) == "generate":
        count = num_generate if limit is None else min(num_generate, limit)
        report = ImportReport(source="generate", unit="puzzles")
        return report, generate_pairs(count, givens, seed, min_guesses, max_guesses, report)
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"puzzle file not found: {path} (give a file path or 'generate')")
    report = ImportReport(source=str(path), unit="puzzles")
    return report, read_puzzles(path, report, limit, require_unique)


def _collect(
    pairs: Iterator[SudokuPair], report: ImportReport, log: Log, every_s: float = 10.0
) -> tuple[np.ndarray, np.ndarray]:
    """Drain the pair stream into (n, 81) puzzle and solution arrays, logging progress."""
    puzzles: list[np.ndarray] = []
    solutions: list[np.ndarray] = []
    next_log = time.perf_counter() + every_s
    for pair in pairs:
        puzzles.append(pair.puzzle)
        solutions.append(pair.solution)
        if time.perf_counter() >= next_log:
            log(f"  {report.accepted} puzzles kept, {report.skipped} skipped so far ...")
            next_log += every_s
    if not puzzles:
        empty = np.zeros((0, SIZE), dtype=np.uint8)
        return empty, empty.copy()
    return np.stack(puzzles), np.stack(solutions)


def _split_arrays(puzzles: np.ndarray, solutions: np.ndarray, aug: int, seed: int) -> SplitArrays:
    """Each puzzle is a group of itself plus ``aug`` augmented copies (one example each)."""
    n, per = len(puzzles), aug + 1
    inputs = np.empty((n * per, SIZE), dtype=np.uint8)  # (P, 81) digits
    labels = np.empty((n * per, SIZE), dtype=np.uint8)  # (P, 81) digits
    rng = np.random.default_rng([seed, 2])
    for g in range(n):
        inputs[g * per], labels[g * per] = puzzles[g], solutions[g]
        if aug:
            block = slice(g * per + 1, (g + 1) * per)
            inputs[block], labels[block] = augment(puzzles[g], solutions[g], aug, rng)
    return SplitArrays(
        inputs=to_tokens(inputs),
        labels=to_tokens(labels),
        puzzle_identifiers=np.zeros(n * per, dtype=np.uint8),
        puzzle_indices=np.arange(n * per + 1),
        group_indices=np.arange(0, n * per + 1, per),
    )


def _store_meta(report: ImportReport, settings: dict[str, Any], splits: dict[str, SplitArrays]) -> dict[str, Any]:
    counts = {"read": report.lines, "accepted": report.accepted}
    for name, arrays in splits.items():
        counts[f"{name}_groups"] = len(arrays.group_indices) - 1
        counts[f"{name}_examples"] = len(arrays.inputs)
    return {
        "task": "sudoku",
        "vocab": list(VOCAB),
        "pad_id": PAD_ID,
        "ignore_label_id": PAD_ID,
        "blank_id": BLANK_ID,
        "num_puzzle_identifiers": 1,
        "source": report.source,
        "build": {
            **settings,
            "counts": counts,
            "skipped": report.skipped,
            "skipped_by_reason": dict(report.skipped_by_reason),
            "skipped_examples": list(report.messages),
        },
    }
