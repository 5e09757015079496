"""Maze: generator guarantees, importer reports, dihedral augmentation, the valid-path metric."""

import json
import sys

import numpy as np
import pytest

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.data.store import open_store
from trmkit.data.stream import Batch
from trmkit.tasks import maze
from trmkit.data.imports import ImportReport
from trmkit.tasks.base import dihedral, dihedral_inverse


def _maze(n=15, seed=0, loops=0.1, min_path=None):
    return maze.generate_maze(n, np.random.default_rng(seed), loops, min_path)


@pytest.mark.parametrize("n", [9, 15, 30])
def test_generated_mazes_have_one_shortest_path_of_the_asked_length(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        q, a, length = maze.generate_maze(n, rng, loops=0.1, min_path=maze.default_min_path(n))
        assert length >= maze.default_min_path(n)
        start, goal = (tuple(np.argwhere(q == t)[0]) for t in (maze.START, maze.GOAL))
        found, count, path = maze.shortest_paths(q, start, goal)
        assert (found, count) == (length, 1)
        assert int((a == maze.PATH).sum()) == length - 1  # every inner cell of the path, S and G excluded
        assert maze.check_answer(q, a) == length


def test_loops_make_cycles_and_hardness_is_honoured():
    walls_open = [int((maze.carve(15, np.random.default_rng(1), lp) == maze.OPEN).sum()) for lp in (0.0, 0.5)]
    assert walls_open[1] > walls_open[0]  # opened walls
    perfect = maze.carve(15, np.random.default_rng(1), 0.0)
    cells = int((perfect == maze.OPEN).sum())
    assert cells == 2 * 64 - 1  # a perfect maze on 8x8 cells: 64 cells + 63 passages, a tree
    with pytest.raises(ValueError, match="lower --min-path"):
        maze.generate_maze(7, np.random.default_rng(0), 0.0, min_path=100, tries=5)


def test_past_30_the_hardness_scales_by_side_and_ties_are_kept_with_the_rule_said(tmp_path):
    assert [maze.default_min_path(n) for n in (15, 30, 45, 61)] == [28, 110, 165, 224]
    ties = 0
    rng = np.random.default_rng(0)
    for _ in range(30):  # small open mazes tie often: the rule decides whether a tie comes back
        q, a, length = maze.generate_maze(9, rng, loops=0.6, min_path=8, unique=False)
        start, goal = (tuple(np.argwhere(q == t)[0]) for t in (maze.START, maze.GOAL))
        found, count, _ = maze.shortest_paths(q, start, goal)
        assert found == length and maze.check_answer(q, a) == length  # the label is a shortest path
        ties += count > 1
    assert ties > 0
    lines = []
    out = maze.build("generate", tmp_path / "m", size=33, num=2, test_fraction=1, min_path=40, log=lines.append)
    assert out["unique_path"] is False and any("unique_path=off" in line for line in lines)
    assert maze.build("generate", tmp_path / "u", size=33, num=1, test_fraction=1, min_path=40, unique_path=True,
                      log=lines.append)["unique_path"] is True


def test_dihedral_transforms_are_distinct_and_invert():
    q, a, _ = _maze()
    seen = set()
    for k in range(8):
        t = dihedral(a, k)
        assert np.array_equal(dihedral_inverse(t, k), a)
        assert maze.check_answer(dihedral(q, k), t) > 0  # still a shortest path after the symmetry
        seen.add(t.tobytes())
    assert len(seen) == 8


def _write_csv(path, rows):
    path.write_text("source,question,answer,rating\n" + "".join(f"{r}\n" for r in rows))


def test_importer_reads_maze_hard_rows_and_reports_bad_ones_by_line(tmp_path):
    q, a, length = _maze(n=9, min_path=8)
    good = f"gen,{maze.render(q)},{maze.render(a)},{length}"
    wrong_path = a.copy()
    wrong_path[wrong_path == maze.PATH] = maze.OPEN  # no path marked
    bad_char = maze.render(q).replace(" ", "x", 1)
    rows = [good, f"gen,{maze.render(q)},{maze.render(wrong_path)},1", f"gen,{bad_char},{maze.render(a)},1",
            "gen,###,###,1", good + ",extra"]
    _write_csv(tmp_path / "m.csv", rows)
    report = ImportReport(source="m.csv")
    got = list(maze.read_csv(tmp_path / "m.csv", report))
    assert len(got) == 1 and got[0].length == length
    assert report.skipped_by_reason == {"not_shortest": 1, "bad_character": 1, "bad_size": 1, "bad_row": 1}
    assert any(m.startswith("m.csv:3: not_shortest") for m in report.messages), report.messages
    assert any(m.startswith("m.csv:6: bad_row") for m in report.messages), report.messages


def test_importer_accepts_another_shortest_path_and_refuses_a_longer_one():
    q = maze.parse("S  " "   " "  G", allow_path=False)
    via_top = maze.parse("Soo" "  o" "  G", allow_path=True)
    via_left = maze.parse("S  " "o  " "ooG", allow_path=True)
    detour = maze.parse("Soo" " oo" "  G", allow_path=True)
    assert maze.check_answer(q, via_top) == maze.check_answer(q, via_left) == 4
    with pytest.raises(maze.MazeError, match="not_shortest"):
        maze.check_answer(q, detour)


def test_build_store_and_eval_only_store(tmp_path):
    out = maze.build("generate", tmp_path / "m", size=11, num=12, test_fraction=0.25, aug=3, seed=2,
                     log=lambda m: None)
    splits = open_store(tmp_path / "m")
    assert splits["train"].meta.task == "maze" and splits["train"].meta.seq_len == 121
    assert len(splits["train"]) == 9 * 4 and splits["train"].num_groups == 9 and len(splits["test"]) == 3
    assert out["counts"] == {"test": 3, "train": 36}
    maze.build("generate", tmp_path / "e", size=11, num=5, test_fraction=1, seed=3, log=lambda m: None)
    assert sorted(open_store(tmp_path / "e")) == ["test"]


class TinySplit:  # only what the scorer reads
    class meta:
        seq_len = 9
        grid_shape = (3, 3)


def test_scorer_counts_another_shortest_path_as_valid_not_exact(tmp_path):
    q = maze.parse("S  " "   " "  G", allow_path=False)
    label = maze.parse("Soo" "  o" "  G", allow_path=True)
    other = maze.parse("S  " "o  " "ooG", allow_path=True)
    wrong = maze.parse("So " "   " "  G", allow_path=True)
    scorer = maze.MazeScorer(TinySplit)
    batch = Batch(inputs=np.stack([q.ravel()] * 3), labels=np.stack([label.ravel()] * 3),
                  puzzle_ids=np.zeros(3, np.int64))
    scorer.add(batch, np.stack([label.ravel(), other.ravel(), wrong.ravel()]), np.zeros(3))
    r = scorer.result()
    assert r["valid_path_accuracy"] == 2 / 3 and r["other_shortest_paths"] == 1
    # path cells: 3 per maze; marked 3 + 3 + 1, of them on the label's path 3 + 0 + 1
    assert r["path_precision"] == pytest.approx(4 / 7) and r["path_recall"] == pytest.approx(4 / 9)


def test_valid_paths_are_tallied_by_the_length_of_the_shortest_path():
    from trmkit.tasks.maze.score import length_band
    assert [length_band(s) for s in (1, 19, 20, 79, 80, 319, 320, 900)] == \
        ["0-19", "0-19", "20-39", "40-79", "80-159", "160-319", "320+", "320+"]

    class Split15:
        class meta:
            seq_len = 225
            grid_shape = (15, 15)
    rng = np.random.default_rng(1)
    mazes = [maze.generate_maze(15, rng, 0.1, min_path=lo, max_path=hi) for lo, hi in ((4, 10), (45, 60), (45, 60))]
    questions, answers = np.stack([q.ravel() for q, _, _ in mazes]), np.stack([a.ravel() for _, a, _ in mazes])
    preds = answers.copy()
    preds[2] = questions[2]  # no path marked on the third maze: wrong
    scorer = maze.MazeScorer(Split15)
    scorer.add(Batch(inputs=questions, labels=answers, puzzle_ids=np.zeros(3, np.int64)), preds, np.zeros(3))
    r = scorer.result()
    band = "40-79"  # the two longer routes
    assert r["valid_by_length/0-19"] == 1.0 and r["mazes_by_length/0-19"] == 1
    assert r[f"valid_by_length/{band}"] == 0.5 and r[f"mazes_by_length/{band}"] == 2
    assert r["valid_path_accuracy"] == 2 / 3


def test_marks_on_given_cells_are_not_marks_and_the_open_cell_loss_has_its_bound():
    q = maze.parse("S #" "  #" "  G", allow_path=False)
    label = maze.parse("So#" "oo#" "  G", allow_path=True)  # not a real shortest path: only cells count here
    pred = label.copy()
    pred[0, 2] = maze.PATH  # a mark on a wall: the input gives that cell, the mark is ignored
    scorer = maze.MazeScorer(TinySplit)
    confident = np.full((1, 9, 6), -50.0)
    confident[0, np.arange(9), label.ravel()] = 50.0  # every open cell right, with high probability
    scorer.add(Batch(inputs=q.reshape(1, 9), labels=label.reshape(1, 9), puzzle_ids=np.zeros(1, np.int64)),
               pred.reshape(1, 9), np.zeros(1), logits=confident)
    r = scorer.result()
    assert r["path_precision"] == 1.0 and r["path_recall"] == 1.0
    p = 3 / 5  # 3 path cells among the 5 open ones
    assert r["base_rate_loss"] == pytest.approx(-(p * np.log(p) + (1 - p) * np.log(1 - p)))
    assert r["open_cell_loss"] < 0.1 * r["base_rate_loss"] and r["loss_over_base_rate"] < 0.1
    assert r["path_recall_at_precision_0.8"] == 1.0


def test_recall_at_precision_reads_the_curve_not_the_argmax():
    from trmkit.tasks.maze.score import BINS, recall_at_precision
    on, off = np.zeros(BINS, np.int64), np.zeros(BINS, np.int64)
    on[900], on[300], on[100] = 6, 2, 2  # 10 path cells: 6 sure, 4 below one half
    off[800], off[400], off[200] = 1, 3, 20  # one sure mistake, the rest under the path cells' middle
    # p >= 0.9: 6/6; >= 0.8: 6/7 = 0.857 -> recall 0.6 at precision >= 0.8; >= 0.4: 6/10, below the floor
    assert recall_at_precision(on, off, 0.8) == pytest.approx(0.6)
    assert recall_at_precision(on, off, 0.5) == pytest.approx(0.8)  # p >= 0.3: 8 of 12 marked are path
    assert recall_at_precision(on, off, 1.0) == pytest.approx(0.6)
    assert recall_at_precision(np.zeros(BINS, np.int64), off, 0.8) == 0.0  # no threshold reaches it


def test_cli_builds_a_maze_store(tmp_path):
    proc = procs.run([sys.executable, "-m", "trmkit.cli", "data", "maze", "--size", "9", "--num", "6",
                      "--min-path", "6", "--out", str(tmp_path / "d")], capture_output=True, text=True,
                     timeout=SAFETY_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "d" / "train" / "meta.json").read_text())
    assert meta["task"] == "maze" and meta["build"]["min_path"] == 6
    bad = procs.run([sys.executable, "-m", "trmkit.cli", "data", "maze", "--source", str(tmp_path / "no.csv"),
                     "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=SAFETY_TIMEOUT)
    assert bad.returncode == 2 and "maze file not found" in bad.stderr


def test_a_curriculum_makes_half_the_training_mazes_shorter_and_leaves_the_test_mazes_hard(tmp_path):
    out = maze.build("generate", tmp_path / "c", size=11, num=40, min_path=16, train_min_path=2,
                     test_fraction=0.25, seed=1, log=lambda m: None)
    assert out["train_min_path"] == 2
    splits = open_store(tmp_path / "c")
    lengths = {name: (np.asarray(s.labels) == maze.PATH).sum(axis=1) + 1 for name, s in splits.items()}
    assert lengths["test"].min() >= 16  # held-out mazes keep the hardness
    assert (lengths["train"] < 16).sum() >= 5 and (lengths["train"] >= 16).sum() >= 5
    with pytest.raises(ValueError, match="--train-min-path"):
        maze.build("generate", tmp_path / "x", size=11, num=4, min_path=16, train_min_path=20, log=lambda m: None)
