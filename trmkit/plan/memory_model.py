"""The memory model: bytes per slot and fixed bytes of one training step, and what fits a budget.

`estimate_memory` predicts the peak resident memory of one training step:

    peak = fixed + batch_size * carry_per_slot + micro_batch * micro_per_slot

- fixed: this process before the model exists (Python, torch; `hw.memory.rss`),
  the runtime's own allocations (oneDNN, OpenMP, allocator; calibrated, and
  raised by what earlier runs measured beyond the estimate: `learn_from_peaks`),
  the weights, their gradients and the guard's copy of them, Adam's m and v,
  the EMA copy, the puzzle-embedding
  table and, under bf16 autocast, the bf16 copies of the weights (autocast's and the
  fused no-gradient path's).
- carry_per_slot, for every slot of the *global* batch (they persist across
  micro-batches): z_H and z_L (each micro-batch's outputs overwrite its slots
  in place once its backward is done), the puzzle-embedding rows and their
  gradients that the sparse optimizer holds until the step ends, the slot's inputs and labels.
- micro_per_slot: what autograd saves for the cycle that keeps gradients
  (n + 1 calls of the network; per block the SwiGLU gate/up outputs, silu,
  their product, the input copies and the residual sums kept by RMSNorm) plus
  the backward's working set and the float64 logits of the stable-max loss.
  With checkpointing each block keeps only its float32 input and one block
  at a time is recomputed during backward.

The constants come from `Calibration`: defaults measured with torch 2.13 on an x86-64 Linux
CPU, or what `calibrate.py` fitted and learned on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from trmkit.config import ModelConfig
from trmkit.hardware import HardwareInfo
from trmkit.hardware.report import format_bytes
from trmkit.model.layers import channel_width, swiglu_width
from trmkit.model.trm import input_dtype
from trmkit.plan.objects import EVAL_BATCH_MAX, MemoryEstimate, MiB

# Runtime allocations beyond the baseline RSS: oneDNN/MKL scratch and kernels, OpenMP
# thread stacks, allocator slack. Measured here (torch 2.13, x86-64 Linux): 70-110 MiB.
DEFAULT_RUNTIME_OVERHEAD = 96 * MiB
# Backward keeps the saved activations while it builds gradients of the same shapes: its
# working set measured here is about one network call's saved activations (0.9-1.1).
DEFAULT_BACKWARD_CALLS = 1.0
DEFAULT_BASELINE = 240 * MiB  # RSS of python + torch + trmkit before the model (when not probed)
DEFAULT_MARGIN = 0.10  # paper config, empty cache: steps 4-7% over the estimate with freed memory returned
# (11% with it kept, which TIGHT_BUDGET allows only with 25% of room; docs/results.md)
MEASURED_MARGIN = 0.03  # once a run of this config measured (and taught) it
# Evaluation without gradients frees each intermediate as soon as the next op has read it. With freed
# memory kept in the process (keep_freed_memory), glibc's heap reuses few of those holes for the next,
# differently sized tensors and grows: the conv maze model (D=96, bf16, 16 and 64 slots of 61 x 61, 16
# steps) rose 9.5 KB per cell and slot kept against 3.8 KB returned (eval_slot_bytes counts 4.1 KB).
KEPT_EVAL_FRAGMENTATION = 2.5


@dataclass(frozen=True)
class Calibration:
    """Machine- and build-specific constants of the memory model."""

    runtime_overhead: int = DEFAULT_RUNTIME_OVERHEAD  # bytes beyond the baseline RSS, fixed
    backward_calls: float = DEFAULT_BACKWARD_CALLS  # backward working set, in network calls' activations
    source: str = "defaults measured with torch 2.13 on x86-64 Linux"
    eval_overhead: int = 0  # bytes evaluation needed beyond its estimate in an earlier run (learned)
    measured_runs: int = 0  # runs of this config whose peaks were checked against the estimate

    @property
    def margin(self) -> float:
        """Share of the budget kept free for the memory model's error: wide until a run here measured it."""
        return MEASURED_MARGIN if self.measured_runs else DEFAULT_MARGIN


def seq_total(m: ModelConfig) -> int:
    """S: positions the network sees, the puzzle-embedding prefix plus the sequence (less a part's positions)."""
    return m.network_positions


