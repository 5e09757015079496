"""Generators that do not fail on a seed: a maze or puzzle out of reach in the usual draws gets more
draws, then a relaxed bound, said once; every set that built before is byte-identical."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from trmkit.tasks.maze.build import build as build_maze
from trmkit.tasks.maze.data import check_answer
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.tasks.sudoku.generate import generate_within
from trmkit.tasks.sudoku.solver import search


def _arrays_digest(store: Path) -> str:
    """SHA-256 (first 16 hex digits) of every .npy array of a store, by relative path."""
    h = hashlib.sha256()
    for path in sorted(store.rglob("*.npy")):
        h.update(str(path.relative_to(store)).encode())
        h.update(np.load(path).tobytes())
    return h.hexdigest()[:16]


def _quiet(_: str) -> None:
    pass


def test_sets_that_built_before_are_byte_identical(tmp_path: Path) -> None:
    # digests computed with the generators as they were before draws could be widened or relaxed
    build_maze("generate", tmp_path / "m11", size=11, num=12, seed=3, log=_quiet)
    build_maze("generate", tmp_path / "m15", size=15, num=10, seed=4, train_min_path=5, aug=2,
               test_fraction=0.3, log=_quiet)
    build_maze("generate", tmp_path / "m33", size=33, num=3, seed=6102, test_fraction=1, log=_quiet)
    build_sudoku("generate", tmp_path / "s", num_generate=6, givens="30-34", seed=2, aug=1, test_fraction=0.5,
                 log=_quiet)
    assert _arrays_digest(tmp_path / "m11") == "681a0c2aa263c043"
    assert _arrays_digest(tmp_path / "m15") == "ad13736851b550e5"
    assert _arrays_digest(tmp_path / "m33") == "707e4c1cd42cacba"
    assert _arrays_digest(tmp_path / "s") == "0d0a14cc1fbb263c"


def _build_meta(store: Path) -> dict:
    return json.loads((store / "test" / "meta.json").read_text())["build"]


def test_a_maze_out_of_reach_in_200_draws_gets_more_draws(tmp_path: Path) -> None:
    # seed 9's first 11 x 11 maze finds no path of 54 steps in 200 draws (the build used to stop there)
    lines: list[str] = []
    build_maze("generate", tmp_path / "m", size=11, num=2, min_path=54, seed=9, test_fraction=1,
               log=lines.append)
    assert sum("needed more draws" in line for line in lines) == 1
    assert _build_meta(tmp_path / "m")["relaxed"] == {"widened": 1, "relaxed": 0}
    assert _build_meta(tmp_path / "m")["path_length"]["min"] >= 54


def test_a_maze_out_of_reach_gets_a_relaxed_bound_said_once(tmp_path: Path) -> None:
    # seed 1's first 11 x 11 maze finds no path of 58 steps in 400 draws, one of 56 after that
    lines: list[str] = []
    build_maze("generate", tmp_path / "m", size=11, num=1, min_path=58, seed=1, test_fraction=1,
               log=lines.append)
    said = [line for line in lines if "relaxed" in line]
    assert said == [said[0]] and "1 of 1 mazes relaxed to a path of >= 56 steps" in said[0]
    assert _build_meta(tmp_path / "m")["relaxed"] == {"widened": 1, "relaxed": 1, "lowest_min_path": 56}
    question = np.load(tmp_path / "m" / "test" / "inputs.npy")[0].reshape(11, 11)
    answer = np.load(tmp_path / "m" / "test" / "labels.npy")[0].reshape(11, 11)
    assert check_answer(question, answer) >= 56


def test_a_maze_bound_far_out_of_reach_still_fails_clearly(tmp_path: Path) -> None:
    try:
        build_maze("generate", tmp_path / "m", size=7, num=1, min_path=40, seed=0, test_fraction=1, log=_quiet)
    except ValueError as err:
        assert "no 7x7 maze" in str(err) and "lower --min-path" in str(err)
    else:
        raise AssertionError("a 7 x 7 maze has no path of 40 steps")


def test_a_sudoku_out_of_reach_in_its_attempts_gets_relaxed_givens() -> None:
    # seed 1: three attempts at exactly 22 givens all fail (random removal rarely gets that low)
    puzzle, solution, guesses, met = generate_within(np.random.default_rng([1, 0, 0]), (22, 22), 0, None,
                                                     max_attempts=3)
    assert met == ((22, 23), 0)
    assert 22 <= int((puzzle > 0).sum()) <= 23
    assert search(puzzle, limit=2).solutions[0].tolist() == solution.tolist()


def test_a_missing_maze_store_of_a_preset_gets_the_presets_own_maze_command(tmp_path: Path, capsys) -> None:
    from trmkit.cli import main

    preset = Path(__file__).resolve().parents[2] / "configs" / "maze-trace.yaml"
    code = main(["train", str(preset), f"data.path={tmp_path / 'maze-11'}", f"run.dir={tmp_path / 'run'}",
                 "train.max_steps=1"])
    said = capsys.readouterr().err
    assert code == 2
    assert f"trmkit data maze --size 11 --num 500 --test-fraction 1 --seed 11 --out {tmp_path / 'maze-11'}" in said
    assert "sudoku" not in said


def test_fit_from_python_gets_the_presets_own_maze_command_too(tmp_path: Path) -> None:
    import pytest

    import trmkit
    from trmkit.data.hints import MissingStore

    preset = Path(__file__).resolve().parents[2] / "configs" / "maze-trace.yaml"
    with pytest.raises(MissingStore) as err:
        trmkit.fit(preset, {"data.path": tmp_path / "maze-11", "run.dir": tmp_path / "run"}, log=lambda m: None)
    assert "trmkit data maze --size 11" in str(err.value) and "sudoku" not in str(err.value)


def test_a_run_whose_store_moved_gets_a_command_for_its_own_task(tmp_path: Path) -> None:
    from trmkit.data.hints import MissingStore
    from trmkit.train.session import open_splits

    try:
        open_splits(str(tmp_path / "gone"), need_train=False, task="pairs")
    except MissingStore as err:
        assert f"`trmkit data pairs --source YOUR.jsonl --out {tmp_path / 'gone'}`" in str(err)
        assert "sudoku" not in str(err)
    else:
        raise AssertionError("a missing store is an error")


def test_a_config_without_a_task_gets_the_general_form_not_another_tasks(tmp_path: Path) -> None:
    from trmkit.data.hints import build_hint

    config = tmp_path / "mine.yaml"
    config.write_text("data:\n  path: data/mine\n")
    hint = build_hint(tmp_path / "mine", None, config)
    assert "trmkit data TASK --out" in hint and "sudoku" not in hint
