"""The bench's training session: model, optimizers and slot state as the training loop builds
them, on the CPU, and timed training steps.

Departures from the style guide, and why: the bench names the float32 and
bfloat16 dtypes itself (it measures both peaks whatever the run uses), takes
the dtype, micro-batch and compile from the config instead of the planner's
choices (it measures what the config asks for; the planner's apply_to_model
still sets them on the model, as in training), and runs on the CPU only (the
peak it divides by is the CPU's).

The bench measures the step, not a training: it is no hook on the training loop (a training would
plan its own dtype, micro-batch and compile, need a store, write a run directory and evaluate), but
its timed steps are the loop's own (`loop.run_step`), so what it times is what training runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from trmkit.config import Config, ConfigError
from trmkit.data.stream import Batch, SampleStream
from trmkit.hardware.allocator import keep_freed_memory
from trmkit.hardware.software import probe_platform
from trmkit.model.trm import TRM
from trmkit.plan import Choice, Plan, apply_to_model
from trmkit.plan.choose import choose_fused_inference, choose_keep_freed_memory
from trmkit.plan.objects import CPU, DTYPES
from trmkit.train.session import build_optimizers, fill_from_meta, open_splits
from trmkit.train.loop import run_step
from trmkit.train.step import Optimizers, StepContext, TrainState, new_state

Log = Callable[[str], None]


class SyntheticStream:
    """Random samples shaped like the dataset: tokens in [1, V), labels in [1, V)."""

    def __init__(self, vocab_size: int, seq_len: int, num_puzzle_ids: int, seed: int, num_classes: int = 0):
        self.vocab_size, self.seq_len, self.num_ids = vocab_size, seq_len, num_puzzle_ids
        self.num_classes = num_classes  # a classifier's labels are class ids in [0, C)
        self.rng = np.random.default_rng(seed)

    def take(self, k: int) -> Batch:
        high = max(2, self.vocab_size)
        token = np.uint8 if high <= 256 else np.int64  # as the store keeps them
        labels = self.rng.integers(1, high, (k, self.seq_len))
        if self.num_classes:
            labels %= self.num_classes
        return Batch(inputs=self.rng.integers(1, high, (k, self.seq_len)).astype(token),  # (k, L)
                     labels=labels.astype(token),  # (k, L)
                     puzzle_ids=self.rng.integers(0, self.num_ids, (k,)))  # (k,)


@dataclass
class BenchSession:
    cfg: Config
    model: TRM
    opts: Optimizers
    state: TrainState
    stream: Any
    ctx: StepContext


def resolve(cfg: Config) -> tuple[Config, Any, int]:
    """(cfg with model fields filled, sample stream, ignore_label_id): the store's, or synthetic."""
    if cfg.data.path:
        train_split, _ = open_splits(cfg.data.path)
        cfg = fill_from_meta(cfg, train_split)
        return cfg, SampleStream(train_split, cfg.run.seed), train_split.meta.ignore_label_id
    m = cfg.model
    if m.vocab_size < 1 or m.seq_len < 1 or m.num_puzzle_ids < 1:
        raise ConfigError("trmkit bench needs data.path=DIR or model.vocab_size, model.seq_len and "
                          "model.num_puzzle_ids (e.g. 11, 81, 1 for Sudoku) for synthetic samples")
    return cfg, SyntheticStream(m.vocab_size, m.seq_len, m.num_puzzle_ids, cfg.run.seed, m.num_classes), -1


def bench_settings(cfg: Config) -> dict[str, Any]:
    """dtype, micro-batch, compile and checkpointing as the bench runs them, with reasons."""
    if cfg.run.device not in ("auto", CPU):
        raise ConfigError("trmkit bench measures the CPU: set run.device=cpu or auto")
    dtype = cfg.run.dtype if cfg.run.dtype in DTYPES else "float32"
    keep, _ = choose_keep_freed_memory(cfg.run.keep_freed_memory, probe_platform().libc, CPU)
    fused = choose_fused_inference(cfg.run.fused_inference, CPU, dtype, cfg.run.compile == "on")
    return {
        "dtype": dtype,
        "dtype_reason": "run.dtype" if cfg.run.dtype in DTYPES else "run.dtype=auto -> float32 (CPU default)",
        "micro_batch": cfg.train.micro_batch or cfg.train.batch_size,
        "compile": cfg.run.compile == "on",
        "compile_reason": ("run.compile" if cfg.run.compile != "auto"
                           else "run.compile=auto -> off (set on to time it)"),
        "grad_checkpointing": cfg.run.grad_checkpointing == "on",
        "threads": torch.get_num_threads(),
        "threads_reason": "run.threads" if cfg.run.threads > 0 else "torch's current setting (run.threads=0)",
        "keep_freed_memory": keep.value,
        "keep_freed_memory_reason": keep.reason,
        "fused_inference": fused.value,
        "fused_inference_reason": fused.reason,
    }


def bench_plan(cfg: Config, settings: dict[str, Any], compile_target: str) -> Plan:
    """The bench's settings as a plan, so that the planner's apply_to_model sets up the model as
    it does in training (compile_target 'model' compiles the whole model instead: build_session)."""
    mb = settings["micro_batch"]
    return Plan(device=Choice(CPU, "the bench measures the CPU"),
                dtype=Choice(settings["dtype"], settings["dtype_reason"]),
                threads=Choice(settings["threads"], settings["threads_reason"]),
                micro_batch=Choice(mb, "train.micro_batch, else the whole batch"),
                accumulation=Choice(max(1, cfg.train.batch_size // mb), "the batch in micro-batches"),
                grad_checkpointing=Choice(settings["grad_checkpointing"], "run.grad_checkpointing"),
                compile=Choice(settings["compile"] and compile_target == "net", settings["compile_reason"]),
                keep_freed_memory=Choice(settings["keep_freed_memory"], settings["keep_freed_memory_reason"]),
                fused_inference=Choice(settings["fused_inference"], settings["fused_inference_reason"]))


def build_session(cfg: Config, settings: dict[str, Any], compile_target: str = "net") -> BenchSession:
    """Model, optimizers and slot state as the training loop builds them, on the CPU."""
    cfg, stream, ignore = resolve(cfg)
    torch.manual_seed(cfg.run.seed)
    plan = bench_plan(cfg, settings, compile_target)
    device = plan.torch_device()
    if settings["keep_freed_memory"]:
        keep_freed_memory()  # as the training loop does (plan.apply_to_process)
    model = TRM(cfg.model).to(device)
    apply_to_model(plan, model)  # checkpointing, the fused path, compiling model.net in place
    if settings["compile"] and compile_target == "model":
        model.compile()  # in place: parameter names unchanged
    ctx = StepContext(micro_batch=settings["micro_batch"], ignore_label_id=ignore, device=device,
                      autocast=plan.autocast())
    state = new_state(model, cfg.train.batch_size, cfg.model.seq_len, device)
    return BenchSession(cfg, model, build_optimizers(model, cfg), state, stream, ctx)


def timed_steps(s: BenchSession, n: int, log: Log | None = None, label: str = "step") -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        run_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)
        times.append(time.perf_counter() - start)
        if log:
            log(f"{label} {i + 1}/{n}: {times[-1]:.3f} s")
    return times
