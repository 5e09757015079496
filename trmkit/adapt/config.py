"""`trmkit adapt`'s config section: `adapt:` in the new run's config.yaml, `adapt.KEY=VALUE` overrides.

The new run keeps the original store as its data.path (its default evaluation stays the original held-out
split); this section records the new source apart: where its problems are, which checker accepts their
answers, how they are split, and how the rounds run. trmkit/registry.py's SECTIONS names it, so an unknown
`adapt.` key is refused by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError

SECTION = "adapt"  # the section's name in a config file and in overrides
OBJECTIVES = ("pseudo",)  # what a round trains on: the checker's accepted answers as labels (a TR-RPG arm: later)
SELECT_FROM = ("noise", "variants", "both")  # train/select.py's sources of trajectories


@dataclass
class AdaptConfig:
    """Learning a new source from a checker (docs/adapt.md)."""

    source: str = ""  # the new source's store (built by `trmkit data ...`); only its inputs are read
    base_run: str = ""  # the run whose weights the adaptation starts from (never changed)
    checker: str = ""  # the user's checker "file.py:function" (pairs stores); "" for a task's built-in one
    source_fingerprint: str = ""  # the new source's splits' fingerprints when the adaptation began (resume checks)
    heldout: float = 0.2  # share of the new source's problems held out: scored one-shot by the checker each round
    split_seed: int = 0  # seeds the adapt / held-out split of the new source's problems
    objective: str = "pseudo"  # one of OBJECTIVES
    round_steps: int = 50  # training steps between two solving rounds
    rounds: int = 4  # without --minutes: the run trains rounds x round_steps steps
    trajectories: int = 8  # tries per unsolved problem per round (train/select.py, at most 16)
    select_from: str = "variants"  # what makes the tries differ: one of SELECT_FROM
    steps: str = "auto"  # supervision steps per try: K, or auto[:CAP] (train/halting.py: one more try, stable)
    solve_limit: int = 0  # unsolved problems tried per round at most (0: all of them)
    replay_share: float = 0.5  # share of each step's new samples replayed from the original training set
    augment: int = 8  # symmetric variants a kept answer is trained under (the task's own; 1: the answer only)

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout < 1.0:
            raise ConfigError(f"adapt.heldout={self.heldout}: give the held-out share, 0 <= share < 1 (0.2: a fifth)")
        if not 0.0 <= self.replay_share < 1.0:
            raise ConfigError(f"adapt.replay_share={self.replay_share}: give a share 0 <= share < 1 (0.5: half the "
                              "samples from the original training set)")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"adapt.objective={self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.select_from not in SELECT_FROM:
            raise ConfigError(f"adapt.select_from={self.select_from!r}: choose one of {', '.join(SELECT_FROM)}")
        for key in ("round_steps", "rounds", "trajectories", "augment"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"adapt.{key}={getattr(self, key)}: give a positive number")
        if self.solve_limit < 0:
            raise ConfigError(f"adapt.solve_limit={self.solve_limit}: give 0 (all) or a positive number")


def adapt_config(cfg: Config) -> AdaptConfig:
    """cfg's `adapt` section, typed and checked (the defaults where cfg has none)."""
    return config_mod.section(cfg, SECTION, AdaptConfig)


def without_adapt(cfg: Config) -> Config:
    """cfg without its `adapt` section: what the store's task sees (its own sections only: api.check_sections)."""
    return dataclasses.replace(cfg, sections={k: v for k, v in cfg.sections.items() if k != SECTION})
