"""`trmkit adapt`'s other arms: the TR-RPG arm runs on the one trainer and logs its
rounds, gets no policy gradient from a checker that rejects everything, resumes exactly; the vote control never
asks the checker; the continue control trains on the original source only.

Tiny sizes, bounded by steps: the 76k-parameter model of tests/adapt/test_adapt.py (16 generated Sudoku, 4 steps),
adapted on 12 others with stand-in checkers that read only inputs and answers.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.adapt.test_adapt import SMALL, accept_some, cut_back, plugins, reject_all, rounds, same_weights, weights
from tests.adapt.test_adapt import adapted as adapted_from
from trmkit import config as config_mod
from trmkit import registry, rundir
from trmkit.adapt.command import adapt, new_config
from trmkit.cli import main
from trmkit.config import ConfigError
from trmkit.monitor.loggers import read_metrics
from trmkit.tasks.base import Checking

RPG = ["adapt.objective=tr-rpg", "adapt.rpg_problems=4", "adapt.trajectories=4"]
OFF = ["adapt.kl_coef=0", "adapt.rpg_replay=0", "adapt.rpg_beta=0"]  # no term but the policy gradient


def accept_half_cells(meta, spec):
    """Accepts an answer whose cells are at least half odd tokens: mixed outcomes among a problem's tries."""
    return Checking(check=lambda x, a: (np.asarray(a) % 2 == 1).mean(1) >= 0.5, describe="stand-in: half odd")


def refuses_to_be_asked(meta, spec):
    def check(x, a):
        raise AssertionError("the vote control asked the checker")
    return Checking(check=check, describe="stand-in: raises when called")


def adapted(base: Path, out: Path, checker, *extra: str, said: list | None = None) -> dict:
    return adapted_from(base, base / "new", out, checker, *extra, said=said)


def steps_logged(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(rundir.path(run_dir, rundir.METRICS)) if "rpg/reward_mean" in r]


def test_tr_rpg_trains_on_the_one_trainer_and_logs_its_rounds(base, tmp_path):
    said = []
    result = adapted(base, tmp_path / "a", accept_half_cells, *RPG, "adapt.rpg_epochs=1", said=said)
    assert result["steps"] == 4 and "cell_accuracy" in result  # the original held-out split, as a plain run's
    records = rounds(tmp_path / "a")
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all({"adapt/kept", "adapt/heldout_one_shot", "adapt/reward_mean"} <= set(r) for r in records[1:])
    steps = steps_logged(tmp_path / "a")
    assert len(steps) == 4 and any(0 < s["rpg/reward_mean"] < 1 for s in steps)  # mixed groups: a gradient
    assert any(s["rpg/advantage_abs"] > 0 for s in steps) and all(s["rpg/updated"] == 1 for s in steps)
    assert all(s["rpg/ratio"] == pytest.approx(1.0, abs=1e-5) for s in steps)  # one update: pi_old is pi_theta
    assert any("arm tr-rpg" in line for line in said) and any("cells drawn from" in line for line in said)
    assert not same_weights(weights(tmp_path / "a"), weights(base / "run"))
    identity = json.loads(rundir.path(tmp_path / "a", rundir.DATA_META).read_text())
    assert identity == json.loads(rundir.path(base / "run", rundir.DATA_META).read_text())


def test_a_checker_that_rejects_everything_gives_no_advantage(base, tmp_path):
    before = weights(base / "run")
    adapted(base, tmp_path / "off", reject_all, *RPG, *OFF)
    assert all(s["rpg/advantage_abs"] == 0 and s["rpg/reward_mean"] == 0 for s in steps_logged(tmp_path / "off"))
    assert same_weights(weights(tmp_path / "off"), before)  # no term left: not even weight decay moved them
    adapted(base, tmp_path / "replay", reject_all, *RPG, "adapt.kl_coef=0", "adapt.rpg_beta=0")
    steps = steps_logged(tmp_path / "replay")
    assert all(s["rpg/advantage_abs"] == 0 and s["rpg/replay_loss"] > 0 for s in steps)
    assert not same_weights(weights(tmp_path / "replay"), before)  # moved by the replay term alone


