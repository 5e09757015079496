"""Memory per batch slot, measured in fresh processes.

Peak RSS after one training step at batch B/2 and at B, same config and threads
-> (peak_B - peak_B/2) / (B/2): B/2 in a fresh subprocess, B in a fresh one too or
(`trmkit bench`, after a warm-up) the bench's own process. Fresh processes because
a process's peak RSS cannot be reset portably and the allocator keeps freed
pages; the fixed part (torch, weights, gradients, optimizer state) is the same
in both and cancels, so one step is enough: a second one (the optimizer state
then allocated during backward) would add fixed bytes only, and time
(a 7-step bench of the paper config spent a quarter of its wall time here).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import torch

from trmkit.bench.session import bench_settings, build_session, timed_steps
from trmkit.config import Config, ModelConfig, from_dict
from trmkit.hardware.memory import kernel_peak

MB = 1024 * 1024
# The probe process runs this module's memory_probe_child (the job arrives on stdin).
_CHILD = "from trmkit.bench.memory import memory_probe_child; memory_probe_child()"


def peak_rss_bytes() -> int:
    """This process's own peak resident set size so far (VmHWM on Linux; see hardware.memory.kernel_peak)."""
    return int(kernel_peak() or 0)


def memory_probe_child() -> None:
    """Subprocess entry: read {config, threads, steps} from stdin, train, print peak RSS as JSON."""
    job = json.loads(sys.stdin.read())
    torch.set_num_threads(int(job["threads"]))
    cfg = from_dict(job["config"], where="bench memory probe")
    s = build_session(cfg, bench_settings(cfg), job.get("compile_target", "net"))
    timed_steps(s, int(job["steps"]))
    print(json.dumps({"peak_rss_bytes": peak_rss_bytes(), "batch": cfg.train.batch_size}))


def probe_peak_rss(cfg: Config, batch: int, threads: int, steps: int = 1,
                   compile_target: str = "net", timeout: float = 3600) -> int:
    """Peak RSS (bytes) of a fresh process that trains `steps` steps at `batch` slots."""
    raw = cfg.to_dict()
    raw["train"]["batch_size"] = batch
    if raw["train"]["micro_batch"] and batch % raw["train"]["micro_batch"]:
        raw["train"]["micro_batch"] = 0
    job = json.dumps({"config": raw, "threads": threads, "steps": steps, "compile_target": compile_target})
    done = subprocess.run([sys.executable, "-c", _CHILD], input=job, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe at batch {batch} failed:\n{done.stderr[-2000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_bytes"])


def per_slot_mb(peak_small: int, peak_big: int, small: int, big: int) -> float:
    """(peak RSS at big - at small) / (big - small) slots, in MiB."""
    if big <= small:
        raise ValueError(f"need two different batch sizes, got {small} and {big}")
    return (peak_big - peak_small) / (big - small) / MB


def memory_per_slot(cfg: Config, threads: int, compile_target: str = "net", peak_at_batch: int | None = None,
                    peak_at_half: int | None = None) -> dict[str, Any]:
    """MB per batch slot from peak RSS after one step at B/2 and at B slots (B at least 2): each
    from a fresh process unless given (`trmkit bench` gives B/2's, measured first, and B's: its own
    process after the warm-up step at B, one process start and one step fewer)."""
    big = max(2, cfg.train.batch_size)
    small = big // 2
    peaks = {small: peak_at_half or probe_peak_rss(cfg, small, threads, steps=1, compile_target=compile_target),
             big: peak_at_batch or probe_peak_rss(cfg, big, threads, steps=1, compile_target=compile_target)}
    where = "the measuring process after its warm-up" if peak_at_batch else "a fresh process"
    return {"batches": [small, big], "peak_rss_mb": [peaks[small] / MB, peaks[big] / MB],
            "mb_per_slot": per_slot_mb(peaks[small], peaks[big], small, big),
            "method": f"peak RSS after one step: a fresh process at B/2, {where} at B: (peak_B - peak_B/2) / (B/2)"}


_REAL_STEP = r"""
import json, sys, time
from types import SimpleNamespace
import numpy as np, torch
from trmkit.hardware.memory import kernel_peak
from trmkit.plan.calibrate import rss_now
from trmkit.config import Config, ModelConfig, TrainConfig
from trmkit.model.trm import TRM
from trmkit.train.session import build_optimizers
from trmkit.train.loop import run_step
from trmkit.train.step import StepContext, new_state

spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
class Stream:
    rng = np.random.default_rng(0)
    def take(self, k):
        x = self.rng.integers(1, 11, (k, 81)).astype(np.uint8)
        return SimpleNamespace(inputs=x, labels=x.copy(), puzzle_ids=np.zeros(k, np.uint8))
baseline = rss_now()
m = ModelConfig(**spec["model"])
cfg = Config(model=m, train=TrainConfig(batch_size=spec["batch"], micro_batch=spec["micro_batch"]))
torch.manual_seed(0)
model = TRM(m)
model.grad_checkpointing = spec["grad_checkpointing"]
opts = build_optimizers(model, cfg)
state = new_state(model, spec["batch"], m.seq_len, "cpu")
autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["dtype"] == "bfloat16")
ctx = StepContext(micro_batch=spec["micro_batch"], ignore_label_id=0, device=torch.device("cpu"),
                  autocast=autocast)
t0 = time.perf_counter()
for _ in range(spec["steps"]):
    run_step(model, state, Stream(), opts, cfg.train, ctx)
def peak():
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return int(kernel_peak() or 0)
print(json.dumps({"baseline": baseline, "peak": peak(), "seconds": time.perf_counter() - t0}))
"""


def measure_real_step(model: ModelConfig, batch: int, micro_batch: int, steps: int = 2,
                      ckpt: bool = False, dtype: str = "float32", threads: int = 1) -> dict:
    """Peak RSS of real training steps (the loop's run_step itself, not the planner's replica) in a fresh Python
    process: {'baseline', 'peak', 'seconds'}. The memory model's check (tests/plan/test_plan.py) and its
    table (benchmarks/memory_model.py) both use it."""
    spec = json.dumps({"model": dataclasses.asdict(model), "batch": batch, "micro_batch": micro_batch,
                       "steps": steps, "threads": threads, "grad_checkpointing": ckpt, "dtype": dtype})
    done = subprocess.run([sys.executable, "-c", _REAL_STEP, spec], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"real-step measurement failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