def output_shape(m: ModelConfig) -> tuple[int, int]:
    """(positions, width) of the logits: (L, V) for a grid task, (1, C) for a classifier."""
    if m.num_classes:
        return 1, m.num_classes
    answers = (m.answer_vocab or m.vocab_size) + len(m.trace_ids)  # a trace's tokens too (data.trace)
    return m.seq_len - m.part_positions, answers  # a part's positions (model/parts.py) are not answered


def count_parameters(m: ModelConfig) -> int:
    """Trainable parameters of TRM(m) (the puzzle-embedding buffer excluded)."""
    S, D = seq_total(m), m.hidden_size
    W = channel_width(m)
    mlp = 3 * D * W  # gate, up (D x W each) + down (W x D)
    if m.mixer == "mlp_t":
        mix = 3 * S * swiglu_width(S, m.expansion)
    elif m.mixer == "conv":
        mix = 9 * D * (D if m.conv_dense else 1)  # 3 x 3 taps, dense or depthwise
    else:
        mix = 4 * D * D  # qkv + out
    head = D * m.num_classes + m.num_classes if m.num_classes else D * output_shape(m)[1]
    return m.vocab_size * D + m.L_layers * (mix + mlp) + head + 2 * D + 2


def block_saved_bytes(m: ModelConfig, elem: int) -> int:
    """Bytes autograd saves per slot for one block (elem: bytes of a matmul operand, 4 or 2).

    The residual sums that RMSNorm keeps stay float32 under autocast.
    """
    S, D = seq_total(m), m.hidden_size
    W = channel_width(m)
    mlp = 4 * S * W * elem + S * D * elem + S * D * 4  # gate/up (2W), silu, product; input copy; sum
    if m.mixer == "mlp_t":
        Ws = swiglu_width(S, m.expansion)
        mix = 4 * D * Ws * elem + S * D * elem + S * D * 4  # the same SwiGLU along the sequence axis
    elif m.mixer == "conv":
        mix = S * D * elem + S * D * 4  # the convolution's input copy; the residual sum
    else:
        # qkv input and output (1 + 3), rotated q and k (2), attention output (1);
        # log-sum-exp per head and position; the residual sum
        mix = 7 * S * D * elem + m.num_heads * S * 4 + S * D * 4
    return mix + mlp


def net_call_bytes(m: ModelConfig, elem: int) -> int:
    """Bytes saved per slot by one call of the shared network (L_layers blocks)."""
    return m.L_layers * block_saved_bytes(m, elem)


def micro_slot_bytes(m: ModelConfig, elem: int, grad_checkpointing: bool, backward_calls: float) -> int:
    """Bytes per slot of the micro-batch at the step's peak (in backward)."""
    S, D, calls = seq_total(m), m.hidden_size, m.L_cycles + 1
    if grad_checkpointing:  # each block keeps its float32 input; one block at a time is recomputed
        unit = block_saved_bytes(m, elem)
        saved = calls * m.L_layers * S * D * 4 + unit
    else:
        unit = net_call_bytes(m, elem)
        saved = calls * unit
    working = backward_calls * unit  # gradients of one recomputed unit's activations, being built
    positions, width = output_shape(m)
    loss = positions * width * (elem + 6 * 8)  # logits, then float64 stable-max tensors
    states = 4 * S * D * 4  # x, z_H + x, the step's outputs z_H and z_L
    return int(saved + working) + loss + states


def carry_slot_bytes(m: ModelConfig) -> int:
    """Bytes per slot of the global batch that live through the whole step."""
    S, D = seq_total(m), m.hidden_size
    carry = 2 * S * D * 4  # z_H, z_L (float32), updated in place micro-batch by micro-batch
    puzzle_rows = 2 * (m.puzzle_emb_dim or m.puzzle_emb_len * D) * 4  # rows in use and their gradients
    token = input_dtype(m.vocab_size).itemsize  # inputs: uint8, or int32 for a tokenizer's vocabulary
    data = m.seq_len * (token + 8) + 8 + 4 + 1 + 2 * 4  # inputs, labels int64, id, steps, halted, draws
    return carry + puzzle_rows + data


