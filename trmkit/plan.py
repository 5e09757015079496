"""The execution plan: every 'auto' setting resolved for this machine, each with its reason.

`make_plan(cfg, hw)` chooses device, threads, data-loader workers, compute dtype,
memory budget, micro-batch and gradient accumulation, activation checkpointing,
the evaluation batch, torch.compile and whether the C allocator keeps freed
memory for reuse (glibc; `choose_keep_freed_memory`). Every choice is a
`Choice(value, reason)`, printed at the start of a run and stored in the run
directory (`Plan.to_dict()`).
A config that cannot work stops with a `ConfigError` that names the problem and
a concrete alternative.

The memory model (`estimate_memory`) predicts the peak resident memory of one
training step:

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

`calibrate_memory` fits the runtime overhead and the backward working set from
two real steps (in fresh subprocesses, so peak RSS is clean) and caches them per
config and torch version; without it, defaults measured with torch 2.13 on an
x86-64 Linux CPU are used (docs/planning.md has the table: within 10% of the
measured peak for the Sudoku configs; since 2026-11-27 the real steps need up to 13% less
than that, an over-estimate, which the budget tolerates).

Nothing runs at import time. Measurements run inside `make_plan` only: the
speed of one network call at float32/bf16 (a few seconds, cached per machine,
torch and model shape; not cached when other processes were busy), torch.compile
(only for runs longer than 30 minutes, cached) and, when asked, the calibration.

Departures from "always the largest micro-batch": activation checkpointing is
turned on only where memory is the limit *and* the micro-batch without it would
be too small for efficient matmuls (see `_auto_checkpointing`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from trmkit.config import Config, ConfigError, ModelConfig
from trmkit.hardware import (KEEP_TRIM_THRESHOLD, HardwareInfo, effective_available, format_bytes,
                              keep_freed_memory, return_freed_memory)
from trmkit.memory import kernel_peak
from trmkit.model.layers import Network, fused_inference_works, rotary_tables, swiglu_width
from trmkit.model.trm import input_dtype

Log = Callable[[str], None]

MiB = 1 << 20
GiB = 1 << 30
BUDGET_FRACTION = 0.8  # default budget: this share of the memory limit, minus what others use
# Runtime allocations beyond the baseline RSS: oneDNN/MKL scratch and kernels, OpenMP
# thread stacks, allocator slack. Measured here (torch 2.13, x86-64 Linux): 70-110 MiB.
DEFAULT_RUNTIME_OVERHEAD = 96 * MiB
# Backward keeps the saved activations while it builds gradients of the same shapes: its
# working set measured here is about one network call's saved activations (0.9-1.1).
DEFAULT_BACKWARD_CALLS = 1.0
DEFAULT_BASELINE = 240 * MiB  # RSS of python + torch + trmkit before the model (when not probed)
EVAL_BATCH_MAX = 256  # evaluation slots per forward: larger gains nothing on a CPU
CHECKPOINT_MIN_ROWS = 512  # below micro_batch * seq rows per matmul, CPU matmuls lose efficiency
BUSY_PERCENT = 25.0  # other processes using more CPU than this make timings unreliable
BF16_MIN_SPEEDUP = 1.1  # bf16 must be at least 10% faster to be worth its rounding
COMPILE_SHORT_RUN_S = 30 * 60  # runs shorter than this never compile: compile time would not pay back
COMPILE_PAYBACK = 2.0  # compile only if the expected saving is twice its (measured) cost
SPEED_FILE = "speed.json"
CALIBRATION_FILE = "memory_calibration.json"
COMPILE_FILE = "compile.json"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": MiB, "mb": 10**6, "mib": MiB,
          "g": GiB, "gb": 10**9, "gib": GiB, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


# ----------------------------------------------------------------------------- plan objects

@dataclass
class Choice:
    value: Any
    reason: str


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak resident memory of one training step (and of evaluation), in bytes."""

    batch_size: int
    micro_batch: int
    grad_checkpointing: bool
    dtype: str
    parts: dict[str, int]  # name -> bytes; fixed parts, then "carry" and "activations"
    carry_per_slot: int  # bytes per slot of the global batch
    micro_per_slot: int  # bytes per slot of the micro-batch
    eval_batch: int
    eval_peak: int  # peak while evaluating eval_batch slots (the training state stays alive)

    @property
    def fixed(self) -> int:
        return sum(v for k, v in self.parts.items() if k not in ("carry", "activations"))

    @property
    def train_peak(self) -> int:
        return sum(self.parts.values())

    @property
    def total(self) -> int:
        return max(self.train_peak, self.eval_peak)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fixed": self.fixed, "train_peak": self.train_peak, "total": self.total}

    def lines(self) -> list[str]:
        rows = [f"  {name:<22}{format_bytes(v):>11}" for name, v in self.parts.items()]
        rows[-2] += f"  ({self.batch_size} slots x {format_bytes(self.carry_per_slot)})"
        rows[-1] += f"  ({self.micro_batch} slots x {format_bytes(self.micro_per_slot)})"
        return rows + [
            f"  {'training peak':<22}{format_bytes(self.train_peak):>11}",
            f"  {'evaluation peak':<22}{format_bytes(self.eval_peak):>11}  ({self.eval_batch} slots at a time)",
        ]


@dataclass
class Plan:
    device: Choice
    dtype: Choice
    threads: Choice
    micro_batch: Choice
    accumulation: Choice
    interop_threads: Choice = field(default_factory=lambda: Choice(1, "default"))
    workers: Choice = field(default_factory=lambda: Choice(0, "default"))
    budget: Choice = field(default_factory=lambda: Choice(0, "not planned"))
    grad_checkpointing: Choice = field(default_factory=lambda: Choice(False, "default"))
    eval_batch: Choice = field(default_factory=lambda: Choice(EVAL_BATCH_MAX, "default"))
    compile: Choice = field(default_factory=lambda: Choice(False, "default"))
    keep_freed_memory: Choice = field(default_factory=lambda: Choice(False, "default"))
    fused_inference: Choice = field(default_factory=lambda: Choice(False, "default"))
    estimate: MemoryEstimate | None = None
    step_seconds: float | None = None  # estimated wall time of one optimizer step
    trim_threshold: int = 0  # free heap top glibc may keep (keep_freed_memory); see choose_keep_freed_memory

    def choices(self) -> dict[str, Choice]:
        names = ("device", "threads", "interop_threads", "workers", "dtype", "budget", "micro_batch",
                 "accumulation", "grad_checkpointing", "eval_batch", "compile", "keep_freed_memory",
                 "fused_inference")
        return {k: getattr(self, k) for k in names}

    def lines(self) -> list[str]:
        return [f"{name}={_show(name, c.value)} ({c.reason})" for name, c in self.choices().items()]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: asdict(c) for name, c in self.choices().items()}
        out["memory"] = self.estimate.to_dict() if self.estimate else None
        out["step_seconds"] = self.step_seconds
        return out

    def torch_device(self) -> torch.device:
        return torch.device(self.device.value)

    @property
    def is_cpu(self) -> bool:
        return self.device.value == CPU

    def autocast(self):
        """A factory of the autocast context for the chosen device and dtype."""
        return autocast_factory(self.device.value, self.dtype.value)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # compute dtypes trmkit can plan
