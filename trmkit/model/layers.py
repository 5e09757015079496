"""Building blocks of the TRM network: RMSNorm, SwiGLU, rotary attention, grid convolution, blocks.

Departures from / choices beyond the paper (all follow the public reference code):
- Linear layers have no bias and are initialised LeCun-normal (std 1/sqrt(fan_in),
  truncated at 2 std).
- In the `mlp_t` mixer the post-norm of the sequence-mixing sub-block is taken
  while the sequence axis is last, i.e. it normalises over positions, as the
  reference code does; the channel MLP's post-norm normalises over channels.
- The `conv` mixer is ours, not the paper's: for tasks whose sequence is an
  H x W grid, each block mixes a cell with its 8 neighbours by a 3 x 3 convolution
  (depthwise, or dense with model.conv_dense) in place of attention, with the same
  residual + post-norm; no positions, no puzzle prefix. It follows the recurrent
  convolutional "deep thinking" networks (Schwarzschild et al. 2021; Bansal et al.
  2022), which extrapolate to larger mazes when run for more iterations.

Speed (docs/results.md), same mathematics:
- Under autocast a sub-block casts its input to the low precision once
  (`lowp`), contiguous, and both SwiGLU matmuls read that copy; autocast would
  cast it once per matmul, and a transposed input would be copied again inside
  each. The residual sums stay float32.
- `Network.fused_inference` (chosen by the planner): calls without gradients
  under bf16 autocast on a CPU run each SwiGLU as three oneDNN matmuls that
  apply SiLU, the gate-up product and the residual add in their epilogue
  (`SwiGLU.fused_residual`), instead of three more passes over the widest
  activations. Those calls keep their residual stream in bf16, as the
  reference code does everywhere; calls with gradients are unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trmkit.config import ModelConfig


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Weightless RMSNorm over the last axis, computed in float32."""
    return _RMSNorm.apply(x, eps)


class _RMSNorm(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) with a hand-written backward, dx = r (dy - y mean(dy y)):
    two passes over x forward and three backward, where autograd's graph of the same formula
    takes three and six (docs/results.md). Saves y and r, as many bytes as autograd's x and r."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.to(torch.promote_types(x.dtype, torch.float32))
        r = torch.linalg.vector_norm(x32, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        y = x32 * r
        ctx.save_for_backward(y, r)
        ctx.input_dtype = x.dtype
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        y, r = ctx.saved_tensors
        dy = dy.to(y.dtype)
        c = torch.linalg.vecdot(dy, y, dim=-1).unsqueeze(-1).div_(y.shape[-1])
        return torch.addcmul(dy, y, c, value=-1).mul_(r).to(ctx.input_dtype), None


def lowp(x: torch.Tensor) -> torch.Tensor:
    """x in autocast's low-precision dtype and contiguous, in one copy; x (contiguous) without autocast."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        if x.dtype != dtype:
            return x.to(dtype, memory_format=torch.contiguous_format)
    return x.contiguous()


def fused_inference_applies(x: torch.Tensor) -> bool:
    """Whether a call without gradients can take the fused path: on a CPU, under bf16 autocast or in
    plain float32 (no autocast)."""
    if x.device.type != "cpu" or torch.is_grad_enabled():
        return False
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return x.dtype == torch.float32


def swiglu_width(d: int, expansion: float) -> int:
    """Hidden width of a SwiGLU: expansion * 2/3 * d, rounded up to a multiple of 256."""
    return 256 * math.ceil(expansion * d * 2 / 3 / 256)


def channel_width(cfg: ModelConfig) -> int:
    """The channel SwiGLU's hidden width: model.mlp_width, or the expansion rule. The rule rounds a
    small D up a long way (D=64 -> 256, four times D), so small models may set it explicitly."""
    return cfg.mlp_width or swiglu_width(cfg.hidden_size, cfg.expansion)


def lecun_init_(linear: nn.Linear) -> None:
    std = 1.0 / math.sqrt(linear.in_features)
    nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)).

    gate and up are two matmuls rather than one of twice the width split in
    two: the halves of a split are strided views, and SiLU, the product and
    their gradients run 3-4% slower per training step on them (bf16, paper
    shapes; docs/results.md).
    """

    def __init__(self, d: int, width: int):
        super().__init__()
        self.gate = nn.Linear(d, width, bias=False)
        self.up = nn.Linear(d, width, bias=False)
        self.down = nn.Linear(width, d, bias=False)
        for linear in (self.gate, self.up, self.down):
            lecun_init_(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))

    def fused_residual(self, x: torch.Tensor) -> torch.Tensor:
        """x + self(x) without autograd, x a contiguous (N, d) bf16 or float32 matrix: oneDNN matmuls
        with SiLU, the product with up(x) and the residual add in their epilogues (no extra passes)."""
        if x.dtype == torch.bfloat16:
            gate, up, down = self.bf16_weights()
        else:
            gate, up, down = (lin.weight.detach() for lin in (self.gate, self.up, self.down))
        mkldnn = torch.ops.mkldnn
        g = mkldnn._linear_pointwise(x, gate, None, "swish", [], "")  # silu(x @ gate.T)
        p = mkldnn._linear_pointwise.binary(x, g, up, None, "mul")  # (x @ up.T) * g
        return mkldnn._linear_pointwise.binary(p, x, down, None, "add")  # (p @ down.T) + x

    def bf16_weights(self) -> list[torch.Tensor]:
        """bf16 copies of the three weights, made again only after a weight changed (in-place
        updates bump a tensor's version): once per optimizer step, not once per call."""
        linears = (self.gate, self.up, self.down)
        key = tuple((lin.weight.data_ptr(), lin.weight._version) for lin in linears)
        if getattr(self, "_bf16_key", None) != key:
            self._bf16 = [lin.weight.detach().to(torch.bfloat16) for lin in linears]
            self._bf16_key = key
        return self._bf16


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


