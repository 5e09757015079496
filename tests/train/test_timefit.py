"""`trmkit train --minutes N`: max_steps (so the lr schedule) fitted to the time from the step time."""
import json

import yaml

from trmkit import cli
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train.depth import fitted_max_steps
from trmkit.train.timefit import FIT_AFTER_S, TimeFit


def test_the_fit_ends_the_schedule_with_the_budget_and_is_made_again_as_the_step_time_settles():
    fit = TimeFit(budget_s=600.0, start_s=0.0)
    assert fit.marks == [FIT_AFTER_S, 150.0, 300.0]
    seen = []
    now = 2.0  # the first step (compile) took 2 s and is not timed
    for step in range(1, 4000):
        due = fit.observe(step, now)
        if due:
            seen.append((step, due[0]))
        now += 0.1 if step < 1000 else 0.2  # the machine slows down: the refit sees it
    assert [s for s, _ in seen] == [301, 1251, 2001]  # 30, 150, 300 s after the first step
    assert abs(seen[0][1] - (301 + (600 - 32.0) / 0.1)) <= 1  # 0.1 s/step measured over steps 2-301
    assert seen[2][1] < seen[0][1]  # slower steps: fewer of them fit in the budget
    assert fitted_max_steps(10, (0, 10.0), 10.0, 10, None, ())[0] == 20  # 1 s/step, 10 s left
    assert fitted_max_steps(10, (0, 10.0), -100.0, 10, None, ())[0] == 11  # past the budget: one more step


def test_a_fit_sets_max_steps_in_the_loop_and_in_the_run_config(tmp_path, monkeypatch, capsys):
    build_sudoku("generate", tmp_path / "data", num_generate=60, givens="40-44", test_fraction=0.2,
                 aug=1, seed=3, log=lambda m: None)
    (tmp_path / "tiny.yaml").write_text(
        "run: {seed: 0, threads: 1, compile: 'off', dtype: float32}\n"
        "model: {mixer: mlp_t, hidden_size: 16, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, "
        "puzzle_emb_len: 0}\n"
        "train: {batch_size: 8, max_steps: 500, warmup_steps: 2, eval_every: 0, checkpoint_minutes: 0, "
        "log_every: 1}\n")

    def observe(self, step, now, max_steps=0):  # the clock is not read: a fit at step 3 to 6 steps
        return (6, "six steps fit the budget") if step == 3 else None

    monkeypatch.setattr(TimeFit, "observe", observe)
    run = tmp_path / "run"
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), "--minutes", "5", f"run.dir={run}",
                     f"data.path={tmp_path / 'data'}"]) == 0
    out = capsys.readouterr().out
    assert "time: train.max_steps will be fitted to 5 minutes" in out and "time: six steps fit the budget" in out
    saved = yaml.safe_load((run / "config.yaml").read_text())["train"]
    assert saved["max_steps"] == 6 and saved["fit_to_time"] is True and saved["max_minutes"] == 5
    assert json.loads((run / "summary.json").read_text())["steps"] == 6
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), "--minutes", "0", f"run.dir={tmp_path / 'r2'}"]) == 2
    assert "--minutes 0: give a positive number of minutes" in capsys.readouterr().err
