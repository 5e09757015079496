"""The e-mail classifier's model section: `email:` in a YAML config, `email.KEY=VALUE` overrides (docs/email.md).

The settings of the e-mail model's part (email/parts.py): a linear read of the pooled bag of n-grams
beside the recursion, and the frozen linear model of the bag's ids fitted before training
(email/linear_fit.py). No other task reads them. trmkit/registry.py's SECTIONS names the class, so the
command line and the API check an `email.` key by name when they load a config. Their former names
(model.pooled_head, model.input_linear*) still load, moved here by the config loader (trmkit/names.py's
MOVED), with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError

SECTION = "email"  # the section's name in a config file and in overrides
WEIGHTINGS = ("binary", "idf", "auto")
UNLABELLED = ("off", "em", "self_train")


@dataclass
class EmailModelConfig:
    """The e-mail model part's settings (the bag's positions themselves come from the store: model.part_positions)."""

    pooled_head: bool = False  # the class logits also read the pooled bag by a linear map (beside the recursion)
    input_linear: bool = False  # the class logits also add a linear model of the bag's ids, fitted before training
    #                             (email/linear_fit.py), then frozen (email/input_linear.py reads it)
    input_linear_c: float = 1.0  # that fit's inverse regularisation strength (scikit-learn's C); 0: chosen from
    #                              1, 3, 10, 30 by 5-fold cross-validated macro-F1 on the training split (printed)
    input_linear_weighting: str = "binary"  # its features: "binary" (1 per id), "idf" (the training rows' idf,
    #                                         L2-normalised, as TF-IDF), "auto": the better cross-validated one
    input_linear_folds: int = 0  # K >= 2: also K fits each without one fold of the training split; training
    #                              steps add each row's out-of-fold logits (stacking), evaluation the whole fit's
    input_linear_unlabelled: str = "off"  # a store's unlabelled rows (--keep-labels): "em" (naive Bayes by EM on
    #                                       them, email/nb_em.py), "self_train", or "off" (docs/email.md)

    def __post_init__(self) -> None:
        if self.input_linear_folds and (self.input_linear_folds < 2 or not self.input_linear):
            raise ConfigError(f"email.input_linear_folds={self.input_linear_folds}: give 0 (off) or K >= 2 folds, "
                              "with email.input_linear=true")
        for key, allowed in (("input_linear_weighting", WEIGHTINGS), ("input_linear_unlabelled", UNLABELLED)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"email.{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}")
        if self.input_linear_c < 0:
            raise ConfigError(f"email.input_linear_c={self.input_linear_c} must be > 0 (scikit-learn's C: 1.0 by "
                              "default) or 0 (chosen by cross-validation on the training split)")


def email_config(cfg: Config) -> EmailModelConfig:
    """cfg's `email` section, typed and checked (the defaults where cfg has none)."""
    return config_mod.section(cfg, SECTION, EmailModelConfig)
