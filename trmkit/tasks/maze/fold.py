"""The trace's answer folding: the model part that makes a trace model answer in the maze's own tokens.

A model trained on a search's trace (data.trace, trace.py) has a token head with one output per trace
token past the maze vocabulary, each standing for an answer id (model.trace_answers, which the trainer
records from the sampler's TRACE_TOKENS). `AnswerFold` is that part (model/parts.py): it adds the
outputs to the head and folds them into the answer, each answer id's probability its own plus that of
the trace tokens standing for it, exactly, under the model's loss (model/losses.py merge_logits).
"""

from __future__ import annotations

import torch

from trmkit.config import ModelConfig
from trmkit.model.losses import merge_logits
from trmkit.model.parts import Part


class AnswerFold(Part):
    """Trace tokens folded into the answer ids `into` (one per token past the answer vocabulary)."""

    def __init__(self, into: tuple[int, ...], kind: str = "stablemax"):
        super().__init__(extra_outputs=len(into))
        self.into, self.kind = tuple(into), kind

    def answer(self, logits: torch.Tensor) -> torch.Tensor:
        return merge_logits(logits, self.into, self.kind)  # (B, L, V + H) -> (B, L, V)

    def extra_repr(self) -> str:
        return f"into={self.into}, kind={self.kind!r}"


def model_parts(cfg: ModelConfig) -> tuple[Part, ...]:
    """The maze task's parts for a model section: the fold when it was trained on a trace, else none."""
    return (AnswerFold(cfg.trace_ids, cfg.loss),) if cfg.trace_ids else ()
