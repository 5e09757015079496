"""Making the plan: every 'auto' setting resolved for this machine, each with its reason; the
report `trmkit plan` prints; applying the plan to the process and to the model.

`make_plan(cfg, hw)` chooses device, threads, data-loader workers, compute dtype,
memory budget, micro-batch and gradient accumulation, activation checkpointing,
the evaluation batch, torch.compile and whether the C allocator keeps freed
memory for reuse (glibc; `choose_keep_freed_memory`). Every choice is a
`Choice(value, reason)`, printed at the start of a run and stored in the run
directory (`Plan.to_dict()`).

Nothing runs at import time. Measurements run inside `make_plan` only: the
speed of one network call at float32/bf16 (a few seconds, cached per machine,
torch and model shape; not cached when other processes were busy), torch.compile
(only for runs longer than 30 minutes, cached) and, when asked, the calibration.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Callable

import torch

from trmkit.config import Config, ConfigError
from trmkit.hardware import HardwareInfo
from trmkit.hardware.allocator import KEEP_TRIM_THRESHOLD, keep_freed_memory, return_freed_memory
from trmkit.hardware.report import format_bytes
from trmkit.plan.calibrate import cached_calibration, calibrate_memory
from trmkit.plan.choose import (RETURNS_FREED, TIGHT_BUDGET, choose_accumulation, choose_budget, choose_compile,
                                choose_dtype, choose_eval_batch, choose_fused_inference, choose_keep_freed_memory,
                                choose_micro_batch, choose_workers, dtypes_to_time, expected_run, share_budget)
from trmkit.plan.device import choose_device, choose_threads
from trmkit.plan import measure
from trmkit.plan.measure import speed_table, step_seconds
from trmkit.plan.memory_model import Calibration, MemoryContext, process_baseline
from trmkit.plan.objects import CPU, Choice, MemoryEstimate, Plan

Log = Callable[[str], None]


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


def make_plan(cfg: Config, hw: HardwareInfo,
              cache_dir: str | Path | None = None, log: Log = print, calibrate: bool = False,
              saved_config: dict | None = None, world: int = 1, ranks_here: int = 1) -> Plan:
    """Resolve every 'auto' setting of cfg for this machine; log each choice with its reason.

    The budget is cfg.run.memory_budget (or derived from the machine); cache_dir keeps measurements (dtype speed,
    calibration, compile) between runs; calibrate=True measures two real steps to fit the
    memory model; saved_config is the config stored in a checkpoint being resumed.
    world > 1: the plan of one of `world` processes (train/distributed.py): cfg.train.batch_size
    holds this process's share of the global batch, and the cores and memory of this machine
    are shared by `ranks_here` processes."""
    check_sequence(cfg, saved_config)
    device = choose_device(cfg.run.device, hw)
    auto_cpu = cfg.run.threads <= 0 and ranks_here == 1 and device.value == "cpu"
    busy = measure.others_cpu_percent() / 100 * hw.cpu.effective_cores if auto_cpu else 0.0  # cores others use now
    threads, interop = choose_threads(cfg.run.threads, hw, ranks_here, busy)
    on_gpu = device.value == "cuda"
    budget = share_budget(choose_budget(hw, cfg.run, on_gpu), ranks_here, on_gpu)
    speeds, bench = (None, 1) if on_gpu else speed_table(cfg, hw, threads.value, device.value,
                                                         dtypes_to_time(cfg, hw), cache_dir, log)
    dtype = choose_dtype(cfg, hw, device.value, speeds, bench)
    calib = (calibrate_memory(cfg.model, dtype.value, threads.value, cache_dir, log) if calibrate and not on_gpu
             else cached_calibration(cfg.model, dtype.value, cache_dir))
    budget, mc = _memory_context(cfg, hw, budget, dtype.value, calib, on_gpu)
    micro, ckpt = choose_micro_batch(cfg, mc, device.value)
    eval_batch = choose_eval_batch(cfg, mc, micro.value, ckpt.value)
    step_s = step_seconds(cfg.model, speeds[dtype.value], bench, cfg.train.batch_size, ckpt.value) \
        if speeds else None
    compiled, gain = choose_compile(cfg, hw, device.value, dtype.value, micro.value, threads.value, step_s,
                                    cache_dir, log)
    step_s = step_s * gain if step_s is not None else None  # the compiled call's time where compile is chosen
    estimate = mc.estimate(cfg.model, cfg.train.batch_size, micro.value, ckpt.value, eval_batch.value)
    keep, trim = choose_keep_freed_memory(cfg.run.keep_freed_memory, hw.platform.libc, device.value,
                                          max(budget.value - estimate.total, estimate.parts["activations"]),
                                          tight=budget.value < TIGHT_BUDGET * estimate.total)
    if mc.kept_memory and not keep.value:  # freed memory goes back: evaluation is planned at its live bytes
        mc = dataclasses.replace(mc, kept_memory=False)
        eval_batch = choose_eval_batch(cfg, mc, micro.value, ckpt.value)
        estimate = mc.estimate(cfg.model, cfg.train.batch_size, micro.value, ckpt.value, eval_batch.value)
    fused = choose_fused_inference(cfg.run.fused_inference, device.value, dtype.value, bool(compiled.value))
    plan = Plan(device=device, dtype=dtype, threads=threads, micro_batch=micro,
                accumulation=choose_accumulation(cfg.train.batch_size, micro.value, world),
                interop_threads=interop, workers=choose_workers(), budget=budget, grad_checkpointing=ckpt,
                eval_batch=eval_batch, compile=compiled, step_seconds=step_s, keep_freed_memory=keep,
                fused_inference=fused, trim_threshold=trim, estimate=estimate)
    for line in plan.lines():
        log(PLAN_PREFIX + line)
    if step_s is not None:
        log(PLAN_PREFIX + step_time_line(cfg, step_s, gain < 1))
    return plan


PLAN_PREFIX = "plan: "
# what a command that only uses a trained model leaves out unless --verbose: the plan's choices, and the
# notes that a resumed run keeps its checkpoint's dtype or changes its micro-batch (train/execution.py;
# nothing resumes here)
QUIET_PREFIXES = (PLAN_PREFIX, "resume: dtype=", "resume: the checkpoint was trained at micro_batch=")


def plan_lines_to(log: Log, verbose: bool) -> Log:
    """`log` for eval and predict: the ~15 plan lines (and the resumed-dtype note) reach it only when
    verbose; `train` prints them all, its plan being what it will do for the next hour."""
    if verbose:
        return log

    def quiet(line: str) -> None:
        if not str(line).startswith(QUIET_PREFIXES):
            log(line)
    return quiet


def step_time_line(cfg: Config, step_s: float, compiled: bool = False) -> str:
    """What the run will take, said before the first step (from the measured speed of a network call,
    `compiled`: scaled by torch.compile's measured gain)."""
    _, length = expected_run(cfg, step_s)
    call = "one network call, compiled" if compiled else "one network call"
    return (f"time ~{step_s:.3g} s per optimizer step at batch {cfg.train.batch_size} (from the measured speed "
            f"of {call}; evaluation and checkpoints extra): {length}")


def _memory_context(cfg: Config, hw: HardwareInfo, budget: Choice, dtype: str, calib: Calibration,
                    on_gpu: bool) -> tuple[Choice, MemoryContext]:
    """What every estimate of the plan shares. On a CPU the steps are planned into the budget less
    the margin for the memory model's error, and the budget's reason says so."""
    baseline = 0 if on_gpu else process_baseline(hw)
    planned = budget.value if on_gpu else int(budget.value / (1 + calib.margin))
    if planned < budget.value:
        why = ("a run of this config here measured it" if calib.measured_runs
               else "no run of this config here has measured it yet")
        budget = Choice(budget.value, f"{budget.reason}; steps planned to {format_bytes(planned)}: "
                                      f"{calib.margin:.0%} kept for the memory model's error ({why})")
    # whether freed memory may stay in the process: the choice's own rules, before its budget test (tight)
    kept = not on_gpu and bool(choose_keep_freed_memory(cfg.run.keep_freed_memory, hw.platform.libc, CPU)[0].value)
    return budget, MemoryContext(dtype, baseline, calib, cfg.train.ema_decay > 0, planned, budget.value, kept)


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
