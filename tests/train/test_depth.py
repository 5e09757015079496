"""train.depth_curriculum: fewer recursion cycles in early training steps, the full depth after and in evaluation."""
import json

import pytest
import torch

from trmkit import cli
from trmkit.config import ConfigError, ModelConfig
from trmkit.model.trm import TRM
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train import depth
from trmkit.train.timefit import TimeFit


def test_the_stages_are_cgars_for_its_depth_and_merge_when_a_shallow_model_has_fewer():
    ends = depth.stage_ends("0.3,0.6")
    assert depth.stage_cycles(ModelConfig(H_cycles=3, L_cycles=6), ends) == [(1, 2), (2, 4), (3, 6)]
    shallow = ModelConfig(H_cycles=2, L_cycles=2)
    assert [depth.cycles_at(s, 10, shallow, ends) for s in (0, 2, 3, 5, 6, 9)] == [(1, 1)] * 2 + [(2, 2)] * 4
    assert depth.describe(shallow, ends) == "(T, n) = (1, 1) until 30% of train.max_steps, then (2, 2)"
    assert depth.relative_cost((1, 1), shallow) == 0.5 and depth.stage_ends("") == ()
    for bad in ("0.6,0.3", "1.2", "0.3,x", "0,0.5"):
        with pytest.raises(ConfigError, match="train.depth_curriculum"):
            depth.stage_ends(bad)


def test_a_time_fit_counts_each_step_by_its_depth():
    m, ends = ModelConfig(H_cycles=2, L_cycles=2), depth.stage_ends("0.3,0.6")
    # 100 steps at (1, 1), half the work of a full step, took 50 s: a full step takes 1 s
    total, unit = depth.fitted_max_steps(100, (0, 50.0), 600.0, 1000, m, ends)
    assert unit == pytest.approx(1.0)
    assert depth.cost_between(100, total, total, m, ends) * unit <= 600.0  # the rest fits the time left
    assert depth.cost_between(100, total + 1, total + 1, m, ends) * unit > 600.0  # one more does not
    plain, _ = depth.fitted_max_steps(100, (0, 50.0), 600.0, 1000, m, ())
    assert plain == 100 + 1200 and total < plain  # off: every step is priced at the measured 0.5 s
    assert TimeFit(600.0, 0.0, model=m, ends=ends).marks == [30.0, 150.0, 300.0, 450.0]  # once more at 75%


def test_training_mode_runs_the_curriculum_depth_and_evaluation_the_full_one(monkeypatch):
    cfg = ModelConfig(mixer="mlp_t", hidden_size=16, L_layers=1, H_cycles=2, L_cycles=2, halt_max_steps=2,
                      seq_len=9, vocab_size=5, num_puzzle_ids=1, puzzle_emb_len=0)
    model = TRM(cfg)
    calls = []
    real = model.net.forward
    monkeypatch.setattr(model.net, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    z = model.initial_carry(3)
    inputs, ids = torch.zeros(3, 9, dtype=torch.long), torch.zeros(3, dtype=torch.long)
    model.train_cycles = (1, 1)
    for mode, want in ((model.train, 2), (model.eval, 6)):  # (n + 1) x T network calls
        mode()
        calls.clear()
        model(z.z_H, z.z_L, inputs, ids)
        assert len(calls) == want


def test_a_run_with_the_curriculum_says_its_schedule_and_steps_at_each_depth(tmp_path, capsys):
    build_sudoku("generate", tmp_path / "data", num_generate=40, givens="40-44", test_fraction=0.2,
                 aug=1, seed=3, log=lambda m: None)
    (tmp_path / "tiny.yaml").write_text(
        "run: {seed: 0, threads: 1, compile: 'off', dtype: float32}\n"
        "model: {mixer: mlp_t, hidden_size: 16, L_layers: 1, H_cycles: 2, L_cycles: 2, halt_max_steps: 2, "
        "puzzle_emb_len: 0}\n"
        "train: {batch_size: 8, max_steps: 4, warmup_steps: 1, eval_every: 0, checkpoint_minutes: 0, "
        "log_every: 1, depth_curriculum: '0.5'}\n")
    run = tmp_path / "run"
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), f"run.dir={run}", f"data.path={tmp_path / 'data'}"]) == 0
    said = capsys.readouterr().out
    assert "depth_curriculum=0.5 -> (T, n) = (1, 1) until 50% of train.max_steps, then (2, 2)" in said
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    costs = [r["train/depth_cost"] for r in rows if "train/depth_cost" in r]
    assert costs == [0.5, 0.5, 1.0, 1.0]
