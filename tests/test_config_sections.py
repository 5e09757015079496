"""Application sections of the config: the generic config knows them by registration (trmkit/registry.py's
SECTIONS), the rl section lives in trmkit/rl/config.py, and its keys read and write as before."""

import ast
import difflib
from pathlib import Path

import pytest

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError
from trmkit.rl.config import APPS, RLConfig, rl_config, with_rl

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs" / "selfplay-laptop.yaml"
OLD_RUN = Path(__file__).parent / "fixtures" / "selfplay_run_config.yaml"  # written when rl was a Config field
MAZE_KNOBS = "  hardness: 0\n  easy_share: 0.5\n  long_share: 0.0\n"
EMAIL_KNOBS = ("  pooled_head: false\n  input_linear: false\n  input_linear_c: 1.0\n  input_linear_weighting: binary\n"
               "  input_linear_folds: 0\n  input_linear_unlabelled: 'off'\n")


def test_config_py_neither_defines_the_rl_section_nor_imports_an_application():
    tree = ast.parse((ROOT / "trmkit" / "config.py").read_text())
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "RLConfig" not in classes and "rl" not in {f.name for f in config_mod.dataclasses.fields(Config)}
    assert not [m for m in imported if m and m.startswith(("trmkit.rl", "trmkit.registry", "trmkit.email"))]


def test_the_registry_names_the_rl_section():
    from trmkit import registry

    assert registry.SECTIONS["rl"] is RLConfig and APPS == {"rl": RLConfig}


def test_a_config_with_an_rl_section_round_trips(tmp_path):
    cfg = config_mod.load(PRESET, ["rl.attempts=8", "rl.baseline=expert"], apps=APPS)
    assert isinstance(cfg.sections["rl"], RLConfig) and rl_config(cfg).attempts == 8
    saved = tmp_path / "config.yaml"
    saved.write_text(config_mod.to_yaml(cfg))
    assert config_mod.load(saved, apps=APPS) == cfg
    text = saved.read_text()
    assert "\nrl:\n" in text and "sections" not in text  # written as a top-level section, as before
    lenient = config_mod.load(saved)  # a reader not given the sections keeps rl as written
    assert lenient.to_dict() == cfg.to_dict() and rl_config(lenient) == cfg.sections["rl"]


def test_an_unknown_rl_key_names_the_closest_valid_one():
    with pytest.raises(ConfigError, match=r"selfplay-laptop.yaml: unknown key 'rl.attemps'. did you mean "
                                          r"rl.attempts\?"):
        config_mod.load(PRESET, ["rl.attemps=3"], apps=APPS)
    kept = config_mod.load(PRESET, ["rl.attemps=3"])  # checked when the RL code reads it
    with pytest.raises(ConfigError, match=r"unknown key 'rl.attemps'. did you mean rl.attempts\?"):
        rl_config(kept)
    with pytest.raises(ConfigError, match=r"rl.attempts=1: the per-task baseline needs k >= 2"):
        rl_config(config_mod.load(PRESET, ["rl.attempts=1"]))


def test_unknown_sections_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"unknown key 'rll'. did you mean rl.lr\?"):
        config_mod.from_dict({"rll": {"lr": 1}}, apps=APPS)
    with pytest.raises(ConfigError, match=r"unknown key 'trian'. did you mean train.lr\?"):
        config_mod.from_dict({"trian": {"lr": 1}})  # a misspelt generic section, even without the registry
    with pytest.raises(ConfigError, match=r"section 'rl' must be a mapping"):
        config_mod.from_dict({"rl": 3}, apps=APPS)


def test_an_old_runs_config_yaml_with_an_rl_section_still_loads():
    typed = config_mod.load(OLD_RUN, apps=APPS)
    assert rl_config(typed).seed_pool == 9 and rl_config(typed).pool_val == 3
    assert typed.model.mixer == "attention" and typed.run.dir == "runs/selfplay"
    old_text = OLD_RUN.read_text().split("\n", 1)[1]  # less its comment line
    for moved in (MAZE_KNOBS, EMAIL_KNOBS):  # since moved to the maze: and email: sections, unset there
        assert moved in old_text
        old_text = old_text.replace(moved, "")
    old_text = old_text.replace("  pooled_positions: 0\n", "  part_positions: 0\n")  # its new name
    lenient = config_mod.to_yaml(config_mod.load(OLD_RUN))
    assert lenient == old_text  # written back byte for byte, less the knobs left unset, under current names
    written = config_mod.to_yaml(typed)  # the typed section writes the keys added since, at their defaults
    ops = difflib.SequenceMatcher(None, old_text.splitlines(), written.splitlines()).get_opcodes()
    assert {op for op, *_ in ops} == {"equal", "insert"}  # nothing changed or lost, only lines added
    added = [line for op, _, _, j1, j2 in ops if op == "insert" for line in written.splitlines()[j1:j2]]
    defaults = config_mod.dataclasses.asdict(RLConfig())
    for line in added:
        key, value = line.strip().split(": ", 1)
        assert str(defaults[key]) == value.strip("'") or (value == "''" and defaults[key] == ""), line


def test_a_checkpoints_embedded_config_from_before_still_matches():
    import yaml

    from trmkit.train.checkpoint.identity import diff_configs, with_new_defaults

    embedded = yaml.safe_load(OLD_RUN.read_text())  # what a checkpoint stored: Config.to_dict() then
    for apps in (APPS, None):
        cfg = config_mod.load(OLD_RUN, apps=apps)
        current = cfg.to_dict()  # resume passes the sections' classes, for the keys they added since
        assert diff_configs(with_new_defaults(embedded, current, config_mod.section_types(cfg)), current) == []


def test_a_config_without_the_section_writes_none_and_reads_the_defaults():
    cfg = Config()
    assert "rl" not in cfg.to_dict() and rl_config(cfg) == RLConfig()
    changed = with_rl(cfg, attempts=4)
    assert rl_config(changed).attempts == 4 and changed.to_dict()["rl"]["attempts"] == 4 and cfg.sections == {}
    with pytest.raises(ConfigError, match="rl.attempts=1"):
        with_rl(cfg, attempts=1)
    with pytest.raises(ConfigError, match="'rl' is not a generic section"):
        config_mod.replace(cfg, "rl", attempts=4)
