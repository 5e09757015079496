"""FLOP counts of one TRM training step, and the Linear-layer matmuls (GEMMs) it runs.

FLOP count, per sample and per supervision step (one training step updates
every slot by one supervision step). Matmul FLOPs only: an (m,k)x(k,n)
product costs 2*m*n*k; norms, activations, softmax, the loss, embedding
lookups and the optimizer are not counted.

    S = puzzle_emb_len + seq_len, L = seq_len, D = hidden_size, V = vocab_size,
    w(d) = swiglu_width(d, expansion)  (layers.py: expansion*2/3*d rounded up to 256)
    SwiGLU over t rows of d features: gate 2*t*d*w + up 2*t*d*w + down 2*t*w*d = 6*t*d*w(d)
    one call of the shared network, per layer:
        mlp_t:     6*D*S*w(S)    sequence mixer (D rows of S features, transposed)
                 + 6*S*D*w(D)    channel SwiGLU
        attention: 2*S*D*3D (qkv) + 2*S*S*D (scores) + 2*S*S*D (values) + 2*S*D*D (out)
                 + 6*S*D*w(D)
    calls: T*(n+1) = H_cycles*(L_cycles+1); the first (T-1)*(n+1) run without
    gradients (forward only), the last n+1 run forward + backward, and
    backward = 2 x forward (gradients of inputs and of weights)
    heads: lm_head 2*L*D*V + q head 2*D*2, forward + backward = 3x
    total = L_layers*call * ((T-1)*(n+1) + 3*(n+1)) + 3*heads

The paper's Sudoku config (mlp_t, D=512, 2 layers, T=3, n=6, S=16+81=97,
V=11) gives 42.72 GFLOP, the ~42.7 quoted for it. These are model FLOPs:
gradient checkpointing recomputes the gradient cycle's forward (n+1 more
calls), which is not counted, so MFU falls when it is on. The count equals
torch.utils.flop_counter.FlopCounterMode on a real forward + backward
(tests/bench/test_bench.py; on the CPU that counter skips scaled_dot_product_attention).
"""

from __future__ import annotations

from dataclasses import dataclass

from trmkit.config import ConfigError, ModelConfig
from trmkit.model.layers import channel_width, swiglu_width


@dataclass(frozen=True)
class FlopCount:
    """Matmul FLOPs of one training supervision step, per sample."""

    per_call: int  # one call of the shared network (all L_layers), forward
    calls_no_grad: int  # (T-1)*(n+1), forward only
    calls_grad: int  # n+1, forward + backward
    heads: int  # lm_head + q head, forward
    total: int  # per_call*(calls_no_grad + 3*calls_grad) + 3*heads


def swiglu_flops(rows: int, d: int, width: int) -> int:
    """gate and up (rows,d)x(d,w) each + down (rows,w)x(w,d) = 6*rows*d*w."""
    return 2 * rows * d * 2 * width + 2 * rows * width * d


def layer_flops(cfg: ModelConfig) -> int:
    """Forward FLOPs of one block for one sample (see the module docstring)."""
    S, D = cfg.network_positions, cfg.hidden_size
    channel = swiglu_flops(S, D, channel_width(cfg))
    if cfg.mixer == "mlp_t":
        mixer = swiglu_flops(D, S, swiglu_width(S, cfg.expansion))  # (B*D, S) rows after transpose
    elif cfg.mixer == "conv":  # 9 taps per cell: a convolution, not a matmul (see the module docstring)
        mixer = 2 * S * 9 * D * (D if cfg.conv_dense else 1)
    else:
        mixer = 2 * S * D * 3 * D + 2 * S * S * D + 2 * S * S * D + 2 * S * D * D
    return mixer + channel


def flops_per_sample(cfg: ModelConfig) -> FlopCount:
    """Matmul FLOPs of one supervision step (forward + backward) for one sample."""
    if cfg.seq_len < 1 or cfg.vocab_size < 1:
        raise ConfigError("model.seq_len and model.vocab_size must be set to count FLOPs")
    per_call = cfg.L_layers * layer_flops(cfg)
    per_cycle = cfg.L_cycles + 1
    no_grad, grad = (cfg.H_cycles - 1) * per_cycle, per_cycle
    positions, width = (1, cfg.num_classes) if cfg.num_classes else (cfg.seq_len, cfg.vocab_size)
    heads = 2 * positions * cfg.hidden_size * width + 2 * cfg.hidden_size * 2
    total = per_call * (no_grad + 3 * grad) + 3 * heads
    return FlopCount(per_call=per_call, calls_no_grad=no_grad, calls_grad=grad, heads=heads, total=total)


@dataclass(frozen=True)
class Gemm:
    """One matmul shape (m,k)x(k,n) and how often a training step runs it."""

    name: str
    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


def model_gemms(cfg: ModelConfig, batch: int) -> list[Gemm]:
    """The Linear-layer matmuls of one training step at `batch` slots (forward, dX, dW).

    Attention scores/values and the heads are left out: they are < 1% of the
    FLOPs for mlp_t and small for attention at S ~ 100.
    """
    S, D, e = cfg.network_positions, cfg.hidden_size, cfg.expansion
    fc = flops_per_sample(cfg)
    fwd, bwd = cfg.L_layers * (fc.calls_no_grad + fc.calls_grad), cfg.L_layers * fc.calls_grad
    wd = channel_width(cfg)
    linears = [("mlp.gate", batch * S, D, wd), ("mlp.up", batch * S, D, wd), ("mlp.down", batch * S, wd, D)]
    if cfg.mixer == "mlp_t":
        ws = swiglu_width(S, e)
        linears += [("mix.gate", batch * D, S, ws), ("mix.up", batch * D, S, ws),
                    ("mix.down", batch * D, ws, S)]
    elif cfg.mixer == "conv":  # a dense 3 x 3 convolution as the matmul it lowers to (im2col); depthwise: none
        linears += [("conv (im2col)", batch * S, 9 * D, D)] if cfg.conv_dense else []
    else:
        linears += [("attn.qkv", batch * S, D, 3 * D), ("attn.out", batch * S, D, D)]
    gemms = []
    for name, m, k, n in linears:
        gemms += [Gemm(f"{name} fwd", m, k, n, fwd), Gemm(f"{name} dX", m, n, k, bwd),
                  Gemm(f"{name} dW", k, m, n, bwd)]
    return gemms
