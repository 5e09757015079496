"""train.best_margin: which evaluation becomes the best checkpoint, and the standard error it reads."""
from types import SimpleNamespace

import numpy as np
import pytest

from trmkit.config import Config, ConfigError, TrainConfig
from trmkit.tasks.classify.metrics import bootstrap_se
from trmkit.train import loop


def _session(margin: str) -> SimpleNamespace:
    cfg = Config()
    cfg.train.best_metric, cfg.train.best_margin = "macro_f1", margin
    return SimpleNamespace(cfg=cfg, data=SimpleNamespace(val=object()), state=SimpleNamespace(step=0),
                           best={"value": None, "step": None, "evals_since": 0})


def _evaluate(s, monkeypatch, scores) -> list[str]:
    """Periodic evaluations at steps 100, 200, ... returning (macro_f1, its standard error)."""
    said: list[str] = []
    for i, (value, se) in enumerate(scores):
        s.state.step = 100 * (i + 1)
        monkeypatch.setattr(loop, "_timed_eval", lambda *a, v=value, e=se, **k: {"macro_f1": v, "se/macro_f1": e})
        loop._periodic_eval(s, None, None, said.append)
    return said


SCORES = [(0.950, 0.03), (0.967, 0.03), (0.940, 0.03), (0.990, 0.03)]


def test_without_a_margin_any_higher_value_is_the_new_best(monkeypatch):
    s = _session("none")
    _evaluate(s, monkeypatch, SCORES[:3])
    assert s.best["step"] == 200 and s.best["value"] == pytest.approx(0.967) and s.best["evals_since"] == 1


def test_with_se_a_gain_within_the_standard_error_keeps_the_earlier_best_and_says_so(monkeypatch):
    s = _session("se")
    said = _evaluate(s, monkeypatch, SCORES[:3])
    assert s.best["step"] == 100 and s.best["value"] == pytest.approx(0.950) and s.best["evals_since"] == 2
    assert any("within its standard error 0.0300" in line and "(step 100)" in line for line in said)
    s = _session("se")
    _evaluate(s, monkeypatch, SCORES)  # 0.990 at step 400 clears 0.950 + 0.03
    assert s.best["step"] == 400 and s.best["evals_since"] == 0


def test_se_needs_the_task_to_report_it_and_the_key_is_checked():
    with pytest.raises(ConfigError, match="train.best_margin='always'"):
        TrainConfig(best_margin="always")
    s = _session("se")
    s.best.update(value=0.5, step=100)
    with pytest.raises(ConfigError, match="se/macro_f1.*train.best_margin=none"):
        loop._best_margin(s.cfg.train, s.best, {"macro_f1": 0.6}, print)


def test_bootstrap_se_is_the_spread_of_the_score_and_shrinks_with_more_examples():
    rng = np.random.default_rng(1)
    t = rng.integers(0, 3, 400)
    p = np.where(rng.random(400) < 0.8, t, rng.integers(0, 3, 400))  # about 80% right
    small, large = bootstrap_se(t[:50], p[:50], 3), bootstrap_se(t, p, 3)
    assert small == bootstrap_se(t[:50], p[:50], 3)  # fixed seed: the same answer every time
    acc = (t == p).mean()
    assert large["accuracy"] == pytest.approx(np.sqrt(acc * (1 - acc) / 400), rel=0.15)  # binomial
    assert small["macro_f1"] > 1.5 * large["macro_f1"] > 0
    assert bootstrap_se(t, t, 3) == {"accuracy": 0.0, "macro_f1": 0.0}  # all right: nothing to move


def test_without_a_validation_split_nothing_is_chosen_on_the_test_split(monkeypatch):
    """Early stopping and restore_best read a validation split only: on a store without one (e.g.
    built with --keep-labels) they are off, and the run says so."""
    s = _session("none")
    s.cfg.train.early_stop_evals, s.cfg.train.restore_best = 1, True
    s.best.update(value=0.9, step=100, evals_since=5)  # long past its patience
    s.objective = None
    out = SimpleNamespace(progress=SimpleNamespace(close=lambda: None), loggers=None)
    monkeypatch.setattr(loop, "_periodic_eval", lambda *a, **k: {"macro_f1": 0.5})
    monkeypatch.setattr(loop, "_timed_save", lambda *a, **k: pytest.fail("saved a best chosen on test"))
    s.state.step = 700
    for val, stops in ((object(), True), (None, False)):
        s.data.val = val
        if val is None:
            monkeypatch.setattr(loop, "_timed_save", lambda *a, **k: pytest.fail("saved a best chosen on test"))
        else:
            monkeypatch.setattr(loop, "_timed_save", lambda *a, **k: None)
        assert loop._evaluate_in_loop(s, None, out, print)[1] is stops
    said = []
    loop._say_what_needs_val(s, said.append)
    assert said and "train.early_stop_evals=1 and train.restore_best=true off: the store has no validation" in said[0]


def test_an_objective_run_restores_its_best_weights_at_the_end(monkeypatch):
    """A self-play or seeding run has no val/ split: it chooses on its objective's own held-out tasks, and
    the end must still load the best weights (once skipped: `val_current and not restore_best(...)`)."""
    s = _session("none")
    s.cfg.train.restore_best, s.data.val, s.objective = True, None, object()
    s.best.update(value=0.25, step=350)
    s.state.step = 527
    restored = []
    monkeypatch.setattr(loop, "_timed_save", lambda *a, **k: None)
    monkeypatch.setattr(loop, "restore_best", lambda s, log: restored.append(s.best["step"]) or True)
    monkeypatch.setattr(loop, "_timed_eval", lambda *a, **k: {"solve_rate": 0.25})
    assert loop._final_evaluations(s, None, None, {}, print) == {"solve_rate": 0.25}
    assert restored == [350]
