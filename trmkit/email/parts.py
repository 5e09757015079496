"""The e-mail model's part (model/parts.py): the bag of n-grams, read beside the recursion.

An e-mail store built with a bag (`trmkit data email --bag N`) ends each message with the ids of its N
most telling n-grams (email/bag.py); its meta.json names them (model.part_positions), and the mixer never
sees them. `BagPart` reads them for the TRM:

- their mean embedding (pads left out) is added to every token position's input;
- with email.pooled_head, a linear map of that mean (scaled as the tokens are) is added to the class logits;
  it starts at zero, so the model begins as the one without it;
- with email.input_linear, a frozen linear model of their ids (email/input_linear.py), fitted before
  training (email/linear_fit.py), is added to the class logits; the class head then starts at zero, so
  the model begins as that fitted model.

Its weights are created in `build`, where the TRM's branches created them before (after the class head,
before the halting head), so a seed gives the same weights as before; their names moved from
`pooled_head.weight` / `input_linear_*` to `parts.0.pooled_head.weight` / `parts.0.linear_*`
(trmkit/names.py maps the old ones for every loader).
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields

import torch
from torch import nn

from trmkit.config import Config, ConfigError, ModelConfig
from trmkit.email import input_linear
from trmkit.email.config import SECTION, EmailModelConfig, email_config
from trmkit.model.parts import Part, Reading
from trmkit.names import with_current_keys


class BagPart(Part):
    """The bag's reading: its pooled embedding into the tokens, and the pooled head and fitted linear model
    (as `settings` asks) into the class logits."""

    def __init__(self, positions: int, settings: EmailModelConfig):
        super().__init__(positions=positions)
        self.settings = settings
        self.scale = 1.0  # sqrt(D), the tokens' scale (set in build)

    def build(self, cfg: ModelConfig, head: nn.Linear) -> None:
        s, D, C = self.settings, cfg.hidden_size, cfg.num_classes
        self.scale = math.sqrt(D)
        if C and s.pooled_head:  # starts at zero: the model begins as the one without it
            self.pooled_head = nn.Linear(D, C, bias=False)
            nn.init.zeros_(self.pooled_head.weight)
        if C and s.input_linear:
            self._linear_buffers(cfg, head)

    def _linear_buffers(self, cfg: ModelConfig, head: nn.Linear) -> None:
        """Buffers, not parameters: fitted by the task before training (Task.before_training), then frozen;
        the class head starts at zero, so the model begins as that fitted model (email/input_linear.py)."""
        s, V, C = self.settings, cfg.vocab_size, cfg.num_classes
        nn.init.zeros_(head.weight)
        self.register_buffer("linear_weight", torch.zeros(V, C))
        self.register_buffer("linear_bias", torch.zeros(C))
        if s.input_linear_weighting != "binary":  # each id's idf in the training rows (fitted too),
            self.register_buffer("linear_idf", torch.zeros(V))
            self.register_buffer("linear_use_idf", torch.ones(()))  # and 0 where auto chose binary
        if s.input_linear_folds:  # one fit per fold without it: the training steps' logits
            self.register_buffer("linear_fold_weight", torch.zeros(s.input_linear_folds, V, C))
            self.register_buffer("linear_fold_bias", torch.zeros(s.input_linear_folds, C))

    @property
    def fitted(self) -> bool:
        """Whether the part holds the fitted linear model (email.input_linear on a classifier)."""
        return hasattr(self, "linear_weight")

    def read_input(self, inputs: torch.Tensor, embed: nn.Embedding) -> Reading:
        """(the bag's mean embedding (B, D), the fitted model's logits (B, C) float32 or None)."""
        return self.pool(inputs, embed), self.linear_logits(inputs) if self.fitted else None

    def pool(self, inputs: torch.Tensor, embed: nn.Embedding) -> torch.Tensor:
        """(B, D): the bag's mean embedding, pads (id 0) left out (zeros for a row of pads). One embedding_bag:
        the (B, n, D) rows are never held (with n = 1,024 they were a quarter of the model's inference time)."""
        tail = inputs[:, -self.positions:].long()
        return nn.functional.embedding_bag(tail, embed.weight, mode="mean", padding_idx=0)

    def linear_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, C) float32: the sum of the bag's ids' rows of the fitted linear model, plus its bias; in training
        with email.input_linear_folds, of the model fitted without each row's fold."""
        s = self.settings
        idf = (self.linear_idf, self.linear_use_idf) if s.input_linear_weighting != "binary" else None
        if self.training and s.input_linear_folds:
            return input_linear.read_out_of_fold(inputs, self.linear_fold_weight, self.linear_fold_bias,
                                                 self.positions, idf)
        return input_linear.read(inputs, self.linear_weight, self.linear_bias, self.positions, idf)

    def add_to_tokens(self, x: torch.Tensor, reading: Reading) -> torch.Tensor:
        return x + reading[0].unsqueeze(1)

    def class_logits(self, logits: torch.Tensor, reading: Reading) -> torch.Tensor:
        pooled, linear = reading if reading else (None, None)
        if self.settings.pooled_head and pooled is not None:
            logits = logits + self.pooled_head((self.scale * pooled).to(logits.dtype))
        if linear is not None:
            logits = logits.float() + linear
        return logits

    def extra_repr(self) -> str:
        return f"positions={self.positions}, {self.settings}"


def bag_parts(cfg: Config) -> tuple[Part, ...]:
    """The e-mail tasks' parts for a resolved config: the bag's reader when the store has a bag (none without)."""
    settings, m = email_config(cfg), cfg.model
    if m.part_positions:
        return (BagPart(m.part_positions, settings),)
    if settings.pooled_head and m.seq_len:
        raise ConfigError("email.pooled_head reads the message's bag of n-grams, and this store has none "
                          "(model.part_positions comes from its meta.json): build a store with one "
                          "(`trmkit data email --bag 1024`, docs/email.md), or set email.pooled_head=false")
    # email.input_linear without a bag: a part of no positions, refused before training with the rebuild command
    return (BagPart(0, settings),) if settings.input_linear and m.num_classes else ()


def bag_part(model: nn.Module) -> BagPart | None:
    """The model's bag part, if it has one."""
    return next((part for part in getattr(model, "parts", ()) if isinstance(part, BagPart)), None)


def model_of(model_section: dict, email_section: dict | None = None) -> nn.Module:
    """The TRM (with its bag part) of a run's or a bundle's config sections as written, those written before a
    rename or before the e-mail settings left the model section read under their current names and sections
    (trmkit/names.py: model.input_linear -> email.input_linear)."""
    from trmkit.model.trm import TRM

    raw = with_current_keys({"model": dict(model_section), SECTION: dict(email_section or {})})
    cfg = Config(model=ModelConfig(**_known(ModelConfig, raw["model"])),
                 sections={SECTION: EmailModelConfig(**_known(EmailModelConfig, raw[SECTION]))})
    return TRM(cfg.model, bag_parts(cfg))


def _known(cls: type, values: dict) -> dict:
    """The values of cls's fields (a key an older or newer trmkit wrote is left out)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def settings_of(model: nn.Module) -> dict:
    """The model's e-mail part settings ({} without the part): what, beside its model section, shapes it."""
    part = bag_part(model)
    return {} if part is None else {"part_positions": part.positions, **asdict(part.settings)}