def test_tr_rpg_resumes_exactly_after_a_kill(base, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    adapted(base, whole, accept_half_cells, *RPG, "adapt.kl_coef=0.1", "train.checkpoint_every=1",
            "train.keep_checkpoints=10", "adapt.rounds=3")
    cut_back(whole, cut, 3)
    cfg = config_mod.load(rundir.path(cut, rundir.CONFIG), [f"run.dir={cut}"], registry.SECTIONS)
    assert adapt(cfg, plugins(accept_half_cells), resume=True, log=lambda m: None)["steps"] == 6
    assert same_weights(weights(cut), weights(whole))
    assert [s["rpg/reward_mean"] for s in steps_logged(cut)][-3:] == [s["rpg/reward_mean"]
                                                                      for s in steps_logged(whole)][-3:]


def test_the_vote_control_never_asks_the_checker(base, tmp_path):
    said = []
    p = plugins(refuses_to_be_asked)
    cfg = new_config(base / "run", base / "new", p, overrides=[*SMALL, "adapt.heldout=0", "adapt.vote_share=0.5"],
                     out=str(tmp_path / "v"), keep="vote", log=said.append)  # as `--keep vote`
    adapt(cfg, p, log=said.append)
    records = rounds(tmp_path / "v")
    assert records[0]["adapt/kept"] > 0 and any("arm vote (a control)" in line for line in said)
    assert not same_weights(weights(tmp_path / "v"), weights(base / "run"))


def test_the_continue_control_solves_nothing_and_trains_on_the_original_source(base, tmp_path, capsys):
    code = main(["adapt", str(base / "run"), "--data", str(base / "new"), "--out", str(tmp_path / "c"),
                 "--objective", "continue", *SMALL])
    assert code == 0 and "arm continue (a control)" in capsys.readouterr().out
    records = rounds(tmp_path / "c")
    assert [r["adapt/tried"] for r in records] == [0, 0, 0] and records[-1]["adapt/replay_share"] == 1.0
    assert not same_weights(weights(tmp_path / "c"), weights(base / "run"))


def test_arms_that_cannot_work_are_refused_with_the_reason(base, tmp_path):
    with pytest.raises(ConfigError, match="tr-rpg's reward is the checker's verdict"):
        adapted(base, tmp_path / "x", accept_some, "adapt.objective=tr-rpg", "adapt.keep=vote")
    with pytest.raises(ConfigError, match="at least 2"):
        adapted(base, tmp_path / "y", accept_some, "adapt.objective=tr-rpg", "adapt.trajectories=1")


def test_the_policy_is_the_distribution_the_model_was_trained_to_give():
    """A stable-max model's tries are drawn from stable-max, not from a softmax of its logits (near one-hot:
    logits tens of units apart); the try's log-probability is the sum of its credited cells'."""
    import torch

    from trmkit.adapt.trrpg import _draw, _try_logp, cell_logp

    logits = torch.tensor([[[2.0, 0.0, -1.0], [30.0, 0.0, 0.0]]])  # (1, 2, 3)
    stable = cell_logp(logits, 1.0, "stablemax").exp()
    assert torch.allclose(stable[0, 0], torch.tensor([3.0, 1.0, 0.5]) / 4.5)  # s(x) = x + 1, 1 / (1 - x)
    assert stable[0, 1, 0] == pytest.approx(31 / 33)  # a softmax would give 1 - 2e-13
    assert cell_logp(logits, 1.0, "softmax")[0, 1, 0] > -1e-9
    credit = torch.tensor([[True, False]])
    tries = _draw(cell_logp(logits, 1.0, "stablemax"), 4000, credit, torch.Generator().manual_seed(0))
    shares = torch.bincount(tries[0, :, 0], minlength=3).float() / 4000
    assert torch.allclose(shares, stable[0, 0], atol=0.03)
    assert (tries[0, :, 1] == 0).all()  # an uncredited cell is the argmax
    logp = _try_logp(cell_logp(logits, 1.0, "stablemax"), tries[:, :3], credit)
    assert torch.allclose(logp, stable[0, 0].log()[tries[0, :3, 0]].unsqueeze(0))
