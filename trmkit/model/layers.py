"""Building blocks of the TRM network: RMSNorm, SwiGLU, rotary attention, blocks.

Departures from / choices beyond the paper (all follow the public reference code):
- Linear layers have no bias and are initialised LeCun-normal (std 1/sqrt(fan_in),
  truncated at 2 std).
- In the `mlp_t` mixer the post-norm of the sequence-mixing sub-block is taken
  while the sequence axis is last, i.e. it normalises over positions, as the
  reference code does; the channel MLP's post-norm normalises over channels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Weightless RMSNorm over the last axis, computed in float32."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
    return x32.to(x.dtype)


def swiglu_width(d: int, expansion: float) -> int:
    """Hidden width of a SwiGLU: expansion * 2/3 * d, rounded up to a multiple of 256."""
    return 256 * math.ceil(expansion * d * 2 / 3 / 256)


def lecun_init_(linear: nn.Linear) -> None:
    std = 1.0 / math.sqrt(linear.in_features)
    nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)).

    gate and up are two matmuls rather than one of twice the width split in
    two: the halves of a split are strided views, and SiLU, the product and
    their gradients run 3-4% slower per training step on them (bf16, paper
    shapes; docs/performance.md).
    """

    def __init__(self, d: int, expansion: float):
        super().__init__()
        width = swiglu_width(d, expansion)
        self.gate = nn.Linear(d, width, bias=False)
        self.up = nn.Linear(d, width, bias=False)
        self.down = nn.Linear(width, d, bias=False)
        for linear in (self.gate, self.up, self.down):
            lecun_init_(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rotary_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each (seq_len, head_dim), for rotate-half rotary positions."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (S, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (S, hd)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, S, hd); rotate pairs (i, i + hd/2) by the position's angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    """Bidirectional multi-head self-attention with rotary positions."""

    def __init__(self, d: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        lecun_init_(self.qkv)
        lecun_init_(self.out)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, S, D = x.shape
        qkv = self.qkv(x).view(B, S, 3, self.num_heads, D // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, S, hd)
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, S, hd)
        return self.out(y.transpose(1, 2).reshape(B, S, D))


class Block(nn.Module):
    """Post-norm residual block: sequence mixer (attention or mlp_t), then a SwiGLU."""

    def __init__(self, d: int, seq_total: int, mixer: str, num_heads: int, expansion: float, eps: float):
        super().__init__()
        self.mixer = mixer
        self.eps = eps
        if mixer == "mlp_t":
            self.mix = SwiGLU(seq_total, expansion)  # mixes along the S axis
        else:
            self.mix = Attention(d, num_heads)
        self.mlp = SwiGLU(d, expansion)

    def forward(self, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        if self.mixer == "mlp_t":
            t = h.transpose(1, 2)  # (B, D, S)
            h = rms_norm(t + self.mix(t), self.eps).transpose(1, 2)  # (B, S, D)
        else:
            h = rms_norm(h + self.mix(h, rope), self.eps)
        return rms_norm(h + self.mlp(h), self.eps)


class Network(nn.Module):
    """The one shared network: net(h, injection) = blocks(h + injection)."""

    def __init__(self, d: int, seq_total: int, L_layers: int, mixer: str, num_heads: int,
                 expansion: float, eps: float):
        super().__init__()
        self.blocks = nn.ModuleList(
            Block(d, seq_total, mixer, num_heads, expansion, eps) for _ in range(L_layers)
        )

    def forward(self, h: torch.Tensor, injection: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor] | None, recompute: bool = False) -> torch.Tensor:
        """recompute: keep only each block's input and recompute the block in backward."""
        h = h + injection
        for block in self.blocks:
            h = checkpoint(block, h, rope, use_reentrant=False) if recompute else block(h, rope)
        return h
