"""The plan's objects: a `Choice(value, reason)`, the memory estimate of one step, the `Plan`
that holds every choice, and the compute dtypes trmkit can plan with their autocast."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from trmkit.hardware.report import format_bytes

MiB = 1 << 20
GiB = 1 << 30
EVAL_BATCH_MAX = 256  # evaluation slots per forward: larger gains nothing on a CPU
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # compute dtypes trmkit can plan
CPU = "cpu"


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
