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
# what the steps train on: the kept answers as labels; TR-RPG's policy gradient from the checker's reward
# (adapt/trrpg.py); or, a control, the original source alone (continued training, nothing solved to keep)
OBJECTIVES = ("pseudo", "tr-rpg", "continue")
KEEPS = ("checker", "vote")  # what makes a try's answer a pseudo-label: the checker's verdict, or (a control) a vote
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
    steps: str = "auto"  # supervision steps per try: K, or auto[:CAP] (train/halting.py: each try until stable)
    solve_limit: int = 0  # unsolved problems tried per round at most (0: all of them)
    replay_share: float = 0.5  # share of each step's new samples replayed from the original training set
    augment: int = 8  # symmetric variants a kept answer is trained under (the task's own; 1: the answer only)
    reblank: bool = False  # a completion puzzle's kept answer also trains with more of its givens blanked (stream.py)
    keep: str = "checker"  # one of KEEPS; vote: the plurality answer of the tries, the checker never asked (control)
    vote_share: float = 0.5  # keep=vote: share of a problem's tries that must give the plurality answer to keep it
    # objective=tr-rpg (adapt/trrpg.py): each step samples rpg_problems adapt problems, trajectories tries each
    rpg_problems: int = 8  # problems per TR-RPG step (each one's tries form a group: its leave-one-out baseline)
    rpg_epochs: int = 2  # updates per step on the same tries (after the first, they come from an older policy)
    rpg_temperature: float = 1.0  # the policy per cell: the model's distribution (model.loss) of logits / temperature
    rpg_beta: float = 0.0  # TR-RPG's beta * log w term (rl/loss.py): a KL-style pull toward the tries' policy
    rpg_clip: float = 1.0  # clip of log w, the importance weight's log (rl/loss.py)
    kl_coef: float = 0.05  # weight of KL(pi_theta || pi_start) over the answer cells: the starting model's policy
    rpg_replay: float = 0.5  # weight of the supervised term on the original training samples (rpg_problems a step)

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout < 1.0:
            raise ConfigError(f"adapt.heldout={self.heldout}: give the held-out share, 0 <= share < 1 (0.2: a fifth)")
        if not 0.0 <= self.replay_share < 1.0:
            raise ConfigError(f"adapt.replay_share={self.replay_share}: give a share 0 <= share < 1 (0.5: half the "
                              "samples from the original training set)")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"adapt.objective={self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.keep not in KEEPS:
            raise ConfigError(f"adapt.keep={self.keep!r}: choose one of {', '.join(KEEPS)} (--keep)")
        if self.keep == "vote" and self.objective != "pseudo":
            raise ConfigError(f"adapt.keep=vote with adapt.objective={self.objective}: the vote control makes "
                              "pseudo-labels, so it needs objective=pseudo (tr-rpg's reward is the checker's verdict)")
        if not 0.0 < self.vote_share <= 1.0:
            raise ConfigError(f"adapt.vote_share={self.vote_share}: give a share 0 < share <= 1 (0.5: half the tries)")
        if self.reblank and self.objective != "pseudo":
            raise ConfigError(f"adapt.reblank=true with adapt.objective={self.objective}: reblank changes how kept "
                              "answers train, and only objective=pseudo trains on them")
        if self.objective == "tr-rpg" and self.trajectories < 2:
            raise ConfigError(f"adapt.trajectories={self.trajectories}: tr-rpg's baseline is the other tries of the "
                              "same problem, so give at least 2")
        for key in ("kl_coef", "rpg_replay", "rpg_beta"):
            if not float(getattr(self, key)) >= 0.0:
                raise ConfigError(f"adapt.{key}={getattr(self, key)}: give a weight >= 0 (0: the term is off)")
        for key in ("rpg_temperature", "rpg_clip"):
            if not float(getattr(self, key)) > 0.0:
                raise ConfigError(f"adapt.{key}={getattr(self, key)}: give a positive number")
        if self.select_from not in SELECT_FROM:
            raise ConfigError(f"adapt.select_from={self.select_from!r}: choose one of {', '.join(SELECT_FROM)}")
        for key in ("round_steps", "rounds", "trajectories", "augment", "rpg_problems", "rpg_epochs"):
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


def describe_arm(acfg: AdaptConfig) -> str:
    """One line for the start of a run: which arm of the comparison this is, and why a control is one."""
    if acfg.objective == "continue":
        return ("adapt: arm continue (a control): the steps train on the original training set only, nothing of "
                "the new source; at equal CPU time it shows what more training alone gives (the held-out part of "
                "the new source is still scored by the checker each round)")
    if acfg.objective == "tr-rpg":
        return ("adapt: arm tr-rpg: TR-RPG's policy gradient, reward = the checker's verdict on the model's own "
                "sampled tries, KL to the starting model (adapt/trrpg.py); the rounds' kept answers are counted, "
                "not trained on")
    if acfg.keep == "vote":
        return (f"adapt: arm vote (a control): pseudo-labels by plurality vote of the tries (kept when at least "
                f"{acfg.vote_share:.0%} agree), the checker never asked; it shows what the checker adds over the "
                "model's self-consistency (the held-out part is still scored by the checker)")
    return ("adapt: arm pseudo (the method): the answers the checker accepts are the labels; the halting head "
            "learns 'this answer equals the accepted one'")
