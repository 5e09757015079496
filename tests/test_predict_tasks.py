"""`trmkit predict` and `Run.predict` answer Sudoku, mazes and pairs in their inputs' own form, on the
example files in examples/, with tiny runs trained here (their accuracy does not matter: the form of
the answers and their `valid` field do); odd inputs and an --out over another file are refused."""

import gzip
import importlib.util
import json
import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import trmkit
from trmkit import cli
from trmkit.config import ConfigError
from trmkit.tasks import maze
from trmkit.tasks.maze import text as maze_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SUDOKU = {"run.threads": 1, "run.compile": "off", "run.dtype": "float32", "model.hidden_size": 16,
          "model.L_layers": 1, "model.halt_max_steps": 2, "train.batch_size": 8, "train.max_steps": 2,
          "train.eval_every": 0, "train.checkpoint_minutes": 0}
MAZE = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: conv, hidden_size: 16, mlp_width: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 3,
        puzzle_emb_len: 0}
data: {stream: generate, trace: 2}
train: {batch_size: 8, max_steps: 2, lr: 3e-3, warmup_steps: 1, ema_decay: 0.0, checkpoint_minutes: 0,
        eval_every: 0, log_every: 1, mask_given: true}
"""
PAIRS = """
run: {seed: 0, threads: 1, compile: "off", dtype: float32}
model: {mixer: mlp_t, hidden_size: 16, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 2, lr: 1.0e-3, warmup_steps: 1, eval_every: 0, checkpoint_minutes: 0, ema_decay: 0.0}
"""
QUIET = lambda m: None  # noqa: E731


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny Sudoku run, a tiny maze-trace run (conv, 7 x 7) and a tiny pairs run (6 x 6 Sudoku)."""
    root = tmp_path_factory.mktemp("predict")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        data = trmkit.build_data("sudoku", root / "sudoku-data", log=QUIET, source="generate", num=24,
                                 givens="40-44", test_fraction=0.25)
        trmkit.fit(ROOT / "configs/sudoku-laptop.yaml", {**SUDOKU, "data.path": data, "run.dir": root / "sudoku"},
                   log=QUIET)
        maze.build("generate", root / "m7", size=7, num=8, min_path=6, test_fraction=1.0, seed=1, log=QUIET)
        (root / "maze.yaml").write_text(MAZE)
        trmkit.fit(root / "maze.yaml", {"data.path": root / "m7", "run.dir": root / "maze"}, log=QUIET)
        _sudoku6().main(["--num", "12", "--seed", "3", "--out", str(root / "s6.jsonl")])
        trmkit.build_data("pairs", root / "s6", log=QUIET, source=root / "s6.jsonl", blank="0")
        (root / "pairs.yaml").write_text(PAIRS)
        trmkit.fit(root / "pairs.yaml", {"data.path": root / "s6", "run.dir": root / "pairs"}, log=QUIET)
        yield root


