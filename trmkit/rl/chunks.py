"""The loss of a batch of (role, type) groups, back-propagated in chunks of the micro-batch.

A `Group` holds the rows of one (role, type) layout: prompts, responses and either per-position
weights (seeding: supervised loss) or, for self-play, k sampled responses per prompt with their
pi_old and advantages (the TR-RPG loss over the positions the reward is decided at): one forward
per prompt gives the log-probabilities of all k samples, and the gradient equals that of the k
copies run separately (tests/rl/test_loss.py).
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
    responses: torch.Tensor  # seeding: (N, R) targets; self-play: (N, k, R) k samples per prompt
    scale: float  # each row's (each sample's) loss is multiplied by this
    logp_old: torch.Tensor | None = None  # (N, k, R) self-play: the sampler's per-position log-probabilities
    advantages: torch.Tensor | None = None  # (N, k) self-play
    beta: float = 0.0
    weights: torch.Tensor | None = None  # (N, R) seeding: per-position weights
    credit: torch.Tensor | None = None  # (R,) self-play: the positions the reward is decided at
    temperature: float = 1.0  # self-play: the rollout's, in log pi_theta as in log pi_old

    @property
    def response_len(self) -> int:
        return self.responses.shape[-1]

    @property
    def samples(self) -> int:
        return self.responses.shape[0] * (self.responses.shape[1] if self.responses.dim() == 3 else 1)


def group_loss(model: TRM, g: Group, rows: slice, ctx: StepContext, clip: float) -> tuple[torch.Tensor, dict]:
    """Summed loss of some rows of a group (scaled), and statistics."""
    with ctx.autocast():
        logits = response_logits(model, g.inputs[rows], g.response_len)  # (n, R, V): one forward per prompt
    if g.weights is not None:
        per = sft_loss(token_logprobs(logits, g.responses[rows]), g.weights[rows])
        return per.sum() * g.scale, {"loss": per.detach()}
    mask = g.credit.to(logits.dtype)  # (R,)
    new = (token_logprobs(logits, g.responses[rows], g.temperature) * mask).sum(-1)  # (n, k)
    old = (g.logp_old[rows] * mask).sum(-1)
    per, stats = trrpg_loss(new, old, g.advantages[rows], g.beta, clip)  # (n, k)
    stats = {k: v.reshape(-1) for k, v in stats.items()}
    stats["loss"] = per.detach().reshape(-1)
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
