"""The loss of a batch of (role, type) groups, back-propagated in chunks of the micro-batch.

A `Group` holds the rows of one (role, type) layout: prompts, responses and either per-position
weights (seeding: supervised loss) or pi_old and advantages (self-play: the TR-RPG loss).
`chunked_backward` runs them one after another in chunks of the planner's and the memory
guard's micro-batch, so the gradients equal the full batch's at the memory of one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from trmkit.model.trm import TRM
from trmkit.rl.loss import sft_loss, trrpg_loss
from trmkit.rl.policy import response_logits, token_logprobs
from trmkit.train.step import GradientUndo, StepContext, over_chunks


@dataclass
class Group:
    """Rows of one (role, type) layout, ready for the chunked backward."""

    role: str
    kind: str
    inputs: torch.Tensor  # (N, L) prompt + <blank> response positions
    responses: torch.Tensor  # (N, R) int64: sampled (self-play) or target (seeding) tokens
    scale: float  # each row's loss is multiplied by this (1 / rows of the role)
    logp_old: torch.Tensor | None = None  # (N,) self-play
    advantages: torch.Tensor | None = None  # (N,) self-play
    beta: float = 0.0
    weights: torch.Tensor | None = None  # (N, R) seeding: per-position weights

    @property
    def response_len(self) -> int:
        return self.responses.shape[1]


def group_loss(model: TRM, g: Group, rows: slice, ctx: StepContext, clip: float) -> tuple[torch.Tensor, dict]:
    """Summed loss of some rows of a group (scaled), and statistics."""
    with ctx.autocast():
        logits = response_logits(model, g.inputs[rows], g.response_len)
    tok = token_logprobs(logits, g.responses[rows])
    if g.weights is not None:
        per = sft_loss(tok, g.weights[rows])
        return per.sum() * g.scale, {"loss": per.detach()}
    per, stats = trrpg_loss(tok.sum(-1), g.logp_old[rows], g.advantages[rows], g.beta, clip)
    stats["loss"] = per.detach()
    return per.sum() * g.scale, stats


def chunked_backward(model: TRM, groups: list[Group], ctx: StepContext, clip: float,
                     on_oom: Callable[[BaseException], int] | None = None) -> dict[str, dict]:
    """Back-propagate every group's loss chunk by chunk (roles one after another); gradients
    accumulate in .grad and equal the full batch's. An allocation failure undoes the failed
    chunk, takes the smaller micro-batch from `on_oom` (the memory guard) and goes on."""
    undo = GradientUndo(model) if on_oom is not None else None
    stats: dict[str, dict] = {}
    for i, g in enumerate(groups):
        def work(rows: slice, g: Group = g) -> dict:
            loss, st = group_loss(model, g, rows, ctx, clip)
            loss.backward()
            return st
        parts = over_chunks(g.inputs.shape[0], ctx, work, undo, on_oom, last=i == len(groups) - 1)
        stats[f"{g.role}/{g.kind}"] = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return stats
