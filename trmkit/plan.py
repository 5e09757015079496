"""The execution plan: device, dtype, threads, micro-batch — each with its reason.

Every automatic choice is a `Choice(value, reason)`, printed at the start of a
run and stored in the run directory, so a user can see why and override it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from trmkit.config import Config


@dataclass
class Choice:
    value: Any
    reason: str


@dataclass
class Plan:
    device: Choice
    dtype: Choice
    threads: Choice
    micro_batch: Choice
    accumulation: Choice
    extra: dict[str, Choice] = field(default_factory=dict)

    def choices(self) -> dict[str, Choice]:
        base = {k: getattr(self, k) for k in ("device", "dtype", "threads", "micro_batch", "accumulation")}
        return {**base, **self.extra}

    def lines(self) -> list[str]:
        return [f"{name}={c.value} ({c.reason})" for name, c in self.choices().items()]

    def to_dict(self) -> dict[str, Any]:
        return {name: asdict(c) for name, c in self.choices().items()}

    def torch_device(self) -> torch.device:
        return torch.device(self.device.value)

    def autocast(self):
        """A factory of the autocast context for the chosen device and dtype."""
        if self.dtype.value == "bfloat16":
            return functools.partial(torch.autocast, device_type=self.device.value, dtype=torch.bfloat16)
        return contextlib.nullcontext


def choose_device(requested: str) -> Choice:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device=cuda but no CUDA device is visible: set run.device=auto or cpu")
    if requested in ("cpu", "cuda"):
        return Choice(requested, "set in the config (run.device)")
    if torch.cuda.is_available():
        return Choice("cuda", f"CUDA device found: {torch.cuda.get_device_name(0)}")
    return Choice("cpu", "no CUDA device found")


def choose_dtype(requested: str, device: str) -> Choice:
    if requested in ("float32", "bfloat16"):
        return Choice(requested, "set in the config (run.dtype)")
    if device == "cuda" and torch.cuda.is_bf16_supported():
        return Choice("bfloat16", "CUDA device supports bf16 autocast")
    return Choice("float32", "CPU default; bf16 is used only where set or measured faster")


def choose_threads(requested: int, logical_cores: int) -> Choice:
    if requested > 0:
        return Choice(requested, "set in the config (run.threads)")
    return Choice(max(1, logical_cores), f"one per usable core ({logical_cores})")


def choose_micro_batch(batch_size: int, requested: int) -> tuple[Choice, Choice]:
    if requested > 0:
        mb = Choice(requested, "set in the config (train.micro_batch)")
    else:
        mb = Choice(batch_size, "whole batch at once (no memory limit planned)")
    acc = Choice(batch_size // mb.value, f"batch {batch_size} / micro-batch {mb.value}")
    return mb, acc


def make_plan(cfg: Config, usable_cores: int) -> Plan:
    """Resolve every 'auto' setting of cfg for this machine."""
    device = choose_device(cfg.run.device)
    mb, acc = choose_micro_batch(cfg.train.batch_size, cfg.train.micro_batch)
    return Plan(
        device=device,
        dtype=choose_dtype(cfg.run.dtype, device.value),
        threads=choose_threads(cfg.run.threads, usable_cores),
        micro_batch=mb,
        accumulation=acc,
    )


def apply_threads(plan: Plan) -> None:
    """Apply the thread choice to torch (once, before any work)."""
    torch.set_num_threads(int(plan.threads.value))