class GridConv(nn.Module):
    """A 3 x 3 convolution over the H x W grid the sequence holds (row-major), no bias: each cell
    mixes with its 8 neighbours (depthwise: each channel alone; dense: every channel with every
    other). Zero padding: the grid's border sees nothing beyond it. No positions: the same
    weights at every cell, so a model trained on one grid size runs on any other."""

    def __init__(self, d: int, dense: bool):
        super().__init__()
        self.groups = 1 if dense else d
        self.weight = nn.Parameter(torch.empty(d, d // self.groups, 3, 3))
        std = 1.0 / math.sqrt(self.weight[0].numel())  # LeCun normal over the fan-in, as the linears
        nn.init.trunc_normal_(self.weight, std=std, a=-2 * std, b=2 * std)

    def forward(self, h: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        B, S, D = h.shape
        x = h.view(B, grid[0], grid[1], D).permute(0, 3, 1, 2)  # (B, D, H, W) in channels-last memory: no copy
        y = F.conv2d(x, self.weight.to(x.dtype), padding=1, groups=self.groups)  # (B, D, H, W)
        return y.permute(0, 2, 3, 1).reshape(B, S, D)


class Block(nn.Module):
    """Post-norm residual block: sequence mixer (attention, mlp_t or conv), then a SwiGLU."""

    def __init__(self, cfg: ModelConfig, seq_total: int):
        super().__init__()
        d = cfg.hidden_size
        self.mixer = cfg.mixer
        self.eps = cfg.rms_norm_eps
        if cfg.mixer == "mlp_t":
            self.mix = SwiGLU(seq_total, swiglu_width(seq_total, cfg.expansion))  # mixes along the S axis
        elif cfg.mixer == "conv":
            self.mix = GridConv(d, cfg.conv_dense)
        else:
            self.mix = Attention(d, cfg.num_heads)
        self.mlp = SwiGLU(d, channel_width(cfg))

    def forward(self, h: torch.Tensor, positions) -> torch.Tensor:
        """positions: rotary tables (attention), the grid's (H, W) (conv), None (mlp_t)."""
        if self.mixer == "mlp_t":
            t = h.transpose(1, 2)  # (B, D, S)
            h = rms_norm(t + self.mix(lowp(t)), self.eps).transpose(1, 2)  # (B, S, D)
        else:
            h = self.attend(h, positions)
        return rms_norm(h + self.mlp(lowp(h)), self.eps)

    def forward_fused(self, h: torch.Tensor, positions) -> torch.Tensor:
        """`forward` without autograd on a CPU, under bf16 autocast or in float32 (see
        fused_inference_applies; `lowp` gives bf16 or float32); returns that dtype."""
        B, S, D = h.shape
        if self.mixer == "mlp_t":
            t = self.mix.fused_residual(lowp(h.transpose(1, 2)).view(-1, S))  # (B*D, S)
            h = rms_norm(t.view(B, D, S), self.eps).transpose(1, 2)  # (B, S, D)
        else:
            h = self.attend(h, positions)
        return rms_norm(self.mlp.fused_residual(lowp(h).view(-1, D)), self.eps).view(B, S, D)

    def attend(self, h: torch.Tensor, positions) -> torch.Tensor:
        """The attention or convolution sub-block, the same on both paths."""
        return rms_norm(h + self.mix(lowp(h), positions), self.eps)


class Network(nn.Module):
    """The one shared network: net(h, injection) = blocks(h + injection)."""

    def __init__(self, cfg: ModelConfig, seq_total: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block(cfg, seq_total) for _ in range(cfg.L_layers))
        self.fused_inference = False  # set by the planner (plan.choose_fused_inference)

    def forward(self, h: torch.Tensor, injection: torch.Tensor, positions, recompute: bool = False) -> torch.Tensor:
        """recompute: keep only each block's input and recompute the block in backward."""
        h = h + injection
        if self.fused_inference and fused_inference_applies(h):
            return self._fused_blocks(h, positions)
        for block in self.blocks:
            h = checkpoint(block, h, positions, use_reentrant=False) if recompute else block(h, positions)
        return h

    def _fused_blocks(self, h: torch.Tensor, positions) -> torch.Tensor:
        for block in self.blocks:
            h = block.forward_fused(h, positions)
        return h

    def compile(self, *args, **kwargs) -> None:
        """nn.Module.compile, the fused path left eager first (keep_fused_path_eager)."""
        keep_fused_path_eager()
        super().compile(*args, **kwargs)


def keep_fused_path_eager() -> None:
    """Mark Network._fused_blocks to run eagerly under torch.compile (inductor cannot lower oneDNN's fused
    matmuls), once per process, before anything is compiled. Not a decorator: torch.compiler.disable imports
    torch._dynamo, about 2.6 s of every start-up, which inference without compile (e-mail predict) never needs."""
    if not _EAGER:
        Network._fused_blocks = torch.compiler.disable(Network._fused_blocks)
        _EAGER.append(True)


_EAGER: list[bool] = []  # holds True once keep_fused_path_eager has run


def fused_inference_works(dtype: torch.dtype = torch.bfloat16) -> str:
    """'' if the oneDNN matmuls with fused epilogues run here in `dtype` and agree with the plain
    SwiGLU (within that dtype's tolerance), else why not."""
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # the run's random state is left as it was
            torch.manual_seed(0)
            mlp = SwiGLU(64, 256)
            x = torch.randn(8, 64).to(dtype)
            fused = mlp.fused_residual(x).float()
            plain = x.float() + mlp(x.float())
    except (RuntimeError, AttributeError, NotImplementedError) as err:  # the op or its CPU kernel is missing
        return f"oneDNN's fused matmul is not available in this torch build ({type(err).__name__}: {err})"[:300]
    err = ((fused - plain).norm() / plain.norm()).item()
    tolerance = 0.02 if dtype == torch.bfloat16 else 1e-4
    return "" if err < tolerance else (f"oneDNN's fused matmul disagrees with the plain SwiGLU "
                                       f"(relative error {err:.2g})")
