"""The memory guard: keep a run under its memory budget by resizing micro-batches.

At every step boundary the guard reads (cheaply, ~0.1 ms) the process RSS,
the peak RSS of the step that just ended (Linux VmHWM, reset after each read
through /proc/self/clear_refs; so a guarded process's ru_maxrss and VmHWM
only cover the time since the last step), and the headroom left under the
effective limit (system available, cgroup limit, RLIMIT_AS; see hardware.py).
The transient memory of a step (peak - resting RSS) scales with the micro-batch.

- Shrink: when the predicted peak of the next step exceeds the budget (the
  planner's ceiling, itself 80% of the limit by default) or `threshold` of what
  this process could hold now under the limits it shares with other processes
  (RSS + system or cgroup headroom: a browser opening tabs lowers it), or its
  transient would not fit in `threshold` of the headroom, the micro-batch
  becomes the largest divisor of the global batch that fits; accumulation
  rises so the effective batch never changes. The freed heap is then returned
  to the OS (glibc malloc_trim): glibc keeps freed chunks, so without it a
  smaller micro-batch would free nothing for the others. For the same reason
  the measured transient can be near zero; the plan's per-slot estimate is
  then the floor.
- Before the first step (`preflight`): the same check with the plan's
  predicted peak. Under a cgroup a first step that does not fit is killed by
  the kernel, not failed: there would be nothing to retry.
- Retry: when an allocation fails anyway, the step is retried at half the
  micro-batch (see train_step's on_oom).
- Grow back: after `grow_after` consecutive steps well under the threshold,
  the micro-batch doubles (never beyond the plan's choice) if the prediction fits.
Every change is logged with its numbers and kept in `adjustments`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

from trmkit import hardware

GiB = 1024**3


@dataclass
class Reading:
    rss: int  # resting RSS at the step boundary (bytes)
    step_peak: int  # peak RSS during the last step (bytes); rss when unknown
    headroom: int  # bytes still allocatable under the effective limit
    shared_headroom: int | None = None  # the part other processes draw from too (RLIMIT_AS left out)


def divisors_upto(n: int, limit: int) -> int:
    """Largest divisor of n that is <= limit (at least 1)."""
    for d in range(min(n, max(1, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


class PeakReader:
    """Reads resting RSS and the per-step peak RSS (Linux), plus headroom."""

    def __init__(self, memory_info: hardware.MemoryInfo | None = None, proc: str = "/proc/self"):
        self.memory_info, self.proc = memory_info, proc
        self.can_reset = self._reset()

    def _reset(self) -> bool:
        try:
            with open(f"{self.proc}/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            return True
        except OSError:
            return False

    def _status(self) -> tuple[int, int] | None:
        try:
            with open(f"{self.proc}/status") as f:
                text = f.read()
        except OSError:
            return None
        hwm, rss = re.search(r"VmHWM:\s+(\d+)", text), re.search(r"VmRSS:\s+(\d+)", text)
        return (int(hwm.group(1)) * 1024, int(rss.group(1)) * 1024) if hwm and rss else None

    def release(self) -> None:
        """Return freed memory to the OS, then restart the peak from the lower RSS."""
        hardware.trim_heap()
        if self.can_reset:
            self._reset()

    def read(self) -> Reading:
        sample = hardware.read_memory_now(self.memory_info)
        status = self._status() if self.can_reset else None
        peak = status[0] if status else sample.rss
        if self.can_reset:
            self._reset()
        return Reading(rss=sample.rss, step_peak=max(peak, sample.rss),
                       headroom=hardware.effective_available(sample),
                       shared_headroom=hardware.effective_available(dataclasses.replace(sample, rlimit_as=None)))


@dataclass
class MemoryGuard:
    budget: int  # bytes this run may use (the planner's budget)
    batch_size: int  # global batch: never changes
    micro_batch: int  # current micro-batch
    max_micro_batch: int  # the plan's choice: never grow beyond it
    threshold: float = 0.8
    grow_after: int = 50
    log: Callable[[str], None] = print
    reader: PeakReader | None = None  # what the loop reads at each step boundary
    slot_bytes: int = 0  # the plan's estimate of one micro-batch slot: floor of the measured one
    adjustments: list[dict] = field(default_factory=list)
    _calm_steps: int = 0

    def _record(self, step: int, new: int, reason: str) -> None:
        old, self.micro_batch = self.micro_batch, new
        message = (f"memory guard @ step {step}: micro_batch {old} -> {new} "
                   f"(accumulation {self.batch_size // old} -> {self.batch_size // new}, "
                   f"effective batch {self.batch_size} unchanged): {reason}")
        self.adjustments.append({"step": step, "from": old, "to": new,
                                 "accumulation": self.batch_size // new, "reason": reason,
                                 "message": message})
        self.log(message)
        if new < old and self.reader is not None:
            self.reader.release()

    def preflight(self, predicted_peak: int) -> int:
        """Before step 1: the plan's predicted peak against what is free now."""
        r = self.reader.read()
        return self.observe(0, dataclasses.replace(r, step_peak=max(predicted_peak, r.rss)))

    def observe(self, step: int, r: Reading) -> int:
        """Decide the micro-batch of the next step from the last step's reading."""
        transient = max(0, r.step_peak - r.rss)
        per_slot = transient / max(1, self.micro_batch)
        shared = r.headroom if r.shared_headroom is None else r.shared_headroom
        limit_peak = min(self.budget, self.threshold * (r.rss + shared))
        limit_transient = min(limit_peak - r.rss, self.threshold * r.headroom)
        if transient > limit_transient and self.micro_batch > 1:
            fit = self.micro_batch - 1
            if transient > self.threshold * r.headroom:
                fit = min(fit, int(self.threshold * r.headroom // max(per_slot, 1)))
            if r.step_peak > limit_peak:  # all of the activations must go, not only the measured part
                slot = max(per_slot, self.slot_bytes)
                rest = r.step_peak - self.micro_batch * slot
                fit = min(fit, int(max(0, limit_peak - rest) // max(slot, 1)))
            new = divisors_upto(self.batch_size, fit)
            self._calm_steps = 0
            self._record(step, new, f"step peak {r.step_peak / GiB:.2f} GiB vs min(budget "
                         f"{self.budget / GiB:.2f} GiB, {self.threshold:.0%} of RSS + shared headroom "
                         f"{(r.rss + shared) / GiB:.2f} GiB), headroom {r.headroom / GiB:.2f} GiB, "
                         f"{per_slot / 2**20:.1f} MiB per slot")
            return self.micro_batch
        if self.micro_batch < self.max_micro_batch and transient * 2 < 0.5 * limit_transient:
            self._calm_steps += 1
            if self._calm_steps >= self.grow_after:
                self._calm_steps = 0
                new = divisors_upto(self.batch_size, min(self.max_micro_batch, self.micro_batch * 2))
                if new > self.micro_batch:
                    self._record(step, new, f"{self.grow_after} steps under half the threshold "
                                 f"(step peak {r.step_peak / GiB:.2f} GiB)")
        else:
            self._calm_steps = 0
        return self.micro_batch

    def on_oom(self, step: int, err: BaseException) -> int:
        """An allocation failed inside a step: halve the micro-batch, or give up at 1."""
        if self.micro_batch <= 1:
            raise MemoryError(
                f"out of memory at micro_batch 1 (step {step}): the model does not fit in "
                f"{self.budget / GiB:.2f} GiB; use a smaller preset such as configs/laptop-8gb.yaml, "
                f"or set model.hidden_size / model.H_cycles lower") from err
        new = divisors_upto(self.batch_size, self.micro_batch // 2)
        self._calm_steps = 0
        self._record(step, new, f"allocation failed ({str(err).splitlines()[0][:120]}); "
                     f"retrying the same step")
        return new
