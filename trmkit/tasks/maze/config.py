"""The maze task's config section: `maze:` in a YAML config, `maze.KEY=VALUE` overrides (docs/tasks.md).

The knobs of the maze generator that data.stream=generate trains on (sampler.py); no other task reads them.
trmkit/registry.py's SECTIONS names the class, so the command line and the API check a `maze.` key by name
when they load a config. Their former names (data.hardness, data.easy_share, data.long_share) still load,
moved here by the config loader (trmkit/names.py's MOVED), with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError

SECTION = "maze"  # the section's name in a config file and in overrides
READS = ("walk", "fold")  # maze.read: how a trace model's route is read (fold.py)


@dataclass
class MazeConfig:
    """How hard the generated training mazes are (data.stream=generate; the held-out split keeps the store's), and
    how a trace model's route is read."""

    hardness: int = 0  # the hard mazes' shortest path, in steps (0: the store's min_path)
    easy_share: float = 0.5  # the share of easier mazes: a path of t..t+2 steps, t uniform up to the hardness
    long_share: float = 0.0  # the share of the hard ones made loop-free with twice the path (measured: no help)
    read: str = "walk"  # a trace model's route: its arrows followed from S ("walk") or its "o" marks ("fold"); fold.py

    def __post_init__(self) -> None:
        if self.hardness < 0:
            raise ConfigError(f"maze.hardness={self.hardness} must be >= 0 (0: the store's hardness)")
        for key in ("easy_share", "long_share"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"maze.{key}={getattr(self, key)}: give a share between 0 and 1 (0.5: half of them)")
        if self.read not in READS:
            raise ConfigError(f"maze.read={self.read!r}: give walk (the route along the model's arrows from S) or "
                              "fold (the cells it marks as route)")


def maze_config(cfg: Config) -> MazeConfig:
    """cfg's `maze` section, typed and checked (the defaults where cfg has none)."""
    return config_mod.section(cfg, SECTION, MazeConfig)
