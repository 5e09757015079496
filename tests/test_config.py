"""The typed config: YAML and key=value overrides, coercion, errors that name the key."""

from pathlib import Path

import pytest

from trmkit import config as config_mod
from trmkit import names
from trmkit.config import ConfigError, parse_size

GiB, MiB = 1 << 30, 1 << 20


def test_unquoted_on_and_off_mean_the_switch_not_a_bool(tmp_path):
    # YAML 1.1 reads on/off as true/false; `run.compile=on` once became the string "True"
    path = tmp_path / "c.yaml"
    path.write_text("run: {compile: on, grad_checkpointing: off}\n")
    cfg = config_mod.load(path, ["run.dtype=bfloat16"])
    assert (cfg.run.compile, cfg.run.grad_checkpointing, cfg.run.dtype) == ("on", "off", "bfloat16")
    assert config_mod.load(path, ["run.compile=off"]).run.compile == "off"


def test_a_switch_outside_its_values_is_refused_by_name(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run: {compile: maybe}\n")
    with pytest.raises(ConfigError, match=r"run.compile='maybe': expected one of auto, on, off"):
        config_mod.load(path)
    with pytest.raises(ConfigError, match=r"run.dtype='fp16'"):
        config_mod.from_dict({"run": {"dtype": "fp16"}})
    with pytest.raises(ConfigError, match=r"run.keep_freed_memory='yes please'"):
        config_mod.from_dict({"run": {"keep_freed_memory": "yes please"}})


def test_unknown_keys_name_the_closest_valid_one(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: {learning_rate: 0.1}\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown key 'train.learning_rate'"):
        config_mod.load(path)
    path.write_text("model: {hidden_size: 8}\n")
    with pytest.raises(ConfigError, match="did you mean model.hidden_size"):
        config_mod.load(path, ["model.hiden_size=8"])


def test_numbers_are_coerced_and_wrong_types_refused():
    cfg = config_mod.from_dict({"train": {"lr": "1e-3", "max_steps": 10.0}})
    assert cfg.train.lr == 1e-3 and cfg.train.max_steps == 10 and isinstance(cfg.train.max_steps, int)
    with pytest.raises(ConfigError, match=r"train.max_steps='ten': expected int"):
        config_mod.from_dict({"train": {"max_steps": "ten"}})
    with pytest.raises(ConfigError, match="expected true or false"):
        config_mod.from_dict({"run": {"memory_guard": "sometimes"}})


@pytest.mark.parametrize("text,expected", [
    ("6GB", 6 * 10**9), ("6GiB", 6 * GiB), ("512MB", 512 * 10**6), ("512 MiB", 512 * MiB),
    ("1.5GiB", 3 * GiB // 2), ("6g", 6 * GiB), ("6gb", 6 * 10**9), ("1073741824", GiB),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["six GB", "6 parsecs", "0GB", "", "-1GB"])
def test_parse_size_rejects_nonsense(text):
    with pytest.raises(ConfigError, match="memory size"):
        parse_size(text)


def test_the_memory_budget_is_checked_when_the_config_loads(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run: {memory_budget: 1.5GB}\n")
    assert config_mod.load(path).run.budget_bytes() == 1_500_000_000
    with pytest.raises(ConfigError, match=r"run.memory_budget 'lots'"):
        config_mod.load(path, ["run.memory_budget=lots"])


def test_the_cli_flag_travels_as_the_config_override():
    from trmkit.cli import build_parser, _budget_as_override

    args = build_parser().parse_args(["train", "configs/sudoku-laptop.yaml", "train.max_steps=3",
                                      "--memory-budget", "2GiB"])
    _budget_as_override(args)
    assert args.overrides == ["train.max_steps=3", "run.memory_budget=2GiB"]


def test_every_training_preset_loads():
    """A preset with a typo'd key or a wrong type would fail a user's first command: each one loads."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "configs"
    presets = [p for p in sorted(root.glob("*.yaml")) if "train" in (yaml.safe_load(p.read_text()) or {})]
    assert len(presets) >= 10 and root / "email-fast.yaml" in presets
    for path in presets:
        cfg = config_mod.load(path)
        assert cfg.train.max_steps > 0, path


def test_old_bag_keys_load_under_their_current_names_and_sections(capsys):
    """Configs, runs and bundles written before the bag model's fields were named generically (bag_*), and
    before the e-mail settings left the model section (model.input_linear* -> email.*), still load."""
    from trmkit.email.config import EmailModelConfig, email_config
    from trmkit.registry import SECTIONS

    old = {"model": {"num_classes": 3, "bag_positions": 4, "bag_head": False, "bag_linear": True, "bag_linear_c": 0,
                     "bag_linear_weighting": "auto", "bag_linear_folds": 0}}
    for apps in (SECTIONS, None):  # the CLI's reader, and one not given the sections (checked when read)
        cfg = config_mod.from_dict(old, apps=apps)
        assert cfg.model.part_positions == 4
        assert email_config(cfg) == EmailModelConfig(input_linear=True, input_linear_c=0.0,
                                                     input_linear_weighting="auto")
    assert "model.input_linear, model.input_linear_c, model.input_linear_weighting are now email.input_linear" \
        in capsys.readouterr().err  # the unset ones (bag_head: false, folds 0) say nothing
    run = {"model": {"num_classes": 3, "pooled_positions": 4, "pooled_head": True, "input_linear_folds": 2,
                     "input_linear": True}}
    moved = email_config(config_mod.from_dict(run, apps=SECTIONS))
    assert (moved.pooled_head, moved.input_linear_folds) == (True, 2)
    over = config_mod.from_dict(config_mod.apply_overrides({}, ["model.bag_linear_c=3"]), apps=SECTIONS)
    assert email_config(over).input_linear_c == 3.0
    both = config_mod.apply_overrides({"model": {"input_linear_c": 10}}, ["model.input_linear_c=3"])
    assert email_config(config_mod.from_dict(both, apps=SECTIONS)).input_linear_c == 3.0  # the override wins
    with pytest.raises(ConfigError, match="email.input_linear_weighting='tfidf'"):
        config_mod.from_dict({"email": {"input_linear_weighting": "tfidf"}}, apps=SECTIONS)
    with pytest.raises(ConfigError, match="email.input_linear_cc"):
        config_mod.from_dict({"email": {"input_linear_cc": 1}}, apps=SECTIONS)
    assert names.current_name("bag_head.weight") == "parts.0.pooled_head.weight"
    assert names.current_name("bag_linear_fold_weight") == "parts.0.linear_fold_weight"
    assert names.current_name("bag_linear_c") == "input_linear_c"  # a config key: renamed, not a weight
    assert names.current_name("bag_headroom") == "bag_headroom"  # only whole names and their suffixes
