"""The maze task's config section: the generator's knobs under `maze:`, their former data.* names still read
(with a note), old runs' config.yaml and checkpoints matching, the presets written with the new keys."""

from pathlib import Path

import pytest
import yaml

from trmkit import config as config_mod
from trmkit.config import ConfigError
from trmkit.registry import SECTIONS
from trmkit.tasks.maze.config import MazeConfig, maze_config
from trmkit.train.checkpoint.identity import diff_configs, with_new_defaults

ROOT = Path(__file__).resolve().parents[2]
OLD_RUN = ROOT / "tests" / "fixtures" / "maze_run_config.yaml"  # written when the knobs were data.* keys


def test_the_registry_names_the_maze_section_and_data_no_longer_holds_its_knobs():
    assert SECTIONS["maze"] is MazeConfig
    fields = {f.name for f in config_mod.dataclasses.fields(config_mod.DataConfig)}
    assert not fields & {"hardness", "easy_share", "long_share"}


def test_an_old_runs_config_yaml_loads_into_the_maze_section_with_one_note(capsys):
    cfg = config_mod.load(OLD_RUN, apps=SECTIONS)
    assert maze_config(cfg) == MazeConfig(hardness=30, easy_share=0.2, long_share=0.25)
    assert cfg.data.trace == 8 and cfg.data.curriculum_samples == 60000  # generic keys stay where they were
    note = capsys.readouterr().err.strip().splitlines()
    assert note == [f"config: {OLD_RUN}: data.hardness, data.easy_share, data.long_share are now maze.hardness, "
                    "maze.easy_share, maze.long_share (the old name still reads; write the new one)"]
    text = config_mod.to_yaml(cfg)
    assert "\nmaze:\n  hardness: 30\n  easy_share: 0.2\n  long_share: 0.25\n" in text and "  hardness" not in \
        text.split("\nmaze:")[0]
    lenient = config_mod.load(OLD_RUN)  # a reader not given the sections (the trainer) reads the same knobs
    assert maze_config(lenient) == maze_config(cfg)


def test_an_old_checkpoints_embedded_config_matches_the_loaded_one():
    embedded = yaml.safe_load(OLD_RUN.read_text())  # what a checkpoint stored: Config.to_dict() then
    for apps in (SECTIONS, None):
        cfg = config_mod.load(OLD_RUN, apps=apps)
        current = cfg.to_dict()
        assert diff_configs(embedded, current)  # spelt differently ...
        assert diff_configs(with_new_defaults(embedded, current, config_mod.section_types(cfg)), current) == []


def test_old_overrides_read_as_the_new_keys_and_the_later_one_wins(capsys):
    preset = ROOT / "configs" / "maze-trace.yaml"
    assert maze_config(config_mod.load(preset, apps=SECTIONS)) == MazeConfig(hardness=36, easy_share=0.2)
    cfg = config_mod.load(preset, ["data.hardness=20", "data.long_share=0.1"], apps=SECTIONS)
    assert maze_config(cfg) == MazeConfig(hardness=20, easy_share=0.2, long_share=0.1)
    assert capsys.readouterr().err.count("(the old name still reads; write the new one)") == 2
    later = config_mod.load(preset, ["data.hardness=20", "maze.hardness=24"], apps=SECTIONS)
    assert maze_config(later).hardness == 24
    both = config_mod.from_dict({"data": {"hardness": 20}, "maze": {"hardness": 24}}, apps=SECTIONS)
    assert maze_config(both).hardness == 24  # one file with both names: the current one


def test_unset_former_keys_say_nothing_and_add_no_section(capsys):
    cfg = config_mod.from_dict({"data": {"hardness": 0, "easy_share": 0.5, "long_share": 0.0}}, apps=SECTIONS)
    assert cfg.sections == {} and "maze" not in cfg.to_dict() and maze_config(cfg) == MazeConfig()
    assert capsys.readouterr().err == ""


def test_maze_keys_are_checked_by_name_and_value():
    with pytest.raises(ConfigError, match=r"unknown key 'maze.hardnes'. did you mean maze.hardness\?"):
        config_mod.from_dict({"maze": {"hardnes": 3}}, apps=SECTIONS)
    with pytest.raises(ConfigError, match=r"maze.easy_share=1.5: give a share between 0 and 1"):
        config_mod.from_dict({"data": {"easy_share": 1.5}}, apps=SECTIONS)
    with pytest.raises(ConfigError, match=r"maze.hardness=-1 must be >= 0"):
        maze_config(config_mod.from_dict({"maze": {"hardness": -1}}))  # checked when the maze task reads it


def test_the_presets_write_the_new_keys():
    for preset in sorted((ROOT / "configs").glob("*.yaml")):
        data = (yaml.safe_load(preset.read_text()) or {}).get("data") or {}
        assert not {"hardness", "easy_share", "long_share"} & set(data), preset.name
