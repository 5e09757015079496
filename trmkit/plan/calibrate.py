"""Calibrating the memory model on this machine, and learning from what runs measured.

`calibrate_memory` fits the runtime overhead and the backward working set from
two real steps (in fresh subprocesses, so peak RSS is clean) and caches them per
config and torch version; without it, defaults measured with torch 2.13 on an
x86-64 Linux CPU are used (docs/planning.md has the table: within 10% of the
measured peak for the Sudoku configs; since 2026-11-27 the real steps need up to 13% less
than that, an over-estimate, which the budget tolerates). `learn_from_peaks` raises the
cached constants by what a run measured beyond its estimates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from trmkit.config import ModelConfig
from trmkit.hardware.memory import kernel_peak
from trmkit.model.trm import input_dtype
from trmkit.plan.cache import CALIBRATION_FILE, read_cache, write_cache
from trmkit.plan.memory_model import Calibration, carry_slot_bytes, fixed_parts, micro_slot_bytes, net_call_bytes
from trmkit.plan.objects import CPU, MiB, autocast_factory

Log = Callable[[str], None]

# The measuring subprocess runs this module's calibration_child (the spec arrives on stdin).
_CHILD = "import sys, trmkit.plan.calibrate as c; c.calibration_child(sys.stdin.read())"
LEARN_MARGIN = 1.02  # a learned deficit is stored 2% larger: the next run's peak varies a little too


def rss_now() -> int:
    """This process's resident set size now, in bytes."""
    import psutil
    return psutil.Process().memory_info().rss


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
            loss, _ = act_loss(logits, labels[sl], q, m.halt_loss_weight, kind=m.loss)
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
    from trmkit.model.parts import Part
    from trmkit.model.trm import TRM

    spec = json.loads(spec_text)
    torch.set_num_threads(int(spec["threads"]))
    baseline = rss_now()
    torch.manual_seed(0)
    m = ModelConfig(**spec["model"])
    outputs = [Part(extra_outputs=len(m.trace_ids))] if m.trace_ids else []  # a trace's head: its size alone
    model = TRM(m, outputs)
    model.grad_checkpointing = bool(spec["grad_checkpointing"])
    autocast = autocast_factory(CPU, spec["dtype"])
    t0 = time.perf_counter()
    _replica_step(model, int(spec["batch"]), int(spec["micro_batch"]), autocast)
    peak = int(kernel_peak() or 0)  # VmHWM: this process's own peak (see hardware.memory.kernel_peak)
    print(json.dumps({"baseline": baseline, "peak": peak, "seconds": time.perf_counter() - t0}))


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
    cached = read_cache(cache_dir, CALIBRATION_FILE).get(key)
    if cached and set(cached) <= {f.name for f in dataclasses.fields(Calibration)} and "backward_calls" in cached \
            and "measured here" in str(cached.get("source", "")):
        return Calibration(**cached)
    fast = dataclasses.replace(m, H_cycles=1)  # the cycles without gradients add time, not memory
    log(f"calibrating the memory model: one step at micro-batch {sizes[0]} and {sizes[1]} "
        "in fresh processes (once per config and torch version)")
    runs = [(n, measure_step_peak(fast, n, n, dtype, False, threads)) for n in sizes]
    calib = fit_calibration(m, dtype, runs[0], runs[1],
                            f"measured here: steps at micro-batch {sizes[0]} and {sizes[1]}")
    write_cache(cache_dir, CALIBRATION_FILE, key, asdict(calib))
    return calib


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
    write_cache(cache_dir, CALIBRATION_FILE, calibration_key(m, dtype), asdict(new))
    return True


def cached_calibration(m: ModelConfig, dtype: str, cache_dir: str | Path | None) -> Calibration:
    cached = read_cache(cache_dir, CALIBRATION_FILE).get(calibration_key(m, dtype))
    try:
        return Calibration(**cached) if cached else Calibration()
    except TypeError:  # written by another trmkit version
        return Calibration()
