"""Tests for trmkit.tasks.sudoku: solver, generator, augmentation, importers, builder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trmkit.data.imports import ImportReport
from trmkit.data.store import open_store
from trmkit.tasks.sudoku.build import build_sudoku, read_csv, read_text
from trmkit.tasks.sudoku.generate import augment, generate_pairs, parse_givens
from trmkit.tasks.sudoku.solver import count_solutions, from_tokens, parse_grid, search, solve

# A well-known puzzle (singles suffice) and its solution.
EASY = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79"
EASY_SOLUTION = "534678912672195348198342567859761423426853791713924856961537284287419635345286179"
MANY = EASY_SOLUTION[:9] + "." * 72  # first row only: many solutions
CONFLICT = "11" + "." * 79  # two 1s in one row: no solution


def is_valid_grid(grid: np.ndarray) -> bool:
    """Independent of the library: every row, column and box holds 1..9."""
    g = np.asarray(grid).reshape(9, 9)
    units = [g[i] for i in range(9)] + [g[:, i] for i in range(9)]
    units += [g[r : r + 3, c : c + 3].ravel() for r in (0, 3, 6) for c in (0, 3, 6)]
    return all(sorted(u.tolist()) == list(range(1, 10)) for u in units)


def assert_solves(puzzle: np.ndarray, solution: np.ndarray) -> None:
    assert is_valid_grid(solution)
    given = puzzle != 0
    np.testing.assert_array_equal(puzzle[given], solution[given])


@pytest.fixture(scope="module")
def data_dir() -> Path:
    path = (Path(__file__).parents[2] / ".." / "shared" / "data" / "sudoku").resolve()
    if not path.is_dir():
        pytest.fail(f"Sudoku data not found: looked for {path} (repo root/../shared/data/sudoku)")
    return path


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- solver


def test_solver_on_known_puzzle() -> None:
    puzzle = parse_grid(EASY)
    np.testing.assert_array_equal(solve(puzzle), parse_grid(EASY_SOLUTION))
    result = search(puzzle)
    assert (result.num_solutions, result.guesses, result.exhausted) == (1, 0, True)


def test_count_solutions_detects_none_and_several() -> None:
    assert count_solutions(parse_grid(EASY)) == 1
    assert count_solutions(parse_grid(MANY)) == 2
    assert count_solutions(parse_grid(MANY), limit=7) == 7
    assert count_solutions(np.zeros(81, dtype=np.uint8)) == 2
    assert count_solutions(parse_grid(CONFLICT)) == 0
    assert solve(parse_grid(CONFLICT)) is None


def test_solver_on_17_clue_puzzles(data_dir: Path) -> None:
    report = ImportReport(source="17")
    pairs = list(read_text(data_dir / "tdoku_17_clue.txt", report, limit=5))
    assert len(pairs) == 5 and report.lines == 5
    for pair in pairs:
        assert int((pair.puzzle > 0).sum()) == 17
        assert_solves(pair.puzzle, pair.solution)
        assert pair.guesses is not None and pair.guesses >= 0


# ---------------------------------------------------------------- generator


def test_generated_puzzles_are_unique_with_requested_givens() -> None:
    pairs = list(generate_pairs(6, givens="24-26", seed=1))
    for pair in pairs:
        assert 24 <= int((pair.puzzle > 0).sum()) <= 26
        assert count_solutions(pair.puzzle) == 1
        assert_solves(pair.puzzle, pair.solution)
    again = list(generate_pairs(6, givens="24-26", seed=1))
    assert all(np.array_equal(a.puzzle, b.puzzle) for a, b in zip(pairs, again))
    exact = list(generate_pairs(2, givens=30, seed=2))
    assert [int((p.puzzle > 0).sum()) for p in exact] == [30, 30]


def test_generator_hardness_filter() -> None:
    for pair in generate_pairs(3, givens="24-26", seed=3, min_guesses=4):
        assert pair.guesses is not None and pair.guesses >= 4
        assert search(pair.puzzle).guesses == pair.guesses
    for pair in generate_pairs(3, givens="30", seed=3, max_guesses=0):
        assert pair.guesses == 0


def test_parse_givens() -> None:
    assert parse_givens("24-26") == (24, 26)
    assert parse_givens("25") == (25, 25)
    assert parse_givens(30) == (30, 30)
    for bad in ("26-24", "10", "a-b", "1-2-3"):
        with pytest.raises(ValueError, match="givens"):
            parse_givens(bad)


# ---------------------------------------------------------------- augmentation


def test_augmented_pairs_stay_valid() -> None:
    puzzle, solution = parse_grid(EASY), parse_grid(EASY_SOLUTION)
    puzzles, solutions = augment(puzzle, solution, 40, np.random.default_rng(0))
    assert puzzles.shape == solutions.shape == (40, 81) and puzzles.dtype == np.uint8
    assert len({p.tobytes() for p in puzzles}) == 40  # all different
    for p, s in zip(puzzles, solutions):
        assert_solves(p, s)
        assert int((p > 0).sum()) == int((puzzle > 0).sum())
        np.testing.assert_array_equal(solve(p), s)  # the label is the puzzle's (unique) solution


# ---------------------------------------------------------------- importers


def test_text_import_reports_bad_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bad.txt", [
        "# a comment",
        EASY,
        "",
        EASY[:80],  # line 4
        EASY[:40] + "x" + EASY[41:],  # line 5
        CONFLICT,  # line 6
        MANY,  # line 7
        EASY.replace(".", "0"),  # line 8: '0' blanks are fine
    ])
    report = ImportReport(source=str(path))
    pairs = list(read_text(path, report))
    assert [p.origin for p in pairs] == ["bad.txt:2", "bad.txt:8"]
    assert (report.lines, report.accepted, report.skipped) == (6, 2, 4)
    assert report.skipped_by_reason == {
        "wrong_length": 1, "bad_character": 1, "no_solution": 1, "multiple_solutions": 1,
    }
    assert report.messages == [
        "bad.txt:4: wrong_length: expected 81 characters, got 80",
        "bad.txt:5: bad_character: character 'x' at column 41",
        "bad.txt:6: no_solution: the puzzle has no solution",
        "bad.txt:7: multiple_solutions: the puzzle has more than one solution",
    ]


def test_csv_import_reports_bad_rows(tmp_path: Path) -> None:
    swapped = EASY_SOLUTION.translate(str.maketrans("12", "21"))  # valid grid, wrong for EASY
    path = write_lines(tmp_path / "extreme.csv", [
        "source,question,answer,rating",
        f"a,{EASY},{EASY_SOLUTION},0",
        f"b,{EASY[:79]},{EASY_SOLUTION},1",  # line 3
        f"c,{EASY[:80]}?,{EASY_SOLUTION},1",  # line 4
        f"d,{CONFLICT},{EASY_SOLUTION},1",  # line 5
        f"e,{MANY},{EASY_SOLUTION},1",  # line 6
        f"f,{EASY},{swapped},1",  # line 7
        f"g,{EASY}",  # line 8
        f"h,{EASY},{EASY_SOLUTION},2",
    ])
    report = ImportReport(source=str(path))
    pairs = list(read_csv(path, report))
    assert [p.origin for p in pairs] == ["extreme.csv:2", "extreme.csv:9"]
    np.testing.assert_array_equal(pairs[0].solution, parse_grid(EASY_SOLUTION))
    assert report.skipped_by_reason == {
        "wrong_length": 1, "bad_character": 1, "no_solution": 1,
        "multiple_solutions": 1, "answer_mismatch": 1, "bad_row": 1,
    }
    assert [m.split(": ")[0] for m in report.messages] == [f"extreme.csv:{i}" for i in range(3, 9)]
    assert "differs from the given digit" in report.messages[4]


def test_csv_without_solver_trusts_valid_answers(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "x.csv", ["source,question,answer,rating", f"a,{MANY},{EASY_SOLUTION},0"])
    report = ImportReport(source=str(path))
    pairs = list(read_csv(path, report, require_unique=False))
    assert len(pairs) == 1 and pairs[0].guesses is None
    write_lines(path, ["id,puzzle,solution", f"a,{EASY},{EASY_SOLUTION}"])
    with pytest.raises(ValueError, match="x.csv:1: CSV header"):
        list(read_csv(path, ImportReport(source=str(path))))


def test_limit_stops_reading(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.txt", [EASY, EASY, "garbage"])
    report = ImportReport(source=str(path))
    assert len(list(read_text(path, report, limit=2))) == 2
    assert (report.lines, report.skipped) == (2, 0)


def test_real_collections_import(data_dir: Path, tmp_path: Path) -> None:
    serg = data_dir / "tdoku_serg_benchmark.txt"
    relaxed = ImportReport(source=str(serg))
    pairs = list(read_text(serg, relaxed, limit=3, require_unique=False))
    assert len(pairs) == 3 and relaxed.lines == 3
    for pair in pairs:
        assert_solves(pair.puzzle, pair.solution)
    # This benchmark's puzzles have many solutions each; strict import rejects them.
    head = [line for line in serg.read_text().splitlines() if line and not line.startswith("#")][:4]
    strict = ImportReport(source="head")
    assert list(read_text(write_lines(tmp_path / "head.txt", head), strict)) == []
    assert strict.skipped_by_reason == {"multiple_solutions": 4}


# ---------------------------------------------------------------- builder


def test_build_generated_store(tmp_path: Path) -> None:
    logs: list[str] = []
    out = tmp_path / "sudoku"
    report = build_sudoku("generate", out, num_generate=8, aug=3, test_fraction=0.25, seed=5, log=logs.append)
    assert (report.train_groups, report.train_examples) == (6, 24)
    assert (report.test_groups, report.test_examples) == (2, 2)
    assert any("wrote" in line for line in logs)
    assert report.format().splitlines()[-1] == logs[-1]
    splits = open_store(out)
    train, test = splits["train"], splits["test"]
    assert train.inputs.dtype == np.uint8 and train.meta.vocab_size == 11
    assert train.meta.num_puzzle_identifiers == 1 and not train.puzzle_identifiers.any()
    assert train.meta.build["counts"]["train_examples"] == 24 and train.meta.build["aug"] == 3
    np.testing.assert_array_equal(train.group_indices, [0, 4, 8, 12, 16, 20, 24])
    for split in (train, test):
        assert split.inputs.min() >= 1 and split.labels.min() >= 2  # no pad; labels have no blanks
        for tokens, label in zip(split.inputs, split.labels):
            puzzle, solution = from_tokens(tokens), from_tokens(label)
            assert_solves(puzzle, solution)
            assert count_solutions(puzzle) == 1
    decoded = "".join(train.meta.decode(train.inputs[0]))
    assert len(decoded) == 81 and set(decoded) <= set(".123456789")
    again = tmp_path / "again"
    build_sudoku("generate", again, num_generate=8, aug=3, test_fraction=0.25, seed=5, log=logs.append)
    np.testing.assert_array_equal(open_store(again)["train"].inputs, train.inputs)


def test_build_from_file_reports_skips(tmp_path: Path, data_dir: Path) -> None:
    logs: list[str] = []
    report = build_sudoku(data_dir / "tdoku_17_clue.txt", tmp_path / "s17", limit=10, log=logs.append)
    assert (report.read.accepted, report.train_examples, report.test_examples) == (10, 9, 1)
    bad = write_lines(tmp_path / "mixed.txt", [EASY, CONFLICT, EASY])
    report = build_sudoku(bad, tmp_path / "mixed", test_fraction=0.5, log=logs.append)
    assert report.read.skipped_by_reason == {"no_solution": 1}
    assert any("mixed.txt:2: no_solution" in line for line in logs)
    meta = open_store(tmp_path / "mixed")["train"].meta
    assert meta.build["skipped"] == 1 and meta.build["skipped_by_reason"] == {"no_solution": 1}
    with pytest.raises(ValueError, match="no usable puzzles"):
        build_sudoku(write_lines(tmp_path / "none.txt", [CONFLICT]), tmp_path / "none", log=logs.append)
    assert not (tmp_path / "none").exists()
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        build_sudoku(tmp_path / "nope.txt", tmp_path / "x", log=logs.append)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a trmkit store"):  # refused before any solving
        build_sudoku("generate", busy, num_generate=5, log=logs.append)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]


# ---------------------------------------------------------------- ratings

# Arto Inkala's 2012 puzzle, published as the "world's hardest": unique, and no singles-only solve.
INKALA = "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4.."


def test_the_rating_orders_easy_and_hard_puzzles() -> None:
    from trmkit.tasks.sudoku.solver import hardness

    easy, hard = hardness(parse_grid(EASY)), hardness(parse_grid(INKALA))
    assert easy == 0 and hard >= 10, (easy, hard)


def test_build_rates_filters_and_holds_out_the_hardest(tmp_path: Path) -> None:
    import json

    from trmkit.data.curriculum import read_difficulty
    from trmkit.tasks.sudoku.solver import hardness

    src = write_lines(tmp_path / "p.txt", [EASY, INKALA, MANY, EASY.replace("53", "35", 1)] + [EASY] * 3)
    logs: list[str] = []
    build_sudoku(src, tmp_path / "s", test_hardest=1, aug=1, log=logs.append)
    splits = open_store(tmp_path / "s")
    test_puzzle = from_tokens(np.asarray(splits["test"].inputs))[0]
    np.testing.assert_array_equal(test_puzzle, parse_grid(INKALA))  # the hardest is held out
    ratings, measure = read_difficulty(splits["train"])
    assert measure == "solver guesses" and len(ratings) == splits["train"].num_groups == 4
    assert read_difficulty(splits["test"])[0].tolist() == [hardness(parse_grid(INKALA))]
    assert any(line.startswith("rating (solver guesses) of the test split: median") for line in logs)
    built = json.loads((tmp_path / "s" / "test" / "meta.json").read_text())["build"]
    assert built["test_hardest"] == 1 and "100.0%" in built["ratings"]["test"]
    # a filter leaves puzzles out, counted; nothing in range is an error, and nothing is written
    logs.clear()
    build_sudoku(src, tmp_path / "f", max_rating=0, test_fraction=0.5, log=logs.append)
    assert any("rating filter: kept 4 of 5" in line for line in logs), logs
    with pytest.raises(ValueError, match="no puzzle is rated in"):
        build_sudoku(src, tmp_path / "none", min_rating=10**6, log=logs.append)
    assert not (tmp_path / "none").exists()


def test_sudoku_scorer_splits_exact_accuracy_by_band(tmp_path: Path) -> None:
    from trmkit.data.stream import eval_batches
    from trmkit.tasks.sudoku.score import sudoku_scorer

    src = write_lines(tmp_path / "p.txt", [EASY, INKALA])
    build_sudoku(src, tmp_path / "s", test_fraction=1.0, log=lambda m: None)
    split = open_store(tmp_path / "s")["test"]
    scorer = sudoku_scorer(split)
    batch = next(eval_batches(split, 2))
    preds = np.asarray(batch.labels).copy()
    hard_row = int(np.flatnonzero((from_tokens(np.asarray(batch.inputs)) == parse_grid(INKALA)).all(1))[0])
    preds[hard_row, 0] = 1 + preds[hard_row, 0] % 9  # one wrong cell in the hard puzzle
    scorer.add(batch, preds, np.zeros(2))
    result = scorer.result()
    assert result["exact_by_rating/0"] == 1.0 and result["puzzles_by_rating/0"] == 1
    assert result["valid_solution_accuracy"] == 0.5 and result["other_solutions"] == 0
    hard_band = next(k for k in result if k.startswith("exact_by_rating/") and k != "exact_by_rating/0")
    assert result[hard_band] == 0.0


def test_a_valid_solution_other_than_the_label_scores_as_valid_not_exact(tmp_path: Path) -> None:
    from trmkit.data.stream import eval_batches
    from trmkit.tasks.sudoku.score import sudoku_scorer

    several = EASY_SOLUTION[:9] + "." * 72  # the first row given: many solutions
    build_sudoku(write_lines(tmp_path / "p.txt", [several, EASY]), tmp_path / "s", test_fraction=1.0,
                 require_unique=False, log=lambda m: None)
    split = open_store(tmp_path / "s")["test"]
    batch = next(eval_batches(split, 2))
    labels = np.asarray(batch.labels)
    preds = labels.copy()
    row = int(np.flatnonzero((from_tokens(np.asarray(batch.inputs)) == 0).sum(1) == 72)[0])
    grid = preds[row].reshape(9, 9)
    preds[row] = grid[[0, 2, 1, 3, 4, 5, 6, 7, 8]].reshape(-1)  # rows 2 and 3 swapped: still valid, row 1 kept
    easy = 1 - row
    preds[easy, 0] = 2 + (preds[easy, 0] - 1) % 9  # digit tokens are 2..10: the next digit breaks its row
    scorer = sudoku_scorer(split)
    scorer.add(batch, preds, np.zeros(2))
    result = scorer.result()
    assert not (preds == labels).all(1).any()  # neither is the label
    assert result["valid_solution_accuracy"] == 0.5 and result["other_solutions"] == 1


def test_build_mixes_several_sources_and_keeps_a_puzzle_read_twice_once(tmp_path: Path) -> None:
    import json

    from trmkit import api

    a = write_lines(tmp_path / "a.txt", [EASY, INKALA])
    b = write_lines(tmp_path / "b.txt", [INKALA, EASY.translate(str.maketrans("12", "21"))])  # digits relabelled
    logs: list[str] = []
    built = build_sudoku([a, b], tmp_path / "m", test_fraction=0.34, log=logs.append)
    assert built.train_groups + built.test_groups == 3  # INKALA once
    meta = json.loads((tmp_path / "m" / "train" / "meta.json").read_text())
    assert [(s["kept"], s["duplicates_dropped"]) for s in meta["build"]["sources"]] == [(2, 0), (1, 1)]
    assert meta["build"]["skipped_by_reason"] == {"duplicate_of_an_earlier_source": 1}
    assert meta["source"] == f"{a} + {b}" and any(line.startswith("mix: 1 puzzles from") for line in logs)
    with pytest.raises(ValueError, match="given twice"):
        build_sudoku([a, a], tmp_path / "twice", log=logs.append)
    with pytest.raises(ValueError, match="none.txt: no usable puzzles"):  # a source that adds nothing is named
        build_sudoku([a, write_lines(tmp_path / "none.txt", [CONFLICT])], tmp_path / "n", log=logs.append)
    assert not (tmp_path / "twice").exists() and not (tmp_path / "n").exists()
    api.build_data("sudoku", tmp_path / "api", source=[str(a), "generate"], num=2, log=logs.append)
    assert "+ generate" in json.loads((tmp_path / "api" / "test" / "meta.json").read_text())["source"]