def _sudoku6():
    spec = importlib.util.spec_from_file_location("pairs_sudoku6", ROOT / "benchmarks" / "pairs_sudoku6.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cache(runs, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(runs / "cache"))
    return runs


def test_a_sudoku_run_answers_81_character_lines_and_json_grids_with_valid_from_the_rules(cache, tmp_path, capsys):
    puzzles = (EXAMPLES / "sudoku-puzzles.txt").read_text().splitlines()
    mixed = tmp_path / "in.txt"
    mixed.write_text("\n".join([*puzzles[:2], "12345", (EXAMPLES / "sudoku-grids.jsonl").read_text().strip()]) + "\n")
    assert cli.main(["predict", str(cache / "sudoku"), str(mixed)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 4  # one line per puzzle, in order, the unreadable one included
    for puzzle, line in zip(puzzles[:2], lines):
        answer, verdict, *why = line.split("\t")
        assert re.fullmatch(r"[0-9.]{81}", answer) and verdict in ("valid", "invalid")
        assert (verdict == "invalid") == bool(why)  # an invalid answer says why
    assert lines[2] == "\terror\tline 3: wrong_length: expected 81 characters, got 5"
    grid = json.loads(lines[3])
    assert grid["line"] == 4 and isinstance(grid["valid"], bool) and len(grid["output"]) == 9
    assert all(len(row) == 9 for row in grid["output"])
    assert "in.txt:3: wrong_length" in err and "3 inputs answered, 1 puzzles skipped" in err
    assert "--steps 2 supervision steps (the default: the trained N_sup)" in err
    assert "answers valid" in err


def test_a_maze_run_marks_the_route_in_the_mazes_own_text_and_thinks_until_stable(cache, tmp_path, capsys):
    mazes = (EXAMPLES / "mazes.txt").read_text()
    answers = tmp_path / "a.txt"
    assert cli.main(["predict", str(cache / "maze"), str(EXAMPLES / "mazes.txt"), "--out", str(answers)]) == 0
    err = capsys.readouterr().err
    assert "--steps auto: each example stops once its answer has not changed" in err
    assert "the default for mazes" in err and "supervision steps per input on average" in err
    given = [block.splitlines() for block in mazes.strip("\n").split("\n\n")]
    answered = [block.splitlines() for block in answers.read_text().strip("\n").split("\n\n")]
    assert len(answered) == len(given) == 3  # trained on 7 x 7: an 11 x 11 and a 15 x 15 maze read as well
    for rows, out in zip(given, answered):
        assert len(out) == len(rows) + 1 and out[-1].startswith(("valid\t", "invalid\t"))
        for row, got in zip(rows, out):  # walls, S and G kept; only open cells may turn into 'o'
            assert len(got) == len(row) and all(a == b or (a, b) == (" ", "o") for a, b in zip(row, got))
    assert cli.main(["predict", str(cache / "maze"), str(EXAMPLES / "mazes.txt"), "--steps", "2"]) == 0
    out, err = capsys.readouterr()
    assert "--steps 2 supervision steps (--steps K)" in err and out.count("\n\n") == 3


def test_a_maze_route_is_valid_when_it_is_one_path_of_open_cells_from_s_to_g():
    walk = maze_text.parse_maze("S  \n## \nG  ")
    marked = lambda rows: [[c == "o" for c in row] for row in rows]  # noqa: E731
    route = maze_text.route(walk, np.array(marked(["Soo", "##o", "Goo"])))
    assert route == {"valid": True, "length": 6, "shortest": 6}
    assert maze_text.status(route) == "valid\t6 steps, shortest"
    assert maze_text.route(walk, np.array(marked(["So ", "## ", "G  "])))["reason"].startswith("the 'o' cells")
    assert maze_text.render(walk, np.array(marked(["Soo", "##o", "Goo"]))) == ["Soo", "##o", "Goo"]
    with pytest.raises(ValueError, match="bad_size.*write them '.'"):
        maze_text.parse_maze("S  \n##\nG  ")


def test_run_predict_loads_the_model_once_and_answers_in_each_inputs_form(cache, monkeypatch):
    from trmkit import rundir

    loads = []
    real = rundir.load_weights
    monkeypatch.setattr(rundir, "load_weights", lambda *a, **k: loads.append(1) or real(*a, **k))
    run = trmkit.load(cache / "sudoku")
    text, grid = (EXAMPLES / "sudoku-puzzles.txt").read_text().split()[0], json.loads(
        (EXAMPLES / "sudoku-grids.jsonl").read_text())
    answers = run.predict([text, grid], log=QUIET)
    assert isinstance(answers[0], str) and len(answers[0]) == 81
    assert len(answers[1]) == 9 and all(len(row) == 9 for row in answers[1])
    detailed = run.predict([text], details=True, steps="auto:3", log=QUIET)[0]
    assert set(detailed) >= {"output", "valid", "steps"} and 1 <= detailed["steps"] <= 3
    assert len(loads) == 1  # once per Run, not per call
    with pytest.raises(ConfigError, match="input 0: wrong_length"):
        run.predict(["123"], log=QUIET)
    mazes = trmkit.load(cache / "maze").predict([(EXAMPLES / "mazes.txt").read_text().split("\n\n")[0]], log=QUIET)
    assert mazes[0].count("\n") == 10 and set(mazes[0]) <= set("# SGo\n")  # an 11 x 11 maze, as a string


def test_the_predict_example_script_answers_the_example_files(cache, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["predict_puzzles.py", str(cache / "sudoku"), str(cache / "maze")])
    runpy.run_path(str(EXAMPLES / "predict_puzzles.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count(" -> ") == 4 and out.count("supervision steps") == 3
    assert re.search(r"^[0-9.]{81} -> [0-9.]{81} (valid|invalid \()", out, re.M)


def test_a_pairs_run_answers_the_example_jsonl_and_a_run_keeps_its_model(cache, monkeypatch, capsys):
    assert cli.main(["predict", str(cache / "pairs"), str(EXAMPLES / "sudoku6-puzzles.jsonl")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) >= 2 and all(len(line["output"]) == 6 for line in lines)
    from trmkit import rundir

    loads = []
    real = rundir.load_weights
    monkeypatch.setattr(rundir, "load_weights", lambda *a, **k: loads.append(1) or real(*a, **k))
    run = trmkit.load(cache / "pairs")
    grids = [line["input"] for line in map(json.loads, (EXAMPLES / "sudoku6-puzzles.jsonl").read_text().splitlines())]
    for grid in grids[:2]:
        answer = run.predict([grid], log=QUIET)[0]
        assert len(answer) == 6 and all(len(row) == 6 for row in answer)
    assert len(loads) == 1  # two calls, one load


def test_odd_inputs_are_refused_saying_what_they_are(cache, tmp_path, capsys):
    mail = "From a@b Sat Jan  3 01:05:34 2026\nSubject: hi\n\nhello\n" * 5
    (tmp_path / "inbox.mbox.gz").write_bytes(gzip.compress(mail.encode()))
    (tmp_path / "inbox.mbox").write_text(mail)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01" * 50)
    run = str(cache / "pairs")
    for inputs, said in [("inbox.mbox.gz", "is gzip-compressed, not a text file of inputs"),
                         ("inbox.mbox", "none of its 15 lines can be answered (first: inbox.mbox:1: bad_json"),
                         ("blob.bin", "is a binary file"), (".", "is a directory"), ("nope.txt", "not found")]:
        assert cli.main(["predict", run, str(tmp_path / inputs)]) == 2, inputs
        out, err = capsys.readouterr()
        assert said in err and not out, (inputs, err)
    assert cli.main(["predict", str(cache / "sudoku"), str(tmp_path / "inbox.mbox")]) == 2
    assert "this run reads Sudoku puzzles, one a line" in capsys.readouterr().err


def test_out_replaces_only_answers_predict_wrote_unless_forced(cache, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    args = ["predict", str(cache / "sudoku"), str(EXAMPLES / "sudoku-puzzles.txt"), "--out"]
    assert cli.main([*args, str(notes)]) == 2
    assert "is not answers written by this command" in capsys.readouterr().err and notes.read_text() == "my notes\n"
    assert cli.main([*args, str(tmp_path / "answers.txt")]) == 0
    assert cli.main([*args, str(tmp_path / "answers.txt")]) == 0  # its own answers: replaced without --force
    assert cli.main([*args, str(notes), "--force"]) == 0
    assert len(notes.read_text().splitlines()) == 4
    assert cli.main(["predict", str(cache / "maze"), str(EXAMPLES / "mazes.txt"), "--out", str(notes)]) == 0
