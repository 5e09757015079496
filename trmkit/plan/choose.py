"""Every automatic choice of the plan but device and threads (device.py), each with its reason.

Memory: the budget, the micro-batch and activation checkpointing, the evaluation batch,
whether the C allocator keeps freed memory. Speed: the compute dtype (bf16 only where it was
measured faster), torch.compile (only where its measured saving pays for its compile time),
the fused no-gradient path, data-loader workers. A config that cannot work stops with a
`ConfigError` that names the problem and a concrete alternative.

Departures from "always the largest micro-batch": activation checkpointing is
turned on only where memory is the limit *and* the micro-batch without it would
be too small for efficient matmuls (see `_auto_checkpointing`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch

from trmkit.config import Config, ConfigError, ModelConfig, RunConfig
from trmkit.hardware import HardwareInfo, effective_available
from trmkit.hardware.allocator import KEEP_TRIM_THRESHOLD
from trmkit.hardware.cpu import native_bf16
from trmkit.hardware.report import format_bytes
from trmkit.model.layers import fused_inference_works
from trmkit.plan.measure import BUSY_PERCENT, compile_timing, minutes, step_seconds
from trmkit.plan.memory_model import MemoryContext, largest_micro_batch, seq_total
from trmkit.plan.objects import CPU, EVAL_BATCH_MAX, GiB, MiB, Choice

Log = Callable[[str], None]

BUDGET_FRACTION = 0.8  # default budget: this share of the memory limit, minus what others use
CHECKPOINT_MIN_ROWS = 512  # below micro_batch * seq rows per matmul, CPU matmuls lose efficiency
BF16_MIN_SPEEDUP = 1.1  # bf16 must be at least 10% faster to be worth its rounding
COMPILE_SHORT_RUN_S = 30 * 60  # runs shorter than this never compile: compile time would not pay back
COMPILE_PAYBACK = 2.0  # compile only if the expected saving is twice its (measured) cost
MIN_TRIM_THRESHOLD = 32 * MiB  # below this glibc would return (and fault back) every activation buffer
TIGHT_BUDGET = 1.25  # a budget under this multiple of the estimated peak leaves no room for kept memory
FLOAT32_FUSED_OFF = ("float32: left to run.fused_inference=on until a same-process A/B shows a gain here "
                     "(benchmarks/fused_ab.py; docs/results.md)")
RETURNS_FREED = "go back to the OS"  # marks the tight-budget choice: apply_to_process returns freed memory


# ----------------------------------------------------------------------------- budget

def choose_budget(hw: HardwareInfo, run: RunConfig, on_gpu: bool) -> Choice:
    """Bytes the planned step may use at its peak (the whole process's RSS on a CPU): run.memory_budget
    (which --memory-budget sets), read by the config (RunConfig.budget_bytes), or derived from the machine."""
    value = run.budget_bytes()
    if value is not None:
        where = f"set as run.memory_budget={run.memory_budget}"
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


def share_budget(budget: Choice, ranks_here: int, on_gpu: bool) -> Choice:
    """One process's part of the budget when `ranks_here` processes share this machine's memory."""
    if ranks_here <= 1 or on_gpu:  # a GPU per process: its own memory
        return budget
    return Choice(budget.value // ranks_here, f"{budget.reason}, shared by the {ranks_here} processes on "
                                              f"this machine: {format_bytes(budget.value // ranks_here)} each")


def with_memory_limit(hw: HardwareInfo, limit: int) -> HardwareInfo:
    """`hw` as if this process ran alone under a memory limit of `limit` bytes (to simulate a laptop)."""
    mem = dataclasses.replace(hw.memory, total=limit, limit=limit, limit_source="simulated limit",
                              available=max(0, limit - hw.memory.rss), cgroup=None, rlimit_as=None)
    return dataclasses.replace(hw, memory=mem)


# ----------------------------------------------------------------------------- micro-batch and checkpointing

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


def choose_accumulation(batch: int, micro: int, world: int) -> Choice:
    """Micro-batches per optimizer step: what keeps the global batch."""
    if world == 1:
        return Choice(batch // micro, f"keeps the global batch of {batch}: {batch} / {micro}")
    return Choice(batch // micro, f"keeps the global batch of {batch * world}: {world} processes x "
                                  f"{batch} slots each, {batch} / {micro} micro-batches")


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


# ----------------------------------------------------------------------------- the C allocator and the fused path

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
                        "the guard still returns memory when it shrinks (docs/results.md)" + kept), trim


def choose_fused_inference(setting: str, device: str, dtype: str, compiled: bool) -> Choice:
    """Whether calls of the network without gradients (the first T-1 cycles, evaluation) run
    SwiGLU as oneDNN matmuls with SiLU, the product and the residual add in their epilogue."""
    if setting == "off":
        return Choice(False, "set in the config (run.fused_inference)")
    if device != CPU or dtype not in ("bfloat16", "float32"):
        return Choice(False, f"the fused oneDNN matmuls are for bf16 or float32 on a CPU; this run is {dtype} "
                             f"on {device}")
    if compiled:
        return Choice(False, "torch.compile fuses the element-wise work itself")
    if dtype == "float32" and setting != "on":
        return Choice(False, FLOAT32_FUSED_OFF)
    broken = fused_inference_works(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
    if broken:
        return Choice(False, broken)
    how = "set in the config (run.fused_inference)" if setting == "on" else (
        "no-gradient calls (the first T-1 cycles, evaluation) put SiLU, the SwiGLU product and the residual "
        "add into oneDNN's matmul epilogues instead of three passes over the widest activations; "
        f"their residual stream is {'bf16' if dtype == 'bfloat16' else 'float32'} (docs/results.md)")
    return Choice(True, how)


def choose_workers() -> Choice:
    return Choice(0, "the data store is memory-mapped and a step reads only its rows: "
                     "loader processes would add memory and copies, not speed")


# ----------------------------------------------------------------------------- dtype and compile

def dtypes_to_time(cfg: Config, hw: HardwareInfo) -> tuple[str, ...]:
    """bf16 is timed only where it is 'auto' and the CPU has native bf16 instructions."""
    if cfg.run.dtype != "auto":
        return (cfg.run.dtype,)
    return ("float32", "bfloat16") if native_bf16(hw.cpu.features) else ("float32",)


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


def expected_run(cfg: Config, step_s: float) -> tuple[float, str]:
    """Seconds of training the run will get at `step_s` per step: max_steps, or the wall-clock
    budget (train.max_minutes) when that ends it first; and the same in words."""
    by_steps = step_s * cfg.train.max_steps
    limit = 60 * cfg.train.max_minutes
    if limit and limit < by_steps:
        return limit, (f"train.max_minutes={cfg.train.max_minutes:g} ends it after ~{int(limit / step_s):,} "
                       f"of {cfg.train.max_steps:,} steps")
    return by_steps, f"~{minutes(by_steps)} for {cfg.train.max_steps:,} steps at ~{step_s:.2g} s each"


def choose_compile(cfg: Config, hw: HardwareInfo, device: str, dtype: str, micro: int, threads: int,
                   step_s: float | None, cache_dir: str | Path | None, log: Log) -> tuple[Choice, float]:
    """torch.compile only where it works here and its measured saving pays for its compile time.

    Returns the choice and the measured time of a compiled call against an eager one where compile is
    chosen on that measurement (else 1.0): the step-time estimate scales by it."""
    if cfg.run.compile in ("on", "off"):
        return Choice(cfg.run.compile == "on", "set in the config (run.compile)"), 1.0
    if step_s is None:
        return Choice(False, "no step-time measurement to weigh the compile time against; "
                             "set run.compile=on to try"), 1.0
    run_s, length = expected_run(cfg, step_s)
    if run_s < COMPILE_SHORT_RUN_S:
        return Choice(False, f"short run ({length}): compiling takes minutes on a CPU and could not pay back"), 1.0
    result = compile_timing(cfg.model, hw, device, dtype, micro, threads, cache_dir, log, run_s)
    if "error" in result:
        return Choice(False, f"torch.compile does not work here: {result['error']}"), 1.0
    gain = min(1.0, result["compiled"] / result["eager"])
    saving = run_s * (1 - gain)  # every call gets faster
    cost = COMPILE_PAYBACK * result["compile_seconds"]  # x2: evaluation shapes compile again
    numbers = (f"measured {result['eager'] * 1e3:.0f} -> {result['compiled'] * 1e3:.0f} ms per call, "
               f"compile {result['compile_seconds']:.0f} s; saves ~{minutes(max(0.0, saving))} "
               f"over the run ({length})")
    if result.get("busy_percent", 0.0) >= BUSY_PERCENT:
        numbers += f"; measured while other processes used {result['busy_percent']:.0f}% of the CPU"
    pays = saving > cost
    return Choice(pays, numbers + (" (pays back)" if pays else " (does not pay back)")), gain if pays else 1.0
