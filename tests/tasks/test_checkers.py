"""Checkers on the task seam (`trmkit adapt` keeps what they accept): each accepts an answer without its label.

Sudoku (rules, givens kept), maze (a simple path of open cells from S to G, the shorter preferred, the path
as the training label) and a user's own function for pairs stores (run in its own process, its errors
naming the puzzle's JSONL line); a task without a checker is refused; no checker reads a label.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trmkit import procs
from trmkit.config import ConfigError
from trmkit.data.store import open_store
from trmkit.registry import TASKS
from trmkit.tasks import maze
from trmkit.tasks.base import NO_CHECKER, checker_for
from trmkit.tasks.checking import UserFunction, parse_spec
from trmkit.tasks.maze.generate import OPEN, PATH, START, VOCAB, WALL
from trmkit.tasks.maze.trace import NOT_ROUTE, trace_labels
from trmkit.tasks.pairs.build import build_pairs
from trmkit.tasks.pairs.checker import user_checker
from trmkit.tasks.sudoku.build import build_sudoku

REPO = Path(__file__).resolve().parents[2]
QUIET = {"log": lambda m: None}
CHECKER = f"{REPO}/examples/latin_checker.py:is_latin_square"



def example(name: str):
    """A script of examples/, imported by path (run here at a tiny size)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def latin_store(tmp_path: Path, size: int = 4, num: int = 6, inputs_only: bool = False) -> Path:
    source = tmp_path / f"latin{size}.jsonl"
    args = ["--size", str(size), "--num", str(num), "--blanks", str(size * size // 2), "--seed", "3"]
    example("latin_squares").main(args + ["--out", str(source)] + (["--inputs-only"] if inputs_only else []))
    build_pairs(source, tmp_path / f"store{size}", test_fraction=0.5, **QUIET)
    return tmp_path / f"store{size}"


def checker_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "mine.py"
    path.write_text(f"def check(input, output):\n    {body}\n")
    return f"{path}:check"


# ---------------------------------------------------------------- Sudoku


def test_sudoku_accepts_the_solution_and_rejects_a_changed_given_a_duplicate_and_a_blank(tmp_path):
    build_sudoku("generate", tmp_path / "s", num_generate=3, test_fraction=1, seed=1, **QUIET)
    test = open_store(tmp_path / "s")["test"]
    checking = checker_for(TASKS["sudoku"], test.meta, None)
    inputs, solution = np.asarray(test.inputs[:1]), np.asarray(test.labels[:1])
    relabelled = np.where(solution == 2, 3, np.where(solution == 3, 2, solution))  # still a Sudoku, givens not kept
    duplicate = solution.copy()
    blank = int(np.flatnonzero(inputs[0] == 1)[0])  # a cell to fill in
    duplicate[0, blank] = solution[0, blank - 1] if blank % 9 else solution[0, blank + 1]  # its row neighbour's
    unfilled = solution.copy()
    unfilled[0, blank] = 1
    answers = np.concatenate([solution, relabelled, duplicate, unfilled])
    got = checking.check(np.repeat(inputs, 4, axis=0), answers)
    assert got.tolist() == [True, False, False, False]
    assert checking.to_label is None and "givens kept" in checking.describe
    with pytest.raises(ConfigError, match="task sudoku checks answers with its own rules.*drop it"):
        checker_for(TASKS["sudoku"], test.meta, "mine.py:check")


# ---------------------------------------------------------------- maze

OPEN_MAZE = ["#######",
             "#S    #",
             "#     #",
             "#     #",
             "#    G#",
             "#     #",
             "#######"]


def maze_rows(rows: list[str], marked: list[tuple[int, int]] = ()) -> np.ndarray:
    grid = np.array([[VOCAB.index(ch) for ch in row] for row in rows])
    for cell in marked:
        grid[cell] = PATH
    return grid.reshape(1, -1)


def test_maze_accepts_paths_prefers_the_shorter_and_rejects_a_gap(tmp_path):
    maze.build("generate", tmp_path / "m", size=7, num=2, test_fraction=1, seed=4, **QUIET)
    test = open_store(tmp_path / "m")["test"]
    checking = checker_for(TASKS["maze"], test.meta, None)
    assert checking.check(np.asarray(test.inputs), np.asarray(test.labels)).all()  # the generator's own paths
    question = maze_rows(OPEN_MAZE)
    short = maze_rows(OPEN_MAZE, [(1, c) for c in range(2, 6)] + [(2, 5), (3, 5)])  # 6 cells, 7 steps
    detour = maze_rows(OPEN_MAZE, [(r, 1) for r in range(2, 6)] + [(5, c) for c in range(2, 6)])  # 8 cells
    gap = maze_rows(OPEN_MAZE, [(r, 1) for r in range(2, 6)] + [(5, 2), (5, 4), (5, 5)])
    answers = np.concatenate([short, detour, gap])
    assert checking.check(np.repeat(question, 3, axis=0), answers).tolist() == [True, True, False]
    rank = checking.prefer(np.repeat(question, 2, axis=0), answers[:2])
    assert rank[0] > rank[1]  # the shorter path is kept


def test_maze_label_is_the_path_as_the_final_answer_and_trace_tokens_are_refused(tmp_path):
    maze.build("generate", tmp_path / "m", size=7, num=2, test_fraction=1, seed=4, **QUIET)
    test = open_store(tmp_path / "m")["test"]
    checking = checker_for(TASKS["maze"], test.meta, None)
    inputs, labels = np.asarray(test.inputs), np.asarray(test.labels)
    sloppy = np.where(labels == WALL, OPEN, labels)  # wrong tokens on walls: not the path, masked in training
    sloppy[inputs == START] = PATH
    assert checking.check(inputs, sloppy).all()
    np.testing.assert_array_equal(checking.to_label(inputs, sloppy), labels)  # as the store's labels read
    traced = labels.copy()
    traced[labels == PATH] = 10  # "o>" unfolded: the checker reads answers folded (fold.py)
    with pytest.raises(ValueError, match="folded"):
        checking.check(inputs, traced)
    with pytest.raises(ConfigError, match="task maze checks answers with its own rules"):
        checker_for(TASKS["maze"], test.meta, CHECKER)


def test_maze_trace_of_an_accepted_path_is_the_route_s_own_and_not_the_route_elsewhere(tmp_path):
    maze.build("generate", tmp_path / "m", size=9, num=3, test_fraction=1, seed=5, **QUIET)
    test = open_store(tmp_path / "m")["test"]
    inputs, labels = np.asarray(test.inputs), np.asarray(test.labels)
    got = checker_for(TASKS["maze"], test.meta, None).to_trace(inputs, labels, 2, 12)  # (b, K, L)
    assert got.shape == (3, 12, 81)
    for x, y, mine in zip(inputs, labels, got):
        full = trace_labels(x.reshape(9, 9), 2, 12).reshape(12, -1)
        on, off = y == PATH, (x == OPEN) & (y != PATH)
        assert np.array_equal(mine[:, on], full[:, on]) and (mine[:, off] == NOT_ROUTE).all()


# ---------------------------------------------------------------- pairs: the user's function


def test_a_users_checker_accepts_squares_and_rejects_a_broken_one(tmp_path):
    test = open_store(latin_store(tmp_path))["test"]
    checking = checker_for(TASKS["pairs"], test.meta, CHECKER)
    inputs, squares = np.asarray(test.inputs), np.asarray(test.labels)
    swapped = squares.reshape(-1, 4, 4)[:, :, [1, 0, 2, 3]].reshape(len(squares), -1)  # rows fine, givens moved
    duplicate = squares.copy()
    duplicate[:, 0] = duplicate[:, 1]  # a symbol twice in the first row
    padded = squares.copy()
    padded[:, 5] = 0  # padding inside the grid: no answer, not asked
    got = checking.check(np.concatenate([inputs] * 4), np.concatenate([squares, swapped, duplicate, padded]))
    assert got.tolist() == [True] * len(inputs) + [False] * (3 * len(inputs))
    assert "is_latin_square" in checking.describe and "10 s a call" in checking.describe


@pytest.mark.parametrize("body, said", [
    ("return 1 / 0", r"raised ZeroDivisionError: division by zero \(mine.py line 2\)"),
    ("return 1", r"returned 1 \(type int\), not True or False"),
    ("while True: pass", r"ran past its time limit of 0.5 s per call"),
])
def test_a_broken_users_checker_is_named_with_the_puzzles_line(tmp_path, body, said):
    store = latin_store(tmp_path)
    test = open_store(store)["test"]
    checking = user_checker(test.meta, checker_file(tmp_path, body), time_limit=0.5)
    lines = {json.dumps(json.loads(x)["input"]): n for n, x in enumerate(open(tmp_path / "latin4.jsonl"), 1)}
    vocab = test.meta.vocab  # the first test puzzle, decoded: the error names its line
    grid = [[int(vocab[t]) for t in row] for row in np.asarray(test.inputs[0]).reshape(4, 4)]
    with pytest.raises(ConfigError, match=said) as caught:
        checking.check(np.asarray(test.inputs), np.asarray(test.labels))
    where = f"on the puzzle of line {lines[json.dumps(grid)]} of {tmp_path / 'latin4.jsonl'}"
    assert f"checker {tmp_path / 'mine.py'}:check" in str(caught.value) and where in str(caught.value)


def test_a_hung_call_leaves_no_process_and_a_dead_one_is_named(tmp_path):
    function = UserFunction(parse_spec(checker_file(tmp_path, "while True: pass")), time_limit=0.5)
    function.start()
    pid = function._proc.pid
    with pytest.raises(ConfigError, match="time limit of 0.5 s per call on pair 0"):
        function.run([([[1]], [[1]])], lambda i: f"pair {i}")
    assert procs.group_alive(pid) == []
    dying = UserFunction(parse_spec(checker_file(tmp_path, "import os; os._exit(3)")), time_limit=5)
    with pytest.raises(ConfigError, match=r"stopped: its process exited \(code 3\) on pair 1"):
        dying.run([([[1]], [[1]])] * 2, lambda i: f"pair {i + 1}")
    assert dying._proc is None


def test_a_store_without_source_lines_shows_the_puzzle_and_bad_specs_are_refused(tmp_path):
    test = open_store(latin_store(tmp_path))["test"]
    old = replace(test.meta, build={k: v for k, v in test.meta.build.items() if k != "source_lines"})
    checking = user_checker(old, checker_file(tmp_path, "return None"), time_limit=5)
    with pytest.raises(ConfigError, match=r"returned None .* on the puzzle with input \[\[.*records no source lines"):
        checking.check(np.asarray(test.inputs), np.asarray(test.labels))
    with pytest.raises(ConfigError, match="no built-in checker: pass --checker FILE.py:FUNCTION"):
        checker_for(TASKS["pairs"], test.meta, None)
    with pytest.raises(ConfigError, match="give FILE.py:FUNCTION"):
        checker_for(TASKS["pairs"], test.meta, "mine.py")
    with pytest.raises(ConfigError, match="no file nowhere.py"):
        checker_for(TASKS["pairs"], test.meta, "nowhere.py:check")
    broken = tmp_path / "broken.py"
    broken.write_text("def check(input, output)\n    return True\n")
    with pytest.raises(ConfigError, match=r"loading broken.py failed: SyntaxError: expected ':' \(broken.py, line 1\)"):
        checker_for(TASKS["pairs"], test.meta, f"{broken}:check")
    broken.write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(ConfigError, match=r"its process exited \(code 4\) while loading broken.py"):
        checker_for(TASKS["pairs"], test.meta, f"{broken}:check")
    with pytest.raises(ConfigError, match=r"loading mine.py failed: AttributeError: it has no function 'other' "
                                          r"\(its functions: check\)"):
        checker_for(TASKS["pairs"], test.meta, checker_file(tmp_path, "return True").replace(":check", ":other"))


def test_inputs_only_puzzles_build_and_are_checked(tmp_path):
    test = open_store(latin_store(tmp_path, size=6, inputs_only=True))["test"]
    checking = checker_for(TASKS["pairs"], test.meta, CHECKER)
    assert not checking.check(np.asarray(test.inputs), np.asarray(test.labels)).any()  # the blanks are no answer


# ---------------------------------------------------------------- the seam


def test_a_task_without_a_checker_is_refused_saying_how_to_add_one(tmp_path):
    toy = replace(TASKS["sudoku"], name="toy", checker=None)
    with pytest.raises(ConfigError) as caught:
        checker_for(toy, None, None)
    assert str(caught.value) == NO_CHECKER.format(name="toy")
    assert "add `checker=` to its Task (docs/tasks.md, Checkers)" in str(caught.value)


def _scrambled(store: Path) -> None:
    """Overwrite every split's labels with a random permutation of its rows and tokens."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        path = store / split / "labels.npy"
        if path.exists():
            labels = np.load(path)
            np.save(path, rng.permutation(rng.permutation(labels, axis=0), axis=1))


@pytest.mark.parametrize("task", ["sudoku", "maze", "pairs"])
def test_no_checker_reads_a_label(tmp_path, task):
    if task == "sudoku":
        build_sudoku("generate", tmp_path / "d", num_generate=3, test_fraction=1, seed=1, **QUIET)
    elif task == "maze":
        maze.build("generate", tmp_path / "d", size=7, num=3, test_fraction=1, seed=4, **QUIET)
    store = tmp_path / "d" if task != "pairs" else latin_store(tmp_path)
    spec = CHECKER if task == "pairs" else None
    test = open_store(store)["test"]
    inputs, labels = np.asarray(test.inputs).copy(), np.asarray(test.labels).copy()
    answers = np.concatenate([labels, np.roll(labels, 1, axis=1)])  # right answers and broken ones
    before = checker_for(TASKS[task], test.meta, spec).check(np.concatenate([inputs] * 2), answers)
    _scrambled(store)
    test = open_store(store)["test"]
    assert not np.array_equal(np.asarray(test.labels), labels)
    after = checker_for(TASKS[task], test.meta, spec).check(np.concatenate([inputs] * 2), answers)
    assert before[:len(labels)].all() and not before[len(labels):].all()
    np.testing.assert_array_equal(before, after)
