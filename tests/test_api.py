"""The Python API (trmkit/api.py) and the examples/ scripts that use it."""
import json
import sys
from pathlib import Path

import pytest

import trmkit
from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"run.threads": 1, "run.compile": "off", "run.dtype": "float32", "model.hidden_size": 16,
        "model.L_layers": 1, "model.halt_max_steps": 2, "train.batch_size": 16, "train.max_steps": 12,
        "train.eval_every": 0, "train.checkpoint_minutes": 0}


def test_import_trmkit_does_no_work_and_names_its_functions():
    code = "import sys, trmkit; print('trmkit.api' in sys.modules, 'torch' in sys.modules, sorted(trmkit.__all__))"
    out = procs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SAFETY_TIMEOUT).stdout
    assert out.startswith("False False") and "'fit'" in out and "'classify_mail'" in out
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        trmkit.trian  # noqa: B018


def test_build_train_load_and_evaluate_from_python(tmp_path):
    data = trmkit.build_data("sudoku", tmp_path / "data", log=lambda m: None, source="generate", num=60,
                             givens="40-44", aug=1, test_fraction=0.2)
    run = trmkit.fit(ROOT / "configs/sudoku-laptop.yaml", {**TINY, "data.path": data, "run.dir": tmp_path / "run"},
                       log=lambda m: None)
    assert run.summary["steps"] == 12 and 0.0 <= run.summary["cell_accuracy"] <= 1.0
    again = trmkit.load(tmp_path / "run")
    assert again.config.train.max_steps == 12 and again.config.model.hidden_size == 16
    curve = again.evaluate(steps=[1, 2], log=lambda m: None)
    assert set(curve["steps"]) == {1, 2} and curve["trained_steps"] == 2
    assert json.loads((tmp_path / "run" / "eval_steps.json").read_text())  # kept for the report, as the CLI does
    auto = again.evaluate(steps="auto:3", log=lambda m: None)  # each example's own K, up to 3
    assert auto["steps"] == "auto" and auto["steps_cap"] == 3 and auto["stable_steps"] == 2
    assert 1 <= auto["steps_used_mean"] <= auto["steps_used_max"] <= 3 and "exact_accuracy" in auto
    with pytest.raises(ConfigError, match="--steps auto evaluates one-shot"):
        again.evaluate(steps="auto", vote=[2])
    one = again.evaluate(steps=[2], select=1, select_from="both", log=lambda m: None)  # the one-shot evaluation
    assert one["select/N"] == 1 and one["select/chose_first"] == 1.0 and one["select/seconds"] >= 0
    assert one["select/steps"] == 2 and one["select/samples"] == one["samples"]
    for key in ("exact_accuracy", "cell_accuracy", "blank_accuracy"):
        assert one[f"select/{key}"] == pytest.approx(one[key]) == pytest.approx(one[f"plurality/{key}"])
    with pytest.raises(ConfigError, match="not --steps auto"):
        again.evaluate(steps="auto", select=4)
    with pytest.raises(ConfigError, match="from 1 to 16"):
        again.evaluate(select=17)


def test_bad_input_is_a_config_error_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="unknown task 'sudok'"):
        trmkit.build_data("sudok", tmp_path / "x")
    with pytest.raises(ConfigError, match="trmkit data sudoku --help"):
        trmkit.build_data("sudoku", tmp_path / "x", colour="red")
    with pytest.raises(ConfigError, match="no config.yaml there"):
        trmkit.load(tmp_path)
    with pytest.raises(ConfigError, match="--minutes -1: give a positive number"):
        trmkit.fit(ROOT / "configs/sudoku-laptop.yaml", minutes=-1)


def test_the_sudoku_example_runs(tmp_path):
    # 4 optimizer steps: the test checks that the example builds, trains, prints and evaluates at
    # K=2,4,8, not how well it learns (each step of its batch of 64 is most of the test's time)
    proc = procs.run([sys.executable, str(ROOT / "examples/sudoku_from_python.py"), str(tmp_path), "4"],
                     capture_output=True, text=True, timeout=SAFETY_TIMEOUT, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cell accuracy" in proc.stdout and "K=8: exact" in proc.stdout


def test_the_own_puzzle_example_runs_and_answers_in_the_inputs_form(tmp_path):
    proc = procs.run([sys.executable, str(ROOT / "examples/own_puzzle.py"), str(tmp_path), "10"],
                     capture_output=True, text=True, timeout=SAFETY_TIMEOUT, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    answer = json.loads(proc.stdout.split("answer:")[1].strip().replace("'", '"'))
    assert len(answer) == 4 and all(len(row) == 4 and set(row) <= {1, 2, 3, 4} for row in answer)


def test_a_section_the_store_s_task_does_not_read_is_refused_by_its_first_changed_key(tmp_path):
    """e-mail's bag settings on a Sudoku store would train without a word: refused, naming the key."""
    from trmkit import config as config_mod
    from trmkit import registry
    from trmkit.api import task_hooks
    from trmkit.tasks.sudoku.build import build_sudoku

    build_sudoku("generate", tmp_path / "data", num_generate=8, givens="40-45", test_fraction=0.25, aug=1,
                 seed=1, log=lambda m: None)
    (tmp_path / "cfg.yaml").write_text("model: {hidden_size: 16}\n")
    load = lambda *extra: config_mod.load(tmp_path / "cfg.yaml", [f"data.path={tmp_path / 'data'}", *extra],  # noqa: E731
                                          registry.SECTIONS)
    assert task_hooks(load())["parts"] is None  # the task's own: nothing to refuse
    assert task_hooks(load("maze.hardness=0"))["parts"] is None  # a section at its defaults changes nothing
    with pytest.raises(ConfigError, match=r"email.input_linear=True: the 'email' section is not read by this "
                                          r"store's task \(sudoku\)"):
        task_hooks(load("email.input_linear=true"))
    with pytest.raises(ConfigError, match=r"maze.hardness=12: the 'maze' section"):
        task_hooks(load("maze.hardness=12"))
