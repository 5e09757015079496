"""Optimisers of TRM training, in pure PyTorch.

- AdamAtan2 (Everett et al., 2024, "Scaling exponents across parameterizations
  and optimizers"): Adam whose update m_hat / (sqrt(v_hat) + eps) is replaced
  by atan2(m_hat, sqrt(v_hat)), which needs no epsilon and is bounded.
  Decoupled weight decay as in AdamW: p <- p * (1 - lr * wd).
- Sign-SGD for the puzzle embedding: gradients of the rows used in the
  optimizer step are summed per identifier, then only those rows move:
  w <- w * (1 - lr * wd) - lr * sign(g).
- Linear warm-up, then cosine decay to lr * lr_min_ratio.
- EMA of the parameters, optionally with a warm-up of its decay; `ema_weights` puts the
  EMA weights in the model for a block (evaluation, saving the run's weights).
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

import torch

from trmkit.config import TrainConfig
from trmkit.model.trm import PuzzleEmbedding


class AdamAtan2(torch.optim.Optimizer):
    """Adam with the atan2 update rule and decoupled weight decay."""

    def __init__(self, params, lr: float = 1e-4, betas=(0.9, 0.95), weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        for group in self.param_groups:  # now, not in the first step: its memory is set up before
            for p in group["params"]:     # training (and measured there), never allocated mid-step
                self._init_state(p)

    def _init_state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._init_state(p)
                state["step"] += 1
                t = state["step"].item()
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.mul_(1 - lr * wd)
                m_hat = m / (1 - beta1 ** t)
                denom = (v / (1 - beta2 ** t)).sqrt_()
                p.add_(torch.atan2(m_hat, denom), alpha=-lr)
        return None


def build_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in params if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                 weight_decay=cfg.weight_decay)
    return AdamAtan2(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)


class SparseSignSGD:
    """Sign-SGD over the rows of a PuzzleEmbedding that were used since the last step."""

    def __init__(self, emb: PuzzleEmbedding, lr: float, weight_decay: float,
                 gather: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None):
        """gather: with several processes, (ids, grads) of this process -> those of all processes
        (train/distributed.py), so every process applies the same update to identical tables."""
        self.emb, self.lr, self.weight_decay, self.gather = emb, lr, weight_decay, gather

    @torch.no_grad()
    def step(self, lr: float | None = None) -> int:
        """Apply the update; returns how many distinct rows changed."""
        pending = [(ids, rows.grad) for ids, rows in self.emb.take_pending() if rows.grad is not None]
        width = self.emb.weight.shape[1]
        device = self.emb.weight.device
        ids = torch.cat([i for i, _ in pending]) if pending else torch.zeros(0, dtype=torch.int64, device=device)
        grads = torch.cat([g for _, g in pending]).float() if pending else torch.zeros(0, width, device=device)
        if self.gather is not None:  # a collective: every process calls it, rows or not
            ids, grads = self.gather(ids, grads)
        if not len(ids):
            return 0
        lr = self.lr if lr is None else lr
        unique, inverse = torch.unique(ids, return_inverse=True)
        summed = torch.zeros(len(unique), grads.shape[1], dtype=grads.dtype, device=grads.device)
        summed.index_add_(0, inverse, grads)
        w = self.emb.weight
        rows = w[unique] * (1 - lr * self.weight_decay) - lr * torch.sign(summed)
        w[unique] = rows.to(w.dtype)
        return len(unique)


def lr_at(step: int, cfg: TrainConfig, base_lr: float) -> float:
    """Warm-up then cosine from base_lr to base_lr * lr_min_ratio over max_steps."""
    if step < cfg.warmup_steps:
        return base_lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return base_lr * (cfg.lr_min_ratio + (1 - cfg.lr_min_ratio) * cosine)


class EMA:
    """Exponential moving average of parameters (float32 shadow copies)."""

    def __init__(self, module: torch.nn.Module, decay: float, warmup: bool):
        self.decay, self.warmup = decay, warmup
        self.updates = 0
        self.shadow = {n: p.detach().float().clone() for n, p in module.named_parameters()}

    def current_decay(self) -> float:
        if self.warmup:
            return min(self.decay, (1 + self.updates) / (10 + self.updates))
        return self.decay

    @torch.no_grad()
    def update(self, module: torch.nn.Module) -> None:
        d = self.current_decay()
        for n, p in module.named_parameters():
            self.shadow[n].lerp_(p.detach().float(), 1 - d)
        self.updates += 1

    @torch.no_grad()
    def swap(self, module: torch.nn.Module) -> None:
        """Exchange the live weights and the EMA weights (call twice to undo)."""
        for n, p in module.named_parameters():
            live = p.detach().clone()
            p.copy_(self.shadow[n])
            self.shadow[n].copy_(live)


@contextlib.contextmanager
def ema_weights(module: torch.nn.Module, ema: EMA | None) -> Iterator[None]:
    """The EMA weights in `module` for the block when EMA is on; the live ones again after it."""
    if ema is None:
        yield
        return
    ema.swap(module)
    try:
        yield
    finally:
        ema.swap(module)
