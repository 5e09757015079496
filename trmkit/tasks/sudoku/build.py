"""Reading Sudoku collections and building a Sudoku store (``trmkit data sudoku``).

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
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from trmkit.data.curriculum import DIFFICULTY_FILE, difficulty_sidecar
from trmkit.data.imports import ImportReport, split_rows
from trmkit.data.store import SplitArrays, check_new_store, write_store
from trmkit.tasks.sudoku.generate import augment, generate_pairs, parse_givens
from trmkit.tasks.sudoku.solver import (BLANK_ID, PAD_ID, SIZE, VOCAB, PuzzleError, SudokuPair, check_solution,
                                        hardness, parse_grid, search, to_tokens)

Log = Callable[[str], None]
RATING = "solver guesses"  # what a rating counts (solver.hardness)
RATING_BANDS = (("0", 0, 1), ("1-9", 1, 10), ("10-99", 10, 100), ("100+", 100, 2**62))


# ---------------------------------------------------------------- importers


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
        solution = result.solutions[0]
        guesses = result.guesses if require_unique else None  # the rating counts a search that proves uniqueness
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
    source: str | Path | Sequence[str | Path], out_dir: str | Path, *,
    test_fraction: float = 0.1, aug: int = 0, limit: int | None = None,
    num_generate: int = 1000, givens: str | int | Sequence[int] = "24-26",
    min_guesses: int = 0, max_guesses: int | None = None, seed: int = 0, require_unique: bool = True,
    min_rating: int = 0, max_rating: int | None = None, test_hardest: int = 0, force: bool = False,
    log: Log = print,
) -> BuildReport:
    """Build a Sudoku store at ``out_dir`` (``train/`` and ``test/``).

    ``source`` is ``"generate"`` or a puzzle file (``.csv`` Sudoku-Extreme style, anything else
    plain text), or a list of them, mixed (``_read_sources``). ``limit`` caps the puzzles kept per
    source. Every puzzle is rated (solver.hardness); those rated outside [min_rating, max_rating] are
    left out (counted). The ``test_hardest`` highest-rated puzzles, else a random ``test_fraction``,
    form the test split; each training puzzle becomes a group with ``aug`` augmented copies. Ratings
    are printed and kept per split. A store already at ``out_dir`` is replaced only with ``force``.
    """
    start = time.perf_counter()  # the source "generate" means generate; any other string is a path
    _check_build_args(test_fraction, aug, limit, num_generate, seed)
    check_new_store(out_dir, force)
    sources = [str(source)] if isinstance(source, (str, Path)) else [str(s) for s in source]
    report, (puzzles, solutions, ratings), mixed = _read_sources(
        sources, limit, (num_generate, givens, seed, min_guesses, max_guesses), require_unique, log)
    puzzles, solutions, ratings = _rating_filter(puzzles, solutions, ratings, min_rating, max_rating, log)
    splits, rated = _rated_splits(puzzles, solutions, ratings, test_fraction, test_hardest, aug, seed, log)
    generated = "generate" in sources
    settings = {
        "source": report.source, **({"sources": mixed} if mixed else {}),
        "test_fraction": test_fraction, "aug": aug, "limit": limit,
        "num_generate": num_generate if generated else None,
        "givens": list(parse_givens(givens)) if generated else None,
        "min_guesses": min_guesses, "max_guesses": max_guesses, "seed": seed, "require_unique": require_unique,
        "min_rating": min_rating, "max_rating": max_rating, "test_hardest": test_hardest,
        "ratings": {name: rating_summary(rated[name]) for name in splits},
    }
    extras = {name: {DIFFICULTY_FILE: difficulty_sidecar(rated[name], RATING)} for name in splits}
    write_store(out_dir, splits, _store_meta(report, settings, splits), extras, force=force)
    built = BuildReport(Path(out_dir), report.source, report, len(rated["train"]),
                        len(splits["train"].inputs) if "train" in splits else 0, len(rated["test"]),
                        len(splits["test"].inputs), time.perf_counter() - start)
    log(built.summary_lines()[-1])
    return built


def _rated_splits(puzzles: np.ndarray, solutions: np.ndarray, ratings: np.ndarray, test_fraction: float,
                  test_hardest: int, aug: int, seed: int, log: Log) -> tuple[dict[str, SplitArrays], dict]:
    """The split arrays (train only when it has puzzles: test_fraction 1 is a store for evaluation)
    and each split's ratings (one per group), printed."""
    test_rows, train_rows = _split_by(ratings, test_fraction, test_hardest, seed)
    splits = {"test": _split_arrays(puzzles[test_rows], solutions[test_rows], 0, seed)}
    if len(train_rows):
        splits["train"] = _split_arrays(puzzles[train_rows], solutions[train_rows], aug, seed)
    rated = {"test": ratings[test_rows], "train": ratings[train_rows]}
    for name in splits:
        log(f"rating ({RATING}) of the {name} split: {rating_summary(rated[name])}")
    return splits, rated


def rating_summary(ratings: np.ndarray) -> str:
    """"median 2, 90th percentile 24, max 2815; 0: 47.4%, 1-9: 24.8%, ..." for a split's ratings."""
    if len(ratings) == 0:
        return "no puzzles"
    r = np.asarray(ratings)
    bands = ", ".join(f"{name}: {100 * np.mean((r >= lo) & (r < hi)):.1f}%" for name, lo, hi in RATING_BANDS)
    return (f"median {np.median(r):.0f}, 90th percentile {np.percentile(r, 90):.0f}, max {r.max()}; {bands} "
            f"of {len(r):,}")


