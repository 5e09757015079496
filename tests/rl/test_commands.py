"""`trmkit rl eval`'s text: the headline, then each type and slice with its standard error;
`trmkit rl compare`: paired differences of two evaluations on the same tasks."""

import json

import pytest

from trmkit.config import ConfigError
from trmkit.rl import commands
from trmkit.rl import heldout as H


def test_eval_text_prints_each_type_and_slice_with_its_standard_error():
    items = H.for_config(H.SEED, 20)
    result = H.summarize([i % 2 == 0 for i in range(len(items))], items)
    result["format_rate"] = 1.0
    text = commands.eval_table(result, H.SEED, 20)
    rows = {line.split()[0]: line for line in text.splitlines()[4:]}
    for kind in ("deduction", "abduction", "induction", "all"):
        assert rows[kind].count("±") >= 4, rows[kind]  # all, nontrivial, shortcut and at least one slice
    assert f"{result['solve_rate/nontrivial']:.3f} ± {result['solve_rate/nontrivial/se']:.3f}" in text
    assert "format_rate" in text


def test_compare_prints_paired_differences(tmp_path, capsys):
    spec = {"seed": H.SEED, "per_type": 2}
    for name, solved in (("a", "000000"), ("b", "110000")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"solved": solved, "heldout": spec}))
    args = commands.argparse.Namespace(before=str(tmp_path / "a.json"), after=str(tmp_path / "b.json"))
    assert commands.run_compare(args) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "+0.333" in rows["all"] and "+1.000" in rows["deduction"] and "+0.000" in rows["induction"]


def test_eval_step_best_reads_the_run_s_best_checkpoint(tmp_path):
    said = []
    assert commands.checkpoint_step(tmp_path, None, said.append) is None  # the final weights
    assert commands.checkpoint_step(tmp_path, "450", said.append) == 450
    with pytest.raises(ConfigError, match="keeps no best checkpoint"):
        commands.checkpoint_step(tmp_path, "best", said.append)
    (tmp_path / "checkpoints" / "step-00000350").mkdir(parents=True)
    (tmp_path / "checkpoints" / "best.json").write_text(json.dumps({"name": "step-00000350", "step": 350}))
    assert commands.checkpoint_step(tmp_path, "best", said.append) == 350 and "step 350" in said[-1]
    with pytest.raises(ConfigError, match="--step last"):
        commands.checkpoint_step(tmp_path, "last", said.append)


def test_lm_eval_text_shows_each_kind_and_source_with_its_count_not_the_slices():
    result = {"solve_rate": 0.5, "samples": 4, "solve_rate/deduction": 1.0, "samples/deduction": 2,
              "solve_rate/azr": 0.0, "samples/azr": 2, "solve_rate/builtin/deduction/depth1": 0.25}
    rows = {line.split()[0]: line for line in commands.lm_eval_table(result).splitlines()[1:]}
    assert rows["solve_rate/deduction"].endswith("1.000 (2)") and rows["solve_rate/azr"].endswith("0.000 (2)")
    assert "solve_rate/builtin/deduction/depth1" not in rows  # the slices are in --json
    rows = {line.split()[0]: line for line in commands.lm_eval_table(
        {**result, "unparsable/deduction": 0.25, "unparsable/builtin/deduction/depth1": 1.0}).splitlines()[1:]}
    assert rows["parsed/deduction"].endswith("0.750 (2)") and "parsed/builtin/deduction/depth1" not in rows


def test_an_lm_policy_gets_the_lm_objectives_and_its_own_micro_batch_guard(tmp_path):
    from pathlib import Path

    from trmkit import config as config_mod
    from trmkit.rl.config import APPS

    config = Path(__file__).resolve().parents[2] / "configs" / "selfplay-lm-tiny.yaml"
    cfg = config_mod.load(config, ["rl.model_shape=tiny", f"run.dir={tmp_path}"], APPS)
    said = []
    objective, cfg = commands.make_objective("train", cfg, said.append)
    try:
        assert type(objective).__name__ == "LMSelfPlayObjective" and objective.name == "selfplay"
        assert not cfg.run.memory_guard and any("run.memory_guard -> off" in line for line in said)
        micro, why = objective.memory_plan("float32", "set", 2**30, said.append)
        assert 1 <= micro <= objective.round_rows() and "budget of 1.0 GiB" in why
    finally:
        objective.close()


def test_rl_memory_prints_the_table_and_refuses_bad_input_in_one_line(capsys):
    from trmkit import cli

    assert cli.main(["rl", "memory", "--shape", "qwen2.5-1.5b", "--response-len", "32", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["efficient"]["peak"] < 10 < rows["naive"]["peak"]  # the 1.5B round fits 10 GB only efficiently
    assert cli.main(["rl", "memory", "--shape", "qwen2.5-0.5"]) == 2
    assert cli.main(["rl", "memory", "--batch", "0"]) == 2
    err = capsys.readouterr().err
    assert "unknown model shape 'qwen2.5-0.5'; did you mean 'qwen2.5-0.5b'" in err and "--batch=0" in err
    assert "Traceback" not in err
