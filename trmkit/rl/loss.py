"""TR-RPG, the surrogate loss of Task-Relative Regularized Policy Gradients, and the seeding loss.

Per sample x drawn from pi_old (the policy that generated the batch):

    log w = clamp(log pi_theta(x) - log pi_old(x), -c, c)        (log-space clip, for stability)
    L(x)  = w * (-A(x) + beta * log w)

with A the reward minus the task-relative running baseline of its (task type, role). Its
gradient, where the clip is inactive, is

    dL/dtheta = -w * (A - beta * (log w + 1)) * grad log pi_theta(x)

(tests/rl/test_loss.py checks autograd against this formula). The beta term is a KL-style
regulariser: E_old[w log w] = KL(pi_theta || pi_old).

`reference_kl` is the exact KL to a fixed reference policy (the starting model: `trmkit adapt --objective
tr-rpg`), per sample, for a policy whose positions are independent given the prompt.

Seeding (SFT): -log pi(trace | task) - alpha * log pi(answer | task, trace), per position
weights: 1 on every response position, 1 + alpha on the answer's positions (a TRM writes
all positions at once, so pi(answer | task, trace) is the answer positions' probability).
"""

from __future__ import annotations

import torch


def trrpg_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, beta: float,
               clip: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-sample surrogate losses (N,) and statistics (no grad): ratio, KL estimate."""
    log_w = torch.clamp(logp_new - logp_old, -clip, clip)
    w = log_w.exp()
    loss = w * (-advantages + beta * log_w)
    with torch.no_grad():
        raw = (logp_new - logp_old).detach()
        stats = {"ratio": w.detach(), "kl": (raw.exp() - 1 - raw),  # k3 estimate of KL(pi_old || pi_theta)
                 "clipped": (raw.abs() > clip).float()}
    return loss, stats


def trrpg_gradient_weight(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                          beta: float) -> torch.Tensor:
    """The factor g with dL/dtheta = -g * grad log pi_theta (no clip): w * (A - beta * (log w + 1))."""
    log_w = logp_new - logp_old
    return log_w.exp() * (advantages - beta * (log_w + 1))


def reference_kl(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample KL(pi_theta || pi_ref) (N,) of policies whose positions are drawn independently (a TRM writes
    every position at once): the sum over positions of sum_v p_v (log p_v - log q_v). logp, logp_ref (N, R, V)
    log-probabilities over the vocabulary; mask (N, R) or (R,): the positions that count (default all)."""
    per = (logp.exp() * (logp - logp_ref)).sum(-1)  # (N, R)
    if mask is not None:
        per = per * mask.to(per.dtype)
    return per.sum(-1)


def sft_loss(token_logp: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-sample seeding loss (N,): -sum_j weight_j * log p_j(target_j)."""
    return -(token_logp * weights).sum(-1)


def gather_logprobs(logp: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """token_logprobs from log-probabilities already computed (N, R, V): (N, R) -> (N, R), (N, k, R) -> (N, k, R)."""
    if responses.dim() == 2:
        return torch.gather(logp, -1, responses.unsqueeze(-1)).squeeze(-1)
    k = responses.shape[1]
    expanded = logp.unsqueeze(1).expand(-1, k, -1, -1)  # (N, k, R, V), a view
    return torch.gather(expanded, -1, responses.unsqueeze(-1)).squeeze(-1)