def rating_band(rating: int) -> str:
    return next(name for name, lo, hi in RATING_BANDS if lo <= rating < hi)


def _rating_filter(puzzles: np.ndarray, solutions: np.ndarray, ratings: np.ndarray, low: int, high: int | None,
                   log: Log) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Only the puzzles rated in [low, high]; the others are counted and the count printed."""
    keep = (ratings >= low) & (ratings <= (high if high is not None else np.iinfo(np.int64).max))
    if keep.all():
        return puzzles, solutions, ratings
    if not keep.any():
        raise ValueError(f"no puzzle is rated in [{low}, {high if high is not None else 'inf'}] "
                         f"({RATING}; these are rated {rating_summary(ratings)}); nothing written")
    log(f"rating filter: kept {int(keep.sum()):,} of {len(keep):,} puzzles rated in "
        f"[{low}, {high if high is not None else 'inf'}]; {int((~keep).sum()):,} left out")
    return puzzles[keep], solutions[keep], ratings[keep]


def _split_by(ratings: np.ndarray, test_fraction: float, test_hardest: int, seed: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """(test rows, train rows): the `test_hardest` highest-rated (ties: file order), else a random fraction."""
    if not test_hardest:
        return split_rows(len(ratings), test_fraction, seed)
    if test_hardest >= len(ratings):
        raise ValueError(f"--test-hardest {test_hardest} would leave no training puzzle ({len(ratings)} kept)")
    order = np.argsort(-ratings, kind="stable")
    return np.sort(order[:test_hardest]), np.sort(order[test_hardest:])


def _refuse_empty(report: ImportReport) -> None:
    """No puzzle was kept: say why, and how to keep puzzles with several solutions."""
    hint = (" (every skipped puzzle has several solutions: pass --allow-multiple to label each "
            "with the first solution found)" if set(report.skipped_by_reason) == {"multiple_solutions"} else "")
    raise ValueError(f"{report.source}: no usable puzzles ({report.skipped} skipped); nothing written{hint}")


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


def _read_sources(sources: list[str], limit: int | None, generator: tuple, require_unique: bool, log: Log
                  ) -> tuple[ImportReport, tuple[np.ndarray, np.ndarray, np.ndarray], list[dict[str, Any]]]:
    """Each source read and reported on its own (`limit` puzzles at most from each), then concatenated in
    the order given; a puzzle an earlier source already gave is dropped and counted. Returns the report
    (one source: its own; several: their sum), the (puzzles, solutions, ratings) arrays, and per source
    what it added (empty for one source). A source with no usable puzzle is refused by name."""
    repeated = sorted({s for s in sources if sources.count(s) > 1})
    if repeated:
        raise ValueError(f"--source {repeated[0]} is given twice; give each source once")
    arrays, reports, mixed, seen = [], [], [], set()
    for name in sources:
        report, pairs = _open_source_pairs(name, limit, *generator, require_unique)
        puzzles, solutions, ratings = _collect(pairs, report, log)  # (n, 81), (n, 81), (n,)
        for line in report.summary_lines():
            log(line)
        if len(puzzles) == 0:
            _refuse_empty(report)
        keys = [row.tobytes() for row in puzzles]
        new = np.array([k not in seen for k in keys], dtype=bool)
        seen.update(keys)
        arrays.append((puzzles[new], solutions[new], ratings[new]))
        reports.append(report)
        mixed.append({"source": name, "kept": int(new.sum()), "duplicates_dropped": int((~new).sum()),
                      "ratings": rating_summary(ratings[new]) if new.any() else "no puzzles"})
    if len(sources) == 1:
        return reports[0], arrays[0], []
    for m in mixed:
        log(f"mix: {m['kept']:,} puzzles from {m['source']} ({m['duplicates_dropped']:,} already read from an "
            f"earlier source, dropped); rating ({RATING}): {m['ratings']}")
    return _merged(reports, mixed), tuple(np.concatenate(a) for a in zip(*arrays)), mixed


def _merged(reports: list[ImportReport], mixed: list[dict[str, Any]]) -> ImportReport:
    """Several sources' reports as one: counts summed, a puzzle read twice counted as a skip."""
    out = ImportReport(source=" + ".join(r.source for r in reports), unit="puzzles")
    for r in reports:
        out.lines += r.lines
        out.messages += r.messages
        for reason, n in r.skipped_by_reason.items():
            out.skipped_by_reason[reason] = out.skipped_by_reason.get(reason, 0) + n
    out.accepted = sum(m["kept"] for m in mixed)
    dropped = sum(m["duplicates_dropped"] for m in mixed)
    if dropped:
        out.skipped_by_reason["duplicate_of_an_earlier_source"] = dropped
    return out


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drain the pair stream into (n, 81) puzzle and solution arrays and (n,) ratings, logging progress."""
    puzzles: list[np.ndarray] = []
    solutions: list[np.ndarray] = []
    ratings: list[int] = []
    next_log = time.perf_counter() + every_s
    for pair in pairs:
        puzzles.append(pair.puzzle)
        solutions.append(pair.solution)
        ratings.append(pair.guesses if pair.guesses is not None else hardness(pair.puzzle))
        if time.perf_counter() >= next_log:
            log(f"  {report.accepted} puzzles kept, {report.skipped} skipped so far ...")
            next_log += every_s
    if not puzzles:
        empty = np.zeros((0, SIZE), dtype=np.uint8)
        return empty, empty.copy(), np.zeros(0, dtype=np.int64)
    return np.stack(puzzles), np.stack(solutions), np.asarray(ratings, dtype=np.int64)


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