CPU = "cpu"


def autocast_factory(device: str, dtype: str):
    """nullcontext for float32; bf16 autocast (float32 master weights) otherwise."""
    if dtype == "bfloat16":
        return functools.partial(torch.autocast, device_type=device, dtype=torch.bfloat16)
    return contextlib.nullcontext


def _show(name: str, value: Any) -> str:
    if name == "budget":
        return format_bytes(value).replace(" ", "")
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


# ----------------------------------------------------------------------------- budget

def parse_bytes(text: str | int) -> int:
    """'6GB' -> 6e9, '6GiB' -> 6 * 2**30, '512MB' -> 512e6, '6g' -> 6 * 2**30 (docker's
    convention: a bare K/M/G/T is binary), '1073741824' -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ConfigError(f"memory size {text!r}: write a number and a unit, e.g. 6GB, 6GiB or 512MB")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"memory size {text!r} must be positive")
    return value


def choose_budget(hw: HardwareInfo, text: str, budget_bytes: int | None, on_gpu: bool) -> Choice:
    """Bytes the planned step may use at its peak (the whole process's RSS on a CPU)."""
    if budget_bytes is not None or text:
        value = int(budget_bytes) if budget_bytes is not None else parse_bytes(text)
        where = "given as --memory-budget" if budget_bytes is not None else f"set as run.memory_budget={text}"
        free = effective_available(hw) + hw.memory.rss
        warn = f"; more than the {format_bytes(free)} free now" if value > free and not on_gpu else ""
        return Choice(value, f"{where} ({format_bytes(value)}){warn}")
    if on_gpu and hw.torch.cuda_memory:
        value = int(BUDGET_FRACTION * hw.torch.cuda_memory)
        return Choice(value, f"{BUDGET_FRACTION:.0%} of {format_bytes(hw.torch.cuda_memory)} GPU memory")
    mem = hw.memory
    available = effective_available(hw)
    others = max(0, mem.limit - available - mem.rss)  # in use under the same limit, not by us
    value = min(int(BUDGET_FRACTION * mem.limit) - others, available + mem.rss)
    if value <= 0:
        raise ConfigError(f"no memory to plan with: {format_bytes(available)} available under a "
                          f"{format_bytes(mem.limit)} limit; close other programs or set run.memory_budget")
    return Choice(value, f"{BUDGET_FRACTION:.0%} of the {format_bytes(mem.limit)} limit ({mem.limit_source}) "
                         f"minus {format_bytes(others)} used by other processes")


def with_memory_limit(hw: HardwareInfo, limit: int) -> HardwareInfo:
    """`hw` as if this process ran alone under a memory limit of `limit` bytes (to simulate a laptop)."""
    mem = dataclasses.replace(hw.memory, total=limit, limit=limit, limit_source="simulated limit",
                              available=max(0, limit - hw.memory.rss), cgroup=None, rlimit_as=None)
    return dataclasses.replace(hw, memory=mem)


# ----------------------------------------------------------------------------- memory model

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
    """S: positions the network sees, the puzzle-embedding prefix plus the sequence."""
    return m.puzzle_emb_len + m.seq_len


def output_shape(m: ModelConfig) -> tuple[int, int]:
    """(positions, width) of the logits: (L, V) for a grid task, (1, C) for a classifier."""
    return (1, m.num_classes) if m.num_classes else (m.seq_len, m.vocab_size)


def count_parameters(m: ModelConfig) -> int:
    """Trainable parameters of TRM(m) (the puzzle-embedding buffer excluded)."""
    S, D = seq_total(m), m.hidden_size
    W = swiglu_width(D, m.expansion)
    mlp = 3 * D * W  # gate, up (D x W each) + down (W x D)
    if m.mixer == "mlp_t":
        mix = 3 * S * swiglu_width(S, m.expansion)
    else:
        mix = 4 * D * D  # qkv + out
    head = D * m.num_classes + m.num_classes if m.num_classes else D * m.vocab_size
    return m.vocab_size * D + m.L_layers * (mix + mlp) + head + 2 * D + 2


def block_saved_bytes(m: ModelConfig, elem: int) -> int:
    """Bytes autograd saves per slot for one block (elem: bytes of a matmul operand, 4 or 2).

    The residual sums that RMSNorm keeps stay float32 under autocast.
    """
    S, D = seq_total(m), m.hidden_size
    W = swiglu_width(D, m.expansion)
    mlp = 4 * S * W * elem + S * D * elem + S * D * 4  # gate/up (2W), silu, product; input copy; sum
    if m.mixer == "mlp_t":
        Ws = swiglu_width(S, m.expansion)
        mix = 4 * D * Ws * elem + S * D * elem + S * D * 4  # the same SwiGLU along the sequence axis
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
    if dtype == "bfloat16":  # autocast's, and the fused no-gradient path's (plan.choose_fused_inference)
        parts["bf16 weight copies"] = 4 * n
    return parts


def eval_slot_bytes(m: ModelConfig, elem: int) -> int:
    """Bytes per evaluation slot: its states and the largest live intermediates of one block."""
    S, D = seq_total(m), m.hidden_size
    widest = max(4 * S * swiglu_width(D, m.expansion),
                 4 * D * swiglu_width(S, m.expansion) if m.mixer == "mlp_t" else 7 * S * D)
    positions, width = output_shape(m)
    return 6 * S * D * 4 + widest * elem + positions * width * 6 * 8


def estimate_memory(m: ModelConfig, batch_size: int, micro_batch: int, *, dtype: str = "float32",
                    grad_checkpointing: bool = False, baseline: int = DEFAULT_BASELINE,
                    calibration: Calibration | None = None, ema: bool = True,
                    eval_batch: int | None = None) -> MemoryEstimate:
    """Peak bytes of one training step of TRM(m) with `batch_size` slots, `micro_batch` at a time."""
    calib = calibration or Calibration()
    elem = 2 if dtype == "bfloat16" else 4
    carry, micro = carry_slot_bytes(m), micro_slot_bytes(m, elem, grad_checkpointing, calib.backward_calls)
    parts = fixed_parts(m, dtype, baseline, calib, ema)
    fixed = sum(parts.values())
    parts["carry"] = batch_size * carry
    parts["activations"] = micro_batch * micro
    eval_batch = min(batch_size, EVAL_BATCH_MAX) if eval_batch is None else eval_batch
    eval_peak = fixed + batch_size * carry + eval_batch * eval_slot_bytes(m, elem) + calib.eval_overhead
    return MemoryEstimate(batch_size, micro_batch, grad_checkpointing, dtype, parts, carry, micro,
                          eval_batch, eval_peak)


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


# ----------------------------------------------------------------------------- measurements

def _peak_rss() -> int:
    """Peak resident set size of this process in bytes (its own: VmHWM on Linux)."""
    return int(kernel_peak() or 0)


def _rss_now() -> int:
    import psutil
    return psutil.Process().memory_info().rss


@contextlib.contextmanager
def _torch_threads(n: int):
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _read_cache(cache_dir: str | Path | None, name: str) -> dict[str, Any]:
    if cache_dir is None:
        return {}
    try:
        data = json.loads((Path(cache_dir) / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(cache_dir: str | Path | None, name: str, key: str, value: Any) -> None:
    """Add one entry to a JSON cache file (atomically: temp file, then rename)."""
    if cache_dir is None:
        return
    path = Path(cache_dir) / name
    data = _read_cache(cache_dir, name)
    data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)


def shape_key(m: ModelConfig) -> str:
    """What the speed of one network call depends on."""
    return (f"{m.mixer} D{m.hidden_size} S{seq_total(m)} layers{m.L_layers} "
            f"heads{m.num_heads if m.mixer == 'attention' else 0} exp{m.expansion:g}")


def _bench_net(m: ModelConfig, micro_batch: int, device: str) -> tuple[Network, tuple, Any]:
    S, D = seq_total(m), m.hidden_size
    net = Network(D, S, m.L_layers, m.mixer, m.num_heads, m.expansion, m.rms_norm_eps).to(device)
    rope = None
    if m.mixer == "attention":
        rope = tuple(t.to(device) for t in rotary_tables(S, D // m.num_heads, m.rope_theta))
    gen = torch.Generator().manual_seed(0)
    h, inj = (torch.randn(micro_batch, S, D, generator=gen).to(device) for _ in range(2))
    return net, (h, inj), rope


def _best_time(fn: Callable[[], Any], repeats: int, device: str) -> float:
    fn()  # warm-up: kernel selection, first-touch of memory
    best = math.inf
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_speed(m: ModelConfig, micro_batch: int, dtype: str, threads: int,
                  device: str = "cpu", repeats: int = 2) -> dict[str, float]:
    """Seconds for one call of the model's network on `micro_batch` slots at `dtype`:
    'forward' without gradients, 'train' forward + backward (best of `repeats`)."""
    net, (h, inj), rope = _bench_net(m, micro_batch, device)
    autocast = (functools.partial(torch.autocast, device_type=device, dtype=torch.bfloat16)
                if dtype == "bfloat16" else contextlib.nullcontext)

    def forward():
        with torch.no_grad(), autocast():
            net(h, inj, rope)

    def train():
        with autocast():
            out = net(h, inj, rope)
        out.float().sum().backward()

    with _torch_threads(threads):
        return {"forward": _best_time(forward, repeats, device), "train": _best_time(train, repeats, device)}


def measure_compile(m: ModelConfig, micro_batch: int, dtype: str, threads: int,
                    device: str = "cpu") -> dict[str, Any]:
    """Compile the network with torch.compile and time it against eager (forward + backward).

    Returns compile_seconds, eager and compiled seconds per call, or an 'error'.
    """
    autocast = (functools.partial(torch.autocast, device_type=device, dtype=torch.bfloat16)
                if dtype == "bfloat16" else contextlib.nullcontext)
    net, (h, inj), rope = _bench_net(m, micro_batch, device)

    def run(module):
        with autocast():
            out = module(h, inj, rope)
        out.float().sum().backward()

    with _torch_threads(threads):
        eager = _best_time(lambda: run(net), 3, device)
        try:
            compiled = torch.compile(net)
            t0 = time.perf_counter()
            run(compiled)
            compile_seconds = time.perf_counter() - t0
            fast = _best_time(lambda: run(compiled), 3, device)
        except Exception as err:  # noqa: BLE001 - any failure means "does not work here"
            return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
    return {"compile_seconds": compile_seconds, "eager": eager, "compiled": fast}


# ----------------------------------------------------------------------------- calibration

_CHILD = "import sys, trmkit.plan as p; p.calibration_child(sys.stdin.read())"


def _replica_step(model: Any, batch: int, micro_batch: int, autocast: Any, steps: int = 2) -> None:
    """The memory of train_step built from model parts only (plan must not import train): the carry
    twice, micro-batched forward/backward with the stable-max loss, puzzle rows held until the
    update, an Adam optimizer (torch's: it also loads what torch.optim loads) and an EMA copy.
    Two steps, so that Adam's m and v exist during the second backward, as in training."""
    from trmkit.model.losses import act_loss

    m = model.cfg
    params = [p for p in model.parameters() if p.requires_grad]
    adam = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    ema = [p.detach().clone() for p in params]
    gen = torch.Generator().manual_seed(0)
    inputs = torch.randint(1, m.vocab_size, (batch, m.seq_len), generator=gen)
    labels, ids = inputs % max(1, m.num_classes) if m.num_classes else inputs, torch.zeros(batch, dtype=torch.int64)
    inputs = inputs.to(input_dtype(m.vocab_size))
    carry = model.initial_carry(batch)
    for _ in range(steps):
        carry = model.reset(carry)
        z_H, z_L = torch.empty_like(carry.z_H), torch.empty_like(carry.z_L)
        for start in range(0, batch, micro_batch):
            sl = slice(start, start + micro_batch)
            with autocast():
                zh, zl, logits, q = model(carry.z_H[sl], carry.z_L[sl], inputs[sl], ids[sl])
            loss, _ = act_loss(logits, labels[sl], q, m.halt_loss_weight)
            (loss / batch).backward()
            z_H[sl], z_L[sl] = zh.float(), zl.float()
        adam.step()
        adam.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, shadow in zip(params, ema):
                shadow.lerp_(p, 1e-3)
        if model.puzzle_emb is not None:
            model.puzzle_emb.take_pending()
        carry = dataclasses.replace(carry, z_H=z_H, z_L=z_L)


def calibration_child(spec_text: str) -> None:
    """Entry point of the measuring subprocess: one replica step, then print peak RSS as JSON."""
    from trmkit.model.trm import TRM

    spec = json.loads(spec_text)
    torch.set_num_threads(int(spec["threads"]))
    baseline = _rss_now()
    torch.manual_seed(0)
    model = TRM(ModelConfig(**spec["model"]))
    model.grad_checkpointing = bool(spec["grad_checkpointing"])
    autocast = (functools.partial(torch.autocast, device_type="cpu", dtype=torch.bfloat16)
                if spec["dtype"] == "bfloat16" else contextlib.nullcontext)
    t0 = time.perf_counter()
    _replica_step(model, int(spec["batch"]), int(spec["micro_batch"]), autocast)
    print(json.dumps({"baseline": baseline, "peak": _peak_rss(), "seconds": time.perf_counter() - t0}))


def measure_step_peak(m: ModelConfig, batch: int, micro_batch: int, dtype: str = "float32",
                      grad_checkpointing: bool = False, threads: int = 1,
                      timeout: float = 600) -> dict[str, float]:
    """Peak RSS of one replica step in a fresh Python process: {'baseline', 'peak', 'seconds'}."""
    spec = json.dumps({"model": asdict(m), "batch": batch, "micro_batch": micro_batch, "dtype": dtype,
                       "grad_checkpointing": grad_checkpointing, "threads": threads})
    done = subprocess.run([sys.executable, "-c", _CHILD], input=spec, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"memory measurement failed (exit {done.returncode}): {done.stderr[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def calibration_key(m: ModelConfig, dtype: str) -> str:
    """Config hash + dtype + torch version: what the fitted constants depend on."""
    digest = hashlib.sha1(json.dumps(asdict(m), sort_keys=True).encode()).hexdigest()[:12]
    return f"{digest}|{dtype}|torch {torch.__version__}"


def fit_calibration(m: ModelConfig, dtype: str, small: tuple[int, dict], large: tuple[int, dict],
                    source: str) -> Calibration:
    """Solve for the runtime overhead and the backward working set from two measured steps
    (batch = micro-batch = a and b): peak = baseline + fixed + slots * per_slot."""
    (a, low), (b, high) = small, large
    elem = 2 if dtype == "bfloat16" else 4
    per_slot = (high["peak"] - low["peak"]) / (b - a)
    plain = carry_slot_bytes(m) + micro_slot_bytes(m, elem, False, 0.0)
    backward = min(3.0, max(0.0, (per_slot - plain) / net_call_bytes(m, elem)))
    fixed = sum(fixed_parts(m, dtype, 0, Calibration(0, backward)).values())
    per_slot_model = carry_slot_bytes(m) + micro_slot_bytes(m, elem, False, backward)
    overhead = low["peak"] - low["baseline"] - fixed - a * per_slot_model
    return Calibration(int(max(0, overhead)), round(backward, 3), source)


def calibrate_memory(m: ModelConfig, dtype: str, threads: int, cache_dir: str | Path | None,
                     log: Log = print, sizes: tuple[int, int] = (2, 8)) -> Calibration:
    """Measure two real steps (in subprocesses) and fit the memory model's constants; cached."""
    key = calibration_key(m, dtype)
    cached = _read_cache(cache_dir, CALIBRATION_FILE).get(key)
    if cached and set(cached) <= {f.name for f in dataclasses.fields(Calibration)} and "backward_calls" in cached \
            and "measured here" in str(cached.get("source", "")):
        return Calibration(**cached)
    fast = dataclasses.replace(m, H_cycles=1)  # the cycles without gradients add time, not memory
    log(f"calibrating the memory model: one step at micro-batch {sizes[0]} and {sizes[1]} "
        "in fresh processes (once per config and torch version)")
    runs = [(n, measure_step_peak(fast, n, n, dtype, False, threads)) for n in sizes]
    calib = fit_calibration(m, dtype, runs[0], runs[1],
                            f"measured here: steps at micro-batch {sizes[0]} and {sizes[1]}")
    _write_cache(cache_dir, CALIBRATION_FILE, key, asdict(calib))
    return calib


LEARN_MARGIN = 1.02  # a learned deficit is stored 2% larger: the next run's peak varies a little too
DEFAULT_MARGIN = 0.10  # paper config, empty cache: steps 4-7% over the estimate with freed memory returned
# (11% with it kept, which TIGHT_BUDGET allows only with 25% of room; docs/memory.md)
MEASURED_MARGIN = 0.03  # once a run of this config measured (and taught) it


def learn_from_peaks(m: ModelConfig, dtype: str, cache_dir: str | Path | None, deficits: dict[str, float],
                     source: str) -> bool:
    """Raise the cached calibration by what a run measured beyond its estimates.

    deficits: {'train step': measured peak - estimate, 'eval': ...} in bytes. A training step
    that needed more raises the runtime overhead (every later estimate includes it); evaluation
    raises its own overhead by what is left. Only upward: an estimate that was high stays safe.
    Every checked run counts in `measured_runs`, which narrows the planning margin.
    Returns True when the cache was written."""
    if cache_dir is None or "train step" not in deficits:
        return False
    train = max(0.0, deficits["train step"]) * LEARN_MARGIN
    evals = max(0.0, deficits.get("eval", 0.0) * LEARN_MARGIN - train)
    old = cached_calibration(m, dtype, cache_dir)
    raised = train >= MiB or evals >= MiB
    new = dataclasses.replace(old, runtime_overhead=int(old.runtime_overhead + train * raised),
                              eval_overhead=int(old.eval_overhead + evals * raised),
                              measured_runs=old.measured_runs + 1,
                              source=old.source + (f"; raised after {source} measured more" if raised else ""))
    _write_cache(cache_dir, CALIBRATION_FILE, calibration_key(m, dtype), asdict(new))
    return True


# ----------------------------------------------------------------------------- choices

def collective_backend(device: str) -> str:
    """torch.distributed's backend for a device: gloo on CPUs; on GPUs NCCL for GPU tensors
    (gradients, embedding rows) and gloo for the few CPU ones (random states, data positions)."""
    return "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"


def bind_local_device(device: str, local_rank: int) -> None:
    """With several processes on a GPU machine, each uses the GPU of its local rank."""
    if device == "cuda":
        torch.cuda.set_device(local_rank)


def choose_device(requested: str, hw: HardwareInfo) -> Choice:
    if requested == "cuda" and not hw.torch.cuda_available:
        raise ConfigError("run.device=cuda but no CUDA device is visible: set run.device=auto or cpu")
    if requested in ("cpu", "cuda"):
        return Choice(requested, "set in the config (run.device)")
    if hw.torch.cuda_available:
        return Choice("cuda", f"CUDA device found: {hw.torch.cuda_device}")
    return Choice("cpu", "no CUDA device found")


def choose_threads(requested: int, hw: HardwareInfo, ranks_here: int = 1) -> tuple[Choice, Choice]:
    """Intra-op threads (one per usable core, the cores shared by the ranks on this machine) and
    inter-op threads (1)."""
    cores = hw.cpu.effective_cores
    if requested <= 0 and ranks_here > 1:
        extra = "; fewer cores than processes, so they will wait on each other" if cores < ranks_here else ""
        intra = Choice(max(1, cores // ranks_here), f"the {cores} usable cores ({hw.cpu.effective_source}) "
                                                    f"shared by the {ranks_here} processes on this machine{extra}")
    elif requested > 0:
        extra = f"; more than the {cores} usable cores, so threads will wait on each other" \
            if requested > cores else ""
        intra = Choice(requested, "set in the config (run.threads)" + extra)
    else:
        intra = Choice(cores, f"one per usable core ({cores}, from {hw.cpu.effective_source})")
    inter = Choice(1, "a step is one chain of dependent ops: a second pool would only compete for the cores")
    return intra, inter


MIN_TRIM_THRESHOLD = 32 * MiB  # below this glibc would return (and fault back) every activation buffer
TIGHT_BUDGET = 1.25  # a budget under this multiple of the estimated peak leaves no room for kept memory
RETURNS_FREED = "go back to the OS"  # marks the tight-budget choice: apply_to_process returns freed memory


def choose_keep_freed_memory(setting: str, libc: str, device: str, room: int = KEEP_TRIM_THRESHOLD,
                             tight: bool = False) -> tuple[Choice, int]:
    """Keep freed memory in the process (glibc) instead of faulting it back in every step; and
    the trim threshold (0: freed buffers go back to the OS at once, `return_freed_memory`).

    Kept free memory at the heap's top is bounded by `room`, the larger of the budget's slack
    over the estimated peak and one micro-batch's activations (which the estimate holds). Where
    the budget is `tight` (under TIGHT_BUDGET x the estimate) nothing is kept: a heap whose freed
    holes cannot be reused could take the process past the budget within a step."""
    trim = int(max(MIN_TRIM_THRESHOLD, min(room, KEEP_TRIM_THRESHOLD)))
    kept = (f"; free heap top kept up to {format_bytes(trim)} (the larger of the budget's slack over the "
            "estimated peak and one micro-batch's activations)")
    if setting == "off":
        return Choice(False, "set in the config (run.keep_freed_memory)"), 0
    if not libc.startswith("glibc"):
        return Choice(False, f"only glibc's malloc is tuned; this C library is {libc or 'not glibc'}"), 0
    if setting == "on":
        return Choice(True, "set in the config (run.keep_freed_memory)" + kept), trim
    if device != CPU:
        return Choice(False, "tensors live in the GPU's caching allocator, which already reuses memory"), 0
    if tight:
        return Choice(False, f"the budget is less than {TIGHT_BUDGET:.2f}x the estimated peak: freed buffers of "
                             f"1 MiB or more {RETURNS_FREED} at once, so neither kept memory nor a fragmented "
                             "heap can take the process past it (costs page faults: slower steps)"), 0
    return Choice(True, "glibc otherwise unmaps freed activation buffers and faults them back in every step "
                        "(23,000-88,000 page faults per step of the paper config measured); kept for reuse, "
                        "the guard still returns memory when it shrinks (docs/performance.md)" + kept), trim


def choose_fused_inference(setting: str, device: str, dtype: str, compiled: bool) -> Choice:
    """Whether calls of the network without gradients (the first T-1 cycles, evaluation) run
    SwiGLU as oneDNN matmuls with SiLU, the product and the residual add in their epilogue."""
    if setting == "off":
        return Choice(False, "set in the config (run.fused_inference)")
    if device != CPU or dtype != "bfloat16":
        return Choice(False, f"the fused oneDNN matmuls are for bf16 on a CPU; this run is {dtype} on {device}")
    if compiled:
        return Choice(False, "torch.compile fuses the element-wise work itself")
    broken = fused_inference_works()
    if broken:
        return Choice(False, broken)
    how = "set in the config (run.fused_inference)" if setting == "on" else (
        "no-gradient calls (the first T-1 cycles, evaluation) put SiLU, the SwiGLU product and the residual "
        "add into oneDNN's matmul epilogues instead of three passes over the widest activations; "
        "their residual stream is bf16 (docs/performance.md)")
    return Choice(True, how)


def choose_workers() -> Choice:
    return Choice(0, "the data store is memory-mapped and a step reads only its rows: "
                     "loader processes would add memory and copies, not speed")


def _has_native_bf16(hw: HardwareInfo) -> bool:
    f = hw.cpu.features
    return bool(f.avx512_bf16 or f.amx_bf16 or f.arm_bf16)


def step_seconds(m: ModelConfig, speed: dict[str, float], bench_batch: int, batch_size: int,
                 grad_checkpointing: bool) -> float:
    """Wall time of one optimizer step from the measured time of one network call."""
    calls = m.L_cycles + 1
    per_slot = ((m.H_cycles - 1) * calls * speed["forward"] + calls * speed["train"]
                + (calls * speed["forward"] if grad_checkpointing else 0.0)) / bench_batch
    return per_slot * batch_size


def speed_table(cfg: Config, hw: HardwareInfo, threads: int, device: str, dtypes: tuple[str, ...],
                cache_dir: str | Path | None, log: Log) -> tuple[dict[str, dict[str, float]], int]:
    """Measured seconds per network call at each dtype (cached per machine, torch and model shape).

    Returns (table, micro-batch of the measurement)."""
    bench = min(8, cfg.train.batch_size)
    key = f"{hw.cpu.model}|torch {hw.torch.version}|{device}|{threads} threads|{shape_key(cfg.model)}|m{bench}"
    cache = _read_cache(cache_dir, SPEED_FILE)
    table = {dt: cache[f"{key}|{dt}"] for dt in dtypes if f"{key}|{dt}" in cache}
    missing = [dt for dt in dtypes if dt not in table]
    if missing:
        log(f"measuring {' vs '.join(missing)} speed on this {device.upper()} for D={cfg.model.hidden_size} "
            "(a few seconds, once per machine and model shape)")
    busy = others_cpu_percent() if missing and device == "cpu" else 0.0
    for _ in range(2):  # alternate the dtypes, keep the best: a load burst hits both alike
        for dt in missing:
            t = measure_speed(cfg.model, bench, dt, threads, device, repeats=1)
            table[dt] = {k: min(v, table.get(dt, t)[k]) for k, v in t.items()}
    for dt in missing:
        table[dt] = {**table[dt], "busy_percent": busy}
        if busy < BUSY_PERCENT:  # timings taken beside other work are not kept
            _write_cache(cache_dir, SPEED_FILE, f"{key}|{dt}", table[dt])
    return table, bench


def others_cpu_percent(seconds: float = 0.3) -> float:
    """System-wide CPU use while this process sleeps: what other processes take."""
    import psutil
    return float(psutil.cpu_percent(interval=seconds))


def choose_dtype(cfg: Config, hw: HardwareInfo, device: str, speeds: dict | None, bench: int) -> Choice:
    requested = cfg.run.dtype
    if requested in ("float32", "bfloat16"):
        return Choice(requested, "set in the config (run.dtype)")
    if device == "cuda":
        if torch.cuda.is_bf16_supported():
            return Choice("bfloat16", "the CUDA device supports bf16 autocast")
        return Choice("float32", "the CUDA device has no bf16 support")
    if speeds is None or "bfloat16" not in speeds:
        return Choice("float32", "this CPU has no native bf16 instructions (AVX512-BF16, AMX or ARM BF16): "
                                 "bf16 would be emulated")
    m, B = cfg.model, cfg.train.batch_size
    t32 = step_seconds(m, speeds["float32"], bench, B, False)
    t16 = step_seconds(m, speeds["bfloat16"], bench, B, False)
    measured = f"measured step time per slot {t32 / B * 1e3:.0f} ms float32, {t16 / B * 1e3:.0f} ms bf16"
    busy = speeds["float32"].get("busy_percent", 0.0)
    if busy >= BUSY_PERCENT:
        measured += (f" (while other processes used {busy:.0f}% of the CPU: not cached, "
                     "run `trmkit plan` again on an idle machine)")
    if t32 >= BF16_MIN_SPEEDUP * t16:
        return Choice("bfloat16", f"{measured}: bf16 autocast is {t32 / t16:.2f}x faster here")
    return Choice("float32", f"{measured}: bf16 is not at least {BF16_MIN_SPEEDUP:.1f}x faster here")


@dataclass(frozen=True)
class MemoryContext:
    """What every estimate of one plan shares."""

    dtype: str
    baseline: int
    calibration: Calibration
    ema: bool
    budget: int  # what estimates must fit: the given budget less the margin for the model's error
    given: int = 0  # the budget as given (0: the same as `budget`)

    def shown(self) -> str:
        """The budget for messages: as given, and what the plan fits into when that is less."""
        if not self.given or self.given == self.budget:
            return format_bytes(self.budget)
        return f"{format_bytes(self.given)} ({format_bytes(self.budget)} after the margin for the memory model's error)"

    def estimate(self, m: ModelConfig, batch: int, micro: int, ckpt: bool,
                 eval_batch: int | None = None) -> MemoryEstimate:
        return estimate_memory(m, batch, micro, dtype=self.dtype, grad_checkpointing=ckpt,
                               baseline=self.baseline, calibration=self.calibration, ema=self.ema,
                               eval_batch=eval_batch)

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


def _auto_checkpointing(no: int, yes: int, m: ModelConfig, device: str) -> Choice:
    """On only where memory is the limit and the larger micro-batch pays for the recompute."""
    S = seq_total(m)
    cost = f"recomputing the gradient cycle costs ~{1 / (m.H_cycles + 2):.0%} more compute"
    if no == 0:
        return Choice(True, f"micro-batch 1 does not fit the budget without it; with it {yes} fits")
    min_rows = CHECKPOINT_MIN_ROWS if device == "cpu" else 16 * CHECKPOINT_MIN_ROWS
    if yes > no and no * S < min_rows:
        return Choice(True, f"without it only micro-batch {no} fits ({no * S} rows per matmul, below the "
                            f"{min_rows} where matmuls run efficiently); with it {yes} fits; {cost}")
    if yes > no:
        return Choice(False, f"micro-batch {no} fits without it ({no * S} rows per matmul, efficient "
                             f"already); {yes} would fit with it, but {cost}")
    return Choice(False, f"memory is not the limit: micro-batch {no} fits without it")


def _no_fit_error(cfg: Config, mc: MemoryContext) -> ConfigError:
    """Name what does not fit, by how much, and alternatives with their estimated sizes."""
    m, B = cfg.model, cfg.train.batch_size
    need = mc.estimate(m, B, 1, True, eval_batch=1)
    batches = [(f"train.batch_size={b}", m, b) for b in (512, 384, 256, 128, 64, 32, 16, 8) if b < B]
    widths = [(f"model.hidden_size={d}", dataclasses.replace(m, hidden_size=d), B)
              for d in (768, 512, 384, 256, 192, 128, 64)
              if d < m.hidden_size and (m.mixer != "attention" or d % (2 * m.num_heads) == 0)]
    hints = []
    for kind in (batches, widths):  # of each kind, the smallest change that fits
        for text, model, batch in kind:
            est = mc.estimate(model, batch, 1, True, eval_batch=1)
            if est.train_peak <= mc.budget:
                hints.append(f"set {text} (est. {format_bytes(est.train_peak)} at micro-batch 1)")
                break
    longest = _longest_sequence(cfg, mc)
    if longest < seq_total(m):
        hints.append(f"use a shorter sequence: at most {longest} positions (model.puzzle_emb_len + "
                     f"the data's seq_len) fit, now {seq_total(m)}")
    paper = dataclasses.replace(ModelConfig(), seq_len=m.seq_len, vocab_size=m.vocab_size,
                                num_puzzle_ids=m.num_puzzle_ids)
    if (paper, 768) != (m, B) and mc.fits(paper, 768, 1, True):
        hints.append(f"use {preset_for(mc.budget)} (the paper's model and batch fit this budget)")
    hints.append("or raise the budget (--memory-budget / run.memory_budget)")
    top = sorted(need.parts.items(), key=lambda kv: -kv[1])[:3]
    return ConfigError(
        f"model D={m.hidden_size} with train.batch_size={B} ({seq_total(m)} positions per slot) does not "
        f"fit the memory budget of {mc.shown()}: even micro-batch 1 with activation "
        f"checkpointing needs {format_bytes(need.train_peak)} (largest parts: "
        + ", ".join(f"{k} {format_bytes(v)}" for k, v in top) + "). Try: " + "; ".join(hints))


def _longest_sequence(cfg: Config, mc: MemoryContext) -> int:
    """The most positions per slot (prefix + sequence) whose step fits at micro-batch 1."""
    m, B = cfg.model, cfg.train.batch_size
    lo, hi = 0, seq_total(m)
    while lo < hi:  # binary search on seq_len; the prefix stays
        mid = (lo + hi + 1) // 2
        shorter = dataclasses.replace(m, seq_len=max(1, mid - m.puzzle_emb_len))
        lo, hi = (mid, hi) if mid > m.puzzle_emb_len and mc.fits(shorter, B, 1, True) else (lo, mid - 1)
    return lo


def preset_for(budget: int) -> str:
    """The laptop preset made for a budget like this one."""
    if budget < 10 * GiB:
        return "configs/laptop-8gb.yaml"
    return "configs/laptop-16gb.yaml" if budget < 20 * GiB else "configs/laptop-32gb.yaml"


def _set_micro_batch(cfg: Config, mc: MemoryContext) -> tuple[Choice, Choice]:
    """micro_batch and grad_checkpointing when train.micro_batch is set in the config."""
    m, B, mb, mode = cfg.model, cfg.train.batch_size, cfg.train.micro_batch, cfg.run.grad_checkpointing
    ok = {ck: mc.fits(m, B, mb, ck) for ck in (False, True)}
    if mode in ("on", "off"):
        ckpt = Choice(mode == "on", "set in the config (run.grad_checkpointing)")
    elif ok[False]:
        ckpt = Choice(False, f"micro-batch {mb} fits the budget without it")
    else:
        ckpt = Choice(True, f"micro-batch {mb} fits the budget only with it")
    if not ok[ckpt.value]:
        best = largest_micro_batch(m, B, ckpt.value, mc)
        if not best:
            raise _no_fit_error(cfg, mc)
        need = mc.estimate(m, B, mb, ckpt.value).train_peak
        raise ConfigError(f"train.micro_batch={mb} needs an estimated {format_bytes(need)}, more than the "
                          f"budget of {mc.shown()}: set train.micro_batch={best} "
                          "or 0 (the planner decides)")
    est = mc.estimate(m, B, mb, ckpt.value)
    return Choice(mb, f"set in the config (train.micro_batch); est. {format_bytes(est.train_peak)}"), ckpt


def choose_micro_batch(cfg: Config, mc: MemoryContext, device: str) -> tuple[Choice, Choice]:
    """(micro_batch, grad_checkpointing): the largest divisor of the batch that fits the budget."""
    if cfg.train.micro_batch:
        return _set_micro_batch(cfg, mc)
    m, B, mode = cfg.model, cfg.train.batch_size, cfg.run.grad_checkpointing
    no, yes = largest_micro_batch(m, B, False, mc), largest_micro_batch(m, B, True, mc)
    if not (no or yes):
        raise _no_fit_error(cfg, mc)
    if mode in ("on", "off"):
        ckpt = Choice(mode == "on", "set in the config (run.grad_checkpointing)")
        if (yes if ckpt.value else no) == 0:
            raise ConfigError(f"run.grad_checkpointing={mode}: micro-batch 1 does not fit the budget of "
                              f"{mc.shown()}; set run.grad_checkpointing=on or auto")
    else:
        ckpt = _auto_checkpointing(no, yes, m, device)
    mb = yes if ckpt.value else no
    est = mc.estimate(m, B, mb, ckpt.value)
    whole = "the whole batch at once" if mb == B else f"largest divisor of {B} that fits"
    return Choice(mb, f"{whole}: budget {mc.shown()}, {format_bytes(est.micro_per_slot)} per "
                      f"slot, {format_bytes(est.fixed + est.parts['carry'])} fixed and carry"), ckpt


def choose_eval_batch(cfg: Config, mc: MemoryContext, micro: int, ckpt: bool) -> Choice:
    """Evaluation slots per forward: up to EVAL_BATCH_MAX, as many as the budget allows."""
    m, B = cfg.model, cfg.train.batch_size
    top = min(B, EVAL_BATCH_MAX)
    for e in range(top, 0, -1):
        if e == 1 or mc.estimate(m, B, micro, ckpt, eval_batch=e).eval_peak <= mc.budget:
            break
    if e < top:
        why = f"the most that fit the budget of {mc.shown()} beside the training state"
    else:
        why = f"min(batch {B}, {EVAL_BATCH_MAX}): evaluation keeps no activations, larger gains nothing"
    return Choice(e, why)


def choose_compile(cfg: Config, hw: HardwareInfo, device: str, dtype: str, micro: int, threads: int,
                   step_s: float | None, cache_dir: str | Path | None, log: Log) -> Choice:
    """torch.compile only where it works here and its measured saving pays for its compile time."""
    if cfg.run.compile in ("on", "off"):
        return Choice(cfg.run.compile == "on", "set in the config (run.compile)")
    if step_s is None:
        return Choice(False, "no step-time measurement to weigh the compile time against; set run.compile=on to try")
    run_s = step_s * cfg.train.max_steps
    if run_s < COMPILE_SHORT_RUN_S:
        return Choice(False, f"short run (~{_minutes(run_s)} for {cfg.train.max_steps} steps): "
                             f"compiling takes minutes on a CPU and could not pay back")
    m = cfg.model
    bench = min(micro, 8)
    key = f"{hw.cpu.model}|torch {hw.torch.version}|{device}|{threads} threads|{dtype}|{shape_key(m)}|m{bench}"
    result = _read_cache(cache_dir, COMPILE_FILE).get(key)
    if result is None:
        log(f"measuring torch.compile for this model (once per machine; the run is ~{_minutes(run_s)})")
        busy = others_cpu_percent() if device == "cpu" else 0.0
        result = {**measure_compile(m, bench, dtype, threads, device), "busy_percent": busy}
        if busy < BUSY_PERCENT:
            _write_cache(cache_dir, COMPILE_FILE, key, result)
    if "error" in result:
        return Choice(False, f"torch.compile does not work here: {result['error']}")
    saving = run_s * max(0.0, 1 - result["compiled"] / result["eager"])  # every call gets faster
    cost = COMPILE_PAYBACK * result["compile_seconds"]  # x2: evaluation shapes compile again
    numbers = (f"measured {result['eager'] * 1e3:.0f} -> {result['compiled'] * 1e3:.0f} ms per call, "
               f"compile {result['compile_seconds']:.0f} s; saves ~{_minutes(max(0.0, saving))} "
               f"over {cfg.train.max_steps} steps")
    if result.get("busy_percent", 0.0) >= BUSY_PERCENT:
        numbers += f"; measured while other processes used {result['busy_percent']:.0f}% of the CPU"
    return Choice(saving > cost, numbers + (" (pays back)" if saving > cost else " (does not pay back)"))


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def check_sequence(cfg: Config, saved_config: dict | None) -> None:
    """The dataset's sequence must match the model it is trained with (a checkpoint's)."""
    m = cfg.model
    if m.seq_len < 1 or m.vocab_size < 1:
        raise ConfigError("model.seq_len and model.vocab_size are unknown: point data.path at a built "
                          "store (its meta.json fills them) or set them, e.g. model.seq_len=81 "
                          "model.vocab_size=11 model.num_puzzle_ids=1 for Sudoku")
    saved = (saved_config or {}).get("model") or {}
    for key in ("seq_len", "puzzle_emb_len", "vocab_size"):
        if key in saved and saved[key] != getattr(m, key):
            positions = saved.get("puzzle_emb_len", 0) + saved.get("seq_len", 0)
            raise ConfigError(
                f"model.{key}={getattr(m, key)} (from the dataset/config) but the checkpoint was trained "
                f"with {saved[key]}: its network is sized for {positions} positions; use a dataset with "
                f"{key}={saved[key]} or start a new run.dir")


def make_plan(cfg: Config, hw: HardwareInfo, budget_bytes: int | None = None,
              cache_dir: str | Path | None = None, log: Log = print, calibrate: bool = False,
              saved_config: dict | None = None, world: int = 1, ranks_here: int = 1) -> Plan:
    """Resolve every 'auto' setting of cfg for this machine; log each choice with its reason.

    budget_bytes overrides run.memory_budget; cache_dir keeps measurements (dtype speed,
    calibration, compile) between runs; calibrate=True measures two real steps to fit the
    memory model; saved_config is the config stored in a checkpoint being resumed.
    world > 1: the plan of one of `world` processes (train/distributed.py): cfg.train.batch_size
    holds this process's share of the global batch, and the cores and memory of this machine
    are shared by `ranks_here` processes."""
    check_sequence(cfg, saved_config)
    device = choose_device(cfg.run.device, hw)
    threads, interop = choose_threads(cfg.run.threads, hw, ranks_here)
    on_gpu = device.value == "cuda"
    budget = choose_budget(hw, cfg.run.memory_budget, budget_bytes, on_gpu)
    if ranks_here > 1 and not on_gpu:  # a GPU per process: its own memory
        budget = Choice(budget.value // ranks_here, f"{budget.reason}, shared by the {ranks_here} processes on "
                                                    f"this machine: {format_bytes(budget.value // ranks_here)} each")
    speeds, bench = (None, 1) if on_gpu else speed_table(cfg, hw, threads.value, device.value,
                                                         _dtypes_to_time(cfg, hw), cache_dir, log)
    dtype = choose_dtype(cfg, hw, device.value, speeds, bench)
    calib = (calibrate_memory(cfg.model, dtype.value, threads.value, cache_dir, log) if calibrate and not on_gpu
             else cached_calibration(cfg.model, dtype.value, cache_dir))
    baseline = 0 if on_gpu else process_baseline(hw)
    planned = budget.value if on_gpu else int(budget.value / (1 + calib.margin))
    if planned < budget.value:
        why = ("a run of this config here measured it" if calib.measured_runs
               else "no run of this config here has measured it yet")
        budget = Choice(budget.value, f"{budget.reason}; steps planned to {format_bytes(planned)}: "
                                      f"{calib.margin:.0%} kept for the memory model's error ({why})")
    mc = MemoryContext(dtype.value, baseline, calib, cfg.train.ema_decay > 0, planned, budget.value)
    micro, ckpt = choose_micro_batch(cfg, mc, device.value)
    accumulation = Choice(cfg.train.batch_size // micro.value,
                          f"keeps the global batch of {cfg.train.batch_size}: {cfg.train.batch_size} / {micro.value}"
                          if world == 1 else
                          f"keeps the global batch of {cfg.train.batch_size * world}: {world} processes x "
                          f"{cfg.train.batch_size} slots each, {cfg.train.batch_size} / {micro.value} micro-batches")
    eval_batch = choose_eval_batch(cfg, mc, micro.value, ckpt.value)
    step_s = step_seconds(cfg.model, speeds[dtype.value], bench, cfg.train.batch_size, ckpt.value) \
        if speeds else None
    compiled = choose_compile(cfg, hw, device.value, dtype.value, micro.value, threads.value, step_s,
                              cache_dir, log)
    estimate = mc.estimate(cfg.model, cfg.train.batch_size, micro.value, ckpt.value, eval_batch.value)
    keep, trim = choose_keep_freed_memory(cfg.run.keep_freed_memory, hw.platform.libc, device.value,
                                          max(budget.value - estimate.total, estimate.parts["activations"]),
                                          tight=budget.value < TIGHT_BUDGET * estimate.total)
    fused = choose_fused_inference(cfg.run.fused_inference, device.value, dtype.value, bool(compiled.value))
    plan = Plan(device=device, dtype=dtype, threads=threads, micro_batch=micro, accumulation=accumulation,
                interop_threads=interop, workers=choose_workers(), budget=budget, grad_checkpointing=ckpt,
                eval_batch=eval_batch, compile=compiled, step_seconds=step_s, keep_freed_memory=keep,
                fused_inference=fused, trim_threshold=trim, estimate=estimate)
    for line in plan.lines():
        log(f"plan: {line}")
    return plan


def _dtypes_to_time(cfg: Config, hw: HardwareInfo) -> tuple[str, ...]:
    """bf16 is timed only where it is 'auto' and the CPU has native bf16 instructions."""
    if cfg.run.dtype != "auto":
        return (cfg.run.dtype,)
    return ("float32", "bfloat16") if _has_native_bf16(hw) else ("float32",)


def process_baseline(hw: HardwareInfo) -> int:
    """The memory model's baseline on a CPU: this process before the model (never under half the default)."""
    return max(hw.memory.rss, DEFAULT_BASELINE // 2)


def cached_calibration(m: ModelConfig, dtype: str, cache_dir: str | Path | None) -> Calibration:
    cached = _read_cache(cache_dir, CALIBRATION_FILE).get(calibration_key(m, dtype))
    try:
        return Calibration(**cached) if cached else Calibration()
    except TypeError:  # written by another trmkit version
        return Calibration()


# ----------------------------------------------------------------------------- report and apply

def plan_report(plan: Plan, estimate: MemoryEstimate | None = None) -> str:
    """What `trmkit plan` prints: every choice with its reason, then the memory breakdown."""
    est = estimate or plan.estimate
    lines = ["choices"] + [f"  {line}" for line in plan.lines()]
    if est is not None:
        ckpt = "on" if est.grad_checkpointing else "off"
        lines += ["", f"memory at the peak (micro-batch {est.micro_batch} of {est.batch_size}, "
                      f"{est.dtype}, checkpointing {ckpt})"]
        lines += est.lines()
        budget = plan.budget.value
        if budget:
            lines.append(f"  {'budget':<22}{format_bytes(budget):>11}  "
                         f"({est.total / budget:.0%} used at the peak)")
    if plan.step_seconds is not None:
        lines += ["", f"time       ~{plan.step_seconds:.1f} s per optimizer step (from the measured speed "
                      "of one network call; excludes evaluation and checkpoints)"]
    return "\n".join(lines)


def apply_to_process(plan: Plan) -> None:
    """Apply the thread and allocator choices (once, before any work)."""
    torch.set_num_threads(int(plan.threads.value))
    with contextlib.suppress(RuntimeError):  # inter-op pool already started: keep it
        torch.set_num_interop_threads(int(plan.interop_threads.value))
    if plan.keep_freed_memory.value:
        keep_freed_memory(plan.trim_threshold or KEEP_TRIM_THRESHOLD)
    elif plan.is_cpu and RETURNS_FREED in plan.keep_freed_memory.reason:
        return_freed_memory()


def apply_to_model(plan: Plan, model: torch.nn.Module) -> None:
    """Set activation checkpointing and compile the shared network in place (state_dict keys
    stay free of compile prefixes)."""
    model.grad_checkpointing = bool(plan.grad_checkpointing.value)
    model.net.fused_inference = bool(plan.fused_inference.value)
    if plan.compile.value:
        model.net.compile()
