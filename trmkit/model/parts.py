"""The seam through which an application adds its own pieces to the TRM: one small interface, no branches.

A `Part` is an nn.Module a task or application builds from its own settings and hands to
`TRM(cfg, parts)` (the task's `model_parts`, tasks/base.py). The TRM asks every part the same
questions, and a part that has nothing to add answers with the identity:

- `build(cfg, head)`: create the part's weights, called by `TRM.__init__` once the answer head exists and
  before the halting head, so their random draws come at that point of the model's (the same seed, the same
  weights); it may set the head's start (the e-mail part starts the class head at zero);
- `positions`: the input's last positions the part reads instead of the mixer (model.part_positions, from
  the store's meta.json: the e-mail bag of n-grams); the mixer sees the others;
- `read_input(inputs, embed)`: what the part reads of a step's input (tensors, computed once per input
  by `TRM.embed_input`, e.g. the pooled bag), handed back to the next two;
- `add_to_tokens(x, reading)`: the token embeddings (B, L, D) before scaling, e.g. plus the pooled bag;
- `class_logits(logits, reading)`: a classifier's class logits (B, C), e.g. plus a linear read of the bag;
- `extra_outputs`: token-head outputs past the answer vocabulary (a maze trace's tokens);
- `answer(logits, inputs)`: the answer's logits (B, L, V) from a step's own (B, L, V + extra), e.g. a trace's
  tokens folded into the answer ids they stand for (and, given the input, a maze's route read from them).
  Every reader of an answer goes through `TRM.answer_logits`, which applies each part's `answer` in turn;
  training's loss reads a step's own logits;
- `settled(logits, inputs)`: (done (B,) bool, ids (B, L)): each example's answer as `answer` reads it is
  complete at this step (a maze's walk from S that reaches G through cells the wave has reached), and that
  answer's ids; None where the part cannot say. `--steps auto` then compares those ids between steps, not the
  step's own tokens (train/halting.py).

The model never imports the package a part comes from: the task hands its parts to the trainer,
as it hands its scorer and sampler. A task's factory is given the resolved model section; one that reads
its application's own section too (the e-mail part: `email:`) says so (`reads_config = True`) and is given
the whole config; `build_parts` calls either.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import torch
from torch import nn

from trmkit.config import Config, ConfigError, ModelConfig

Reading = tuple  # what one part read of a step's input: tensors (or None), indexed by rows together


class Part(nn.Module):
    """One application piece of the TRM; each method's default adds nothing. `Part(extra_outputs=n)` is a
    stand-in of n outputs that answers unchanged (the planner's memory measurement: the head's size)."""

    def __init__(self, extra_outputs: int = 0, positions: int = 0):
        super().__init__()
        self.extra_outputs = extra_outputs  # token-head outputs past the answer vocabulary
        self.positions = positions  # the input's last positions this part reads instead of the mixer

    def build(self, cfg: ModelConfig, head: nn.Linear) -> None:
        """Create the part's weights (called once per model, between the answer head and the halting head)."""

    def read_input(self, inputs: torch.Tensor, embed: nn.Embedding) -> Reading:
        """What the part reads of the input (B, seq_len) ids, for `add_to_tokens` and `class_logits`."""
        return ()

    def add_to_tokens(self, x: torch.Tensor, reading: Reading) -> torch.Tensor:
        """The token embeddings (B, L, D), before the sqrt(D) scale, with what the part adds to them."""
        return x

    def class_logits(self, logits: torch.Tensor, reading: Reading) -> torch.Tensor:
        """A classifier's class logits (B, C) with what the part adds to them."""
        return logits

    def answer(self, logits: torch.Tensor, inputs: torch.Tensor | None = None) -> torch.Tensor:
        """The answer's logits (B, L, V) from a step's (B, L, V + extra_outputs); `inputs` (B, L), the step's
        input, where the reader has it (an evaluation, a prediction; not training's loss)."""
        return logits

    def settled(self, logits: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(done (B,) bool: the answer `answer` reads from a step's logits is complete, its ids (B, L)); None:
        the part cannot say."""
        return None


# the resolved model section -> the parts the TRM composes; or, for a factory whose `reads_config` is true (the
# e-mail part, which reads its application's `email:` section), the whole config -> the parts
PartsFactory = Union[Callable[[ModelConfig], Sequence[Part]], Callable[[Config], Sequence[Part]]]


def build_parts(factory: PartsFactory | None, cfg: Config) -> tuple[Part, ...]:
    """The task's parts for a resolved config; a store whose last positions a part reads (model.part_positions,
    from its meta.json) needs the part that reads them: else one line naming the task."""
    if factory is None:
        parts: tuple[Part, ...] = ()
    else:
        parts = tuple(factory(cfg) if getattr(factory, "reads_config", False) else factory(cfg.model))
    read = sum(part.positions for part in parts)
    if read != cfg.model.part_positions:
        raise ConfigError(f"model.part_positions={cfg.model.part_positions}: the store's last positions are read by "
                          f"its task's model part, and the parts given read {read}: train and evaluate the store "
                          "with its own task (its meta.json's \"task\")")
    return parts
