"""`trmkit bench --learn`: a tiny config on a tiny fixed set for a few seconds of training.

The real set (1000 + 200 puzzles, aug 100) takes ~20 s to build, so the tests swap
learn.FIXED_SET for a 12 + 4 puzzle set with monkeypatch.
"""

import contextlib
import io
import json
import time

import pytest

from trmkit import cli, hardware, learn
from trmkit import config as config_mod
from trmkit.config import ConfigError
from trmkit.tasks.sudoku import SudokuLearnSet
from trmkit.train import evaluate, session

TINY = """
run: {seed: 0, threads: 1, dtype: float32, compile: "off"}
model: {mixer: mlp_t, hidden_size: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, lr: 1.0e-3, warmup_steps: 2, ema_decay: 0.9, ema_warmup: true, max_steps: 5}
"""
SMALL = SudokuLearnSet(train_puzzles=12, test_puzzles=4, givens="30-32", aug=1, seed=3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two CLI runs on the same --data-dir: --json (builds the set; the lr schedule fitted to the
    budget), then the table (reuses the set; the config's schedule)."""
    root = tmp_path_factory.mktemp("learn")
    (root / "tiny.yaml").write_text(TINY)
    outputs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(learn, "FIXED_SET", SMALL)
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        for extra in (["--json"], ["--schedule", "config", "--keep", str(root / "kept")]):
            args = ["bench", "--learn", "0.02", "--every", "0.01", str(root / "tiny.yaml"),
                    "--data-dir", str(root / "data"), *extra]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(args)
            outputs.append((code, out.getvalue(), err.getvalue()))
    return root, outputs


def test_curve_has_increasing_points_with_metrics_in_range(runs):
    _, outputs = runs
    code, out, err = outputs[0]
    assert code == 0, err
    points = json.loads(out)
    assert len(points) >= 2  # marks at 0.01 and 0.02 min
    minutes = [p["minutes"] for p in points]
    assert minutes == sorted(minutes) and len(set(minutes)) == len(minutes)
    assert minutes[0] >= 0.01 and minutes[-1] >= 0.02  # trained at least up to each mark
    steps = [p["steps"] for p in points]
    assert steps == sorted(steps) and steps[0] >= 1 and len(set(steps)) == len(steps)
    for p in points:
        assert p["samples"] == 8 * p["steps"]  # batch 8: one slot update per slot per step
        for key in ("blank_accuracy", "exact_accuracy", "cell_accuracy"):
            assert 0.0 <= p[key] <= 1.0, (key, p)
        assert p["wall_minutes"] >= p["minutes"]
    assert "building" in err and "learn: schedule: train.max_steps=" in err  # fitted after 0.6 s


def test_second_run_reuses_the_set_and_prints_a_table(runs):
    _, outputs = runs
    code, out, err = outputs[1]  # without --json the progress lines go to stdout too
    assert code == 0, err
    assert "reusing" in out and "building" not in out
    assert "= train.max_steps" in out and "learn: schedule" not in out  # step 5 passed: the lr note
    header = next(i for i, line in enumerate(out.splitlines()) if line.startswith("minutes "))
    lines = out.splitlines()[header:]
    assert lines[0].split()[:6] == ["minutes", "steps", "samples", "blank_acc", "exact_acc", "cell_acc"]
    assert len(lines) == 2 + 2 + 1  # header, rule, two points, the note
    assert "evaluation (eval_s) is not counted" in lines[-1]


def test_kept_weights_evaluate_to_the_curve_s_last_point(runs):
    root, outputs = runs
    out = outputs[1][1]
    last = out.splitlines()[next(i for i, line in enumerate(out.splitlines()) if line.startswith("minutes ")) + 3]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["eval", str(root / "kept")])
    assert code == 0, err.getvalue()
    evals = json.loads(out.getvalue())
    assert f"{evals['exact_accuracy']:.3f}" == last.split()[4]  # the same weights, the same held-out set


def test_the_set_is_rebuilt_when_its_arguments_differ(runs):
    root, _ = runs
    data = root / "data"
    assert learn.ensure_dataset(SMALL, data, log=lambda m: None) is False
    before = (data / "test" / "inputs.npy").read_bytes()
    notes = []
    other = SudokuLearnSet(train_puzzles=12, test_puzzles=4, givens="30-32", aug=1, seed=4)
    assert learn.ensure_dataset(other, data, log=notes.append) is True
    assert any("seed: 3 -> 4" in n for n in notes), notes
    assert (data / "test" / "inputs.npy").read_bytes() != before
    assert learn.ensure_dataset(other, data, log=lambda m: None) is False


def test_a_directory_that_is_not_a_store_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a trmkit store"):
        learn.ensure_dataset(SMALL, tmp_path, log=lambda m: None)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_evaluation_time_is_not_counted_as_training(runs, monkeypatch):
    root, _ = runs
    real_eval = evaluate.run_eval

    def slow_eval(s, limit=None):
        time.sleep(1.5)
        return real_eval(s, limit)

    monkeypatch.setattr(evaluate, "run_eval", slow_eval)
    cfg = config_mod.load(root / "tiny.yaml")
    points = learn.learning_curve(cfg, hardware.probe(), 0.02, 0.01, root / "data", SMALL, log=lambda m: None)
    assert [p.eval_seconds >= 1.5 for p in points] == [True, True]
    # 1.2 s of training; had the first 1.5 s evaluation counted, the second point would be >= 2.1 s
    assert 1.2 <= points[1].minutes * 60 < 2.0
    assert points[1].steps > points[0].steps + 1
    assert points[1].wall_minutes * 60 >= 1.2 + 2 * 1.5


class StepClock(session.Clock):
    """Training time of 20 ms per step whatever the machine's speed, so the points of a curve fall at
    fixed step counts (30 and 60 for marks at 0.01 and 0.02 min) and its accuracies are reproducible."""

    def train_seconds(self) -> float:
        return self.samples // 8 / 50  # batch 8


def test_the_curve_learns_well_above_chance(runs, monkeypatch):
    """The real-time curve above takes as many steps as the machine allows (4 and 7 beside six busy
    processes, ~55 and ~110 here when idle); this one takes a fixed number. Every solved grid holds
    each digit 9 times, so a prediction that ignores the puzzle gets 1/9 of the cells right (the
    untrained model: cell 0.114, loss 2.457). In a few seconds this tiny set teaches the model to copy
    the givens (30-32 of 81 cells), not to solve blanks: blank accuracy measured 0.09-0.15 up to
    step 300, chance level, so it is not asserted."""
    root, _ = runs
    monkeypatch.setattr(session, "Clock", StepClock)
    cfg = config_mod.load(root / "tiny.yaml")
    points = learn.learning_curve(cfg, hardware.probe(), 0.02, 0.01, root / "data", SMALL, log=lambda m: None)
    assert [p.steps for p in points] == [30, 60]
    first, last = points
    # measured: cell accuracy 0.404 at step 30 and 0.448 at step 60, loss 2.017 -> 1.962
    assert first.cell_accuracy > 0.3 and last.cell_accuracy > 0.4  # 1/9 = 0.111 without learning
    assert last.cell_accuracy >= first.cell_accuracy and last.loss < first.loss - 0.02


def test_a_target_stops_the_curve_at_the_first_evaluation_that_reaches_it(runs, monkeypatch):
    root, _ = runs
    monkeypatch.setattr(session, "Clock", StepClock)  # points at steps 30 and 60, as above
    cfg = config_mod.load(root / "tiny.yaml")
    said = []
    points = learn.learning_curve(cfg, hardware.probe(), 0.02, 0.01, root / "data", SMALL, log=said.append,
                                  target=("cell_accuracy", 0.3))  # measured 0.404 at step 30
    assert [p.steps for p in points] == [30] and any("reached; training stops" in m for m in said)
    assert learn.time_to_target(points, ("cell_accuracy", 0.3)).startswith("time to cell_accuracy >= 0.3: ")
    assert "step 30" in learn.time_to_target(points, ("cell_accuracy", 0.3))
    assert "not reached" in learn.time_to_target(points, ("exact_accuracy", 1.01))
    with pytest.raises(ConfigError, match="no valid_path_accuracy; use one of exact_accuracy, cell_accuracy"):
        learn.point_value(points[0], "valid_path_accuracy")
    assert learn.parse_target("exact_accuracy=0.825") == ("exact_accuracy", 0.825)
    for bad in ("exact_accuracy", "=0.5", "exact_accuracy=high"):
        with pytest.raises(ConfigError, match="write METRIC=VALUE"):
            learn.parse_target(bad)


def test_marks():
    assert learn.marks(1.0) == [0.25, 0.5, 0.75, 1.0]
    assert learn.marks(1.0, 0.4) == pytest.approx([0.4, 0.8, 1.0])
    assert learn.marks(15, 5) == [5, 10, 15]
    assert learn.marks(0.1, 1.0) == [0.1]
    assert learn.marks(60, [30, 15, 90]) == [15, 30, 60]
    assert learn.parse_every("15,30") == [15.0, 30.0] and learn.parse_every("2.5") == 2.5
    assert learn.parse_every(None) is None
    with pytest.raises(ConfigError, match="--every 15,soon"):
        learn.parse_every("15,soon")
    with pytest.raises(ConfigError, match="every mark must be > 0"):
        learn.marks(60, [0, 30])
    for minutes, every in ((0, None), (1.0, 0), (-1, 1)):
        with pytest.raises(ConfigError):
            learn.marks(minutes, every)


def test_step_bench_options_are_refused_with_learn_and_the_reverse(tmp_path, capsys):
    (tmp_path / "tiny.yaml").write_text(TINY)
    assert cli.main(["bench", str(tmp_path / "tiny.yaml"), "--every", "1"]) == 2
    assert "need --learn" in capsys.readouterr().err
    assert cli.main(["bench", str(tmp_path / "tiny.yaml"), "--schedule", "config"]) == 2
    assert "need --learn" in capsys.readouterr().err
    assert cli.main(["bench", str(tmp_path / "tiny.yaml"), "--target", "exact_accuracy=0.5"]) == 2
    assert "need --learn" in capsys.readouterr().err
    assert cli.main(["bench", "--learn", "1", str(tmp_path / "tiny.yaml"), "--save", "x.json"]) == 2
    assert "not to --learn" in capsys.readouterr().err


def test_an_unknown_schedule_is_refused(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    cfg = config_mod.load(tmp_path / "tiny.yaml")
    with pytest.raises(ConfigError, match="--schedule weekly"):
        learn.learning_curve(cfg, hardware.probe(), 0.02, None, tmp_path / "d", SMALL, schedule="weekly")


def test_a_maze_curve_uses_the_maze_set_and_reports_its_scorer(tmp_path, monkeypatch):
    from trmkit.tasks import maze

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "tiny.yaml").write_text(TINY)
    cfg = config_mod.load(tmp_path / "tiny.yaml")
    spec = maze.MazeLearnSet(size=7, train_mazes=12, test_mazes=4, min_path=4, aug=1)
    logs = []
    points = learn.learning_curve(cfg, hardware.probe(), 0.01, None, tmp_path / "m", spec, log=logs.append,
                                  task=maze.TASK)
    assert any("7x7 mazes, shortest paths >= 4 steps" in line for line in logs)
    last = points[-1]
    assert last.blank_accuracy is None and 0.0 <= last.task_metrics["valid_path_accuracy"] <= 1.0
    table = "\n".join(learn.format_table(points))
    assert "valid_path_accuracy" in table and "        -" in table  # no blank cells in a maze
    assert learn.learn_set(maze.TASK) is maze.TASK.learn_set