def fixed_parts(m: ModelConfig, dtype: str, baseline: int, calib: Calibration,
                ema: bool = True) -> dict[str, int]:
    """Bytes that do not depend on the batch."""
    n = count_parameters(m)
    parts = {
        "baseline": baseline,
        "runtime overhead": calib.runtime_overhead,
        "weights": 4 * n,
        "gradients": 4 * n,
        "gradient undo copy": 4 * n,  # the guard's copy to undo a micro-batch whose allocation failed
        "optimizer (Adam m, v)": 8 * n,
        "EMA copy": 4 * n if ema else 0,
        "puzzle embeddings": 4 * m.num_puzzle_ids * (m.puzzle_emb_dim or m.puzzle_emb_len * m.hidden_size),
    }
    if dtype == "bfloat16":  # autocast's, and the fused no-gradient path's (choose.choose_fused_inference)
        parts["bf16 weight copies"] = 4 * n
    return parts


def eval_slot_bytes(m: ModelConfig, elem: int) -> int:
    """Bytes per evaluation slot: its states and the largest live intermediates of one block."""
    S, D = seq_total(m), m.hidden_size
    mixer = {"mlp_t": 4 * D * swiglu_width(S, m.expansion), "conv": 2 * S * D}.get(m.mixer, 7 * S * D)
    widest = max(4 * S * channel_width(m), mixer)
    positions, width = output_shape(m)
    return 6 * S * D * 4 + widest * elem + positions * width * 6 * 8


def estimate_memory(m: ModelConfig, batch_size: int, micro_batch: int, *, dtype: str = "float32",
                    grad_checkpointing: bool = False, baseline: int = DEFAULT_BASELINE,
                    calibration: Calibration | None = None, ema: bool = True,
                    eval_batch: int | None = None, kept_memory: bool = False) -> MemoryEstimate:
    """Peak bytes of one training step of TRM(m) with `batch_size` slots, `micro_batch` at a time, and of
    evaluating `eval_batch` slots (kept_memory: freed memory stays in the process, KEPT_EVAL_FRAGMENTATION)."""
    calib = calibration or Calibration()
    elem = 2 if dtype == "bfloat16" else 4
    carry, micro = carry_slot_bytes(m), micro_slot_bytes(m, elem, grad_checkpointing, calib.backward_calls)
    parts = fixed_parts(m, dtype, baseline, calib, ema)
    fixed = sum(parts.values())
    parts["carry"] = batch_size * carry
    parts["activations"] = micro_batch * micro
    eval_batch = min(batch_size, EVAL_BATCH_MAX) if eval_batch is None else eval_batch
    per_eval_slot = int(eval_slot_bytes(m, elem) * (KEPT_EVAL_FRAGMENTATION if kept_memory else 1))
    eval_peak = fixed + batch_size * carry + eval_batch * per_eval_slot + calib.eval_overhead
    return MemoryEstimate(batch_size, micro_batch, grad_checkpointing, dtype, parts, carry, micro,
                          eval_batch, eval_peak)


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class MemoryContext:
    """What every estimate of one plan shares."""

    dtype: str
    baseline: int
    calibration: Calibration
    ema: bool
    budget: int  # what estimates must fit: the given budget less the margin for the model's error
    given: int = 0  # the budget as given (0: the same as `budget`)
    kept_memory: bool = False  # freed memory may stay in the process (keep_freed_memory not off, glibc, CPU)

    def shown(self) -> str:
        """The budget for messages: as given, and what the plan fits into when that is less."""
        if not self.given or self.given == self.budget:
            return format_bytes(self.budget)
        return f"{format_bytes(self.given)} ({format_bytes(self.budget)} after the margin for the memory model's error)"

    def estimate(self, m: ModelConfig, batch: int, micro: int, ckpt: bool,
                 eval_batch: int | None = None) -> MemoryEstimate:
        return estimate_memory(m, batch, micro, dtype=self.dtype, grad_checkpointing=ckpt,
                               baseline=self.baseline, calibration=self.calibration, ema=self.ema,
                               eval_batch=eval_batch, kept_memory=self.kept_memory)

    def fits(self, m: ModelConfig, batch: int, micro: int, ckpt: bool) -> bool:
        return self.estimate(m, batch, micro, ckpt, eval_batch=1).train_peak <= self.budget


def largest_micro_batch(m: ModelConfig, batch: int, ckpt: bool, mc: MemoryContext) -> int:
    """The largest divisor of `batch` whose step fits the budget (0: not even 1)."""
    best = 0
    for d in divisors(batch):
        if not mc.fits(m, batch, d, ckpt):
            break
        best = d
    return best


def process_baseline(hw: HardwareInfo) -> int:
    """The memory model's baseline on a CPU: this process before the model (never under half the default)."""
    return max(hw.memory.rss, DEFAULT_BASELINE // 2)
