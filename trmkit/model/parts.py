"""The seam through which an application adds its own pieces to the TRM: one small interface, no branches.

A `Part` is an nn.Module a task or application builds from its own settings and hands to
`TRM(cfg, parts)` (the task's `model_parts`, tasks/base.py). The TRM asks every part the same
questions, and a part that has nothing to add answers with the identity:

- `extra_outputs`: token-head outputs past the answer vocabulary (a maze trace's tokens);
- `answer(logits)`: the answer's logits (B, L, V) from a step's own (B, L, V + extra), e.g. a trace's
  tokens folded into the answer ids they stand for. Every reader of an answer goes through
  `TRM.answer_logits`, which applies each part's `answer` in turn; training's loss reads a step's own logits.

The model never imports the package a part comes from: the task hands its parts to the trainer,
as it hands its scorer and sampler.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from trmkit.config import ModelConfig


class Part(nn.Module):
    """One application piece of the TRM; each method's default adds nothing. `Part(extra_outputs=n)` is a
    stand-in of n outputs that answers unchanged (the planner's memory measurement: the head's size)."""

    def __init__(self, extra_outputs: int = 0):
        super().__init__()
        self.extra_outputs = extra_outputs  # token-head outputs past the answer vocabulary

    def answer(self, logits: torch.Tensor) -> torch.Tensor:
        """The answer's logits (B, L, V) from a step's (B, L, V + extra_outputs)."""
        return logits


PartsFactory = Callable[[ModelConfig], Sequence[Part]]  # the resolved model section -> the parts the TRM composes
