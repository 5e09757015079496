"""`trmkit eval --checker`: one-shot answers scored by the task's checker, no label read (adapt/checked.py)."""

import numpy as np
import pytest

import trmkit
from trmkit import config as config_mod
from trmkit import hardware, registry
from trmkit.api import task_hooks
from trmkit.config import ConfigError
from trmkit.train.run import run


def test_a_pairs_run_is_scored_by_the_user_s_function_and_no_label_is_read(tmp_path):
    from tests.tiny import PAIRS_TINY, pairs_jsonl
    from trmkit.tasks.pairs.build import build_pairs

    pairs_jsonl(tmp_path / "p.jsonl")
    build_pairs(tmp_path / "p.jsonl", tmp_path / "data", test_fraction=0.25, seed=0, log=lambda m: None)
    (tmp_path / "cfg.yaml").write_text(PAIRS_TINY)
    cfg = config_mod.load(tmp_path / "cfg.yaml", [f"data.path={tmp_path / 'data'}", f"run.dir={tmp_path / 'run'}",
                                                  "train.max_steps=10", "train.lr=3e-3"], registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    (tmp_path / "check.py").write_text("def check(i, o):\n    return all(3 - a == b for r, s in zip(i, o) "
                                       "for a, b in zip(r, s))\n")
    said: list[str] = []
    result = trmkit.evaluate(tmp_path / "run", checker=f"{tmp_path / 'check.py'}:check", log=said.append)
    assert result["checker_problems"] == 6 and "your function check(input, output)" in result["checker"]
    # each input has one right answer, its label: the checker accepts what exact match counts (here 5 of the 6
    # after 10 steps)
    assert result["checker_one_shot"] == pytest.approx(result["exact_accuracy"])
    assert any("eval: --checker:" in line and "no label read" in line for line in said)
    labels = tmp_path / "data" / "test" / "labels.npy"
    scrambled = np.load(labels)
    scrambled[:, :] = scrambled[::-1, ::-1]
    np.save(labels, scrambled)
    again = trmkit.evaluate(tmp_path / "run", checker=f"{tmp_path / 'check.py'}:check", log=lambda m: None)
    assert again["checker_one_shot"] == result["checker_one_shot"] and again["exact_accuracy"] == 0
    with pytest.raises(ConfigError, match="pass --checker FILE.py:FUNCTION"):
        trmkit.evaluate(tmp_path / "run", checker="", log=lambda m: None)
    with pytest.raises(ConfigError, match="no file .*nope.py"):  # before the model loads
        trmkit.evaluate(tmp_path / "run", checker=f"{tmp_path / 'nope.py'}:check", log=lambda m: None)


def test_a_sudoku_run_is_scored_by_the_rules_at_k_or_until_stable(base):
    result = trmkit.evaluate(base / "run", base / "new", checker="", log=lambda m: None)
    assert result["checker_problems"] == 3 and "Sudoku" in result["checker"]
    assert result["checker_one_shot"] == pytest.approx(result["valid_solution_accuracy"])
    auto = trmkit.evaluate(base / "run", base / "new", steps="auto", checker="", log=lambda m: None)
    assert auto["checker_problems"] == 3 and 0.0 <= auto["checker_one_shot"] <= 1.0
    with pytest.raises(ConfigError, match="--checker mine.py:f: task sudoku checks answers with its own rules"):
        trmkit.evaluate(base / "run", base / "new", checker="mine.py:f", log=lambda m: None)
