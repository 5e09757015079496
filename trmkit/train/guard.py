"""The memory guard: keep a run under its memory budget by resizing micro-batches.

At every step boundary the guard reads the step's peak RSS from the run's
`PeakMeter` (trmkit/hardware/memory.py: sampled every 5 ms plus the kernel's
high-water mark, which is never reset), the resting RSS, and the headroom
left under the effective limit (system available, cgroup limit, RLIMIT_AS;
see hardware/memory.py). With freed memory kept in the process (the planner's
`keep_freed_memory`) the resting RSS stays near the step's peak, so the
guard predicts the peak at another micro-batch from bytes per slot: the
plan's estimate, or a measured one when two micro-batches have been seen and
it is larger.

- Shrink: when the step's peak came within `margin` (3%) of the budget, or
  of what this process could hold now under the limits it shares with other
  processes (RSS + system or cgroup headroom: a browser opening tabs lowers
  it) less a reserve for their growth: 1 - `threshold` of that total while
  others use more than a tenth of it, else of the headroom alone (a run alone
  in a cgroup equal to its budget is not shrunk for neighbours it does not
  have), or the predicted growth would not fit in `threshold` of the headroom,
  the micro-batch becomes the largest divisor of the global batch whose
  predicted peak fits; accumulation rises so the effective batch never
  changes. The freed heap is then returned to the OS (glibc malloc_trim).
- Before the first step (`preflight`): the same check with the plan's
  predicted peak. Under a cgroup a first step that does not fit is killed by
  the kernel, not failed: there would be nothing to retry.
- Retry: when an allocation fails anyway, the failed micro-batch is undone
  and retried at half the size (see train_step's on_oom).
- Grow back: after `grow_after` consecutive calm steps the micro-batch
  doubles (never beyond the plan's choice) only if the predicted peak fits
  under `grow_margin` of the limit, and never to a size that was shrunk away
  from because of the budget: the budget does not change, so it would only
  be shrunk again (no oscillation).
Every change is logged with its numbers and kept in `adjustments`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from trmkit import hardware
from trmkit.hardware.memory import PeakMeter

GiB = 1024**3
CROWDED = 0.1  # others use more than this share of what we could hold: keep the wider reserve


@dataclass
class Reading:
    rss: int  # resting RSS at the step boundary (bytes)
    step_peak: int  # peak RSS during the last step (bytes)
    headroom: int  # bytes still allocatable under the effective limit
    shared_headroom: int | None = None  # the part other processes draw from too (RLIMIT_AS left out)
    others: int = 0  # bytes other processes use under the same limit (cgroup, else the machine)


def divisors_upto(n: int, limit: int) -> int:
    """Largest divisor of n that is <= limit (at least 1)."""
    for d in range(min(n, max(1, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


class PeakReader:
    """Resting RSS and headroom now, and the peak of the phase that just ended (from the meter)."""

    def __init__(self, memory_info: hardware.MemoryInfo | None = None, meter: PeakMeter | None = None):
        self.memory_info, self.meter = memory_info, meter

    def release(self) -> None:
        """Return freed memory to the OS."""
        hardware.trim_heap()

    def read(self) -> Reading:
        sample = hardware.read_memory_now(self.memory_info)
        peak = self.meter.last if self.meter is not None and self.meter.last else sample.rss
        return Reading(rss=sample.rss, step_peak=max(peak, sample.rss),
                       headroom=hardware.effective_available(sample),
                       shared_headroom=hardware.effective_available(dataclasses.replace(sample, rlimit_as=None)),
                       others=self._others(sample))

    def _others(self, sample: hardware.MemorySample) -> int:
        if sample.cgroup_limit is not None and sample.cgroup_current is not None:
            used = sample.cgroup_current - (sample.cgroup_inactive_file or 0)
        else:
            used = (self.memory_info.total if self.memory_info else 0) - sample.available
        return max(0, used - sample.rss)


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
    margin: float = 0.03  # act when a step's peak comes this close to the budget, not after it passed
    grow_margin: float = 0.9  # grow only if the predicted peak stays under this share of the limit
    ceiling: int = 1 << 30  # never grow to this micro-batch or beyond (shrunk from it for the budget)
    adjustments: list[dict] = field(default_factory=list)
    _calm_steps: int = 0
    _peaks: dict[int, int] = field(default_factory=dict)  # micro-batch -> largest step peak seen

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
        """Before step 1: the plan's predicted peak against the budget and what is free now."""
        r = self.reader.read()
        return self.observe(0, dataclasses.replace(r, step_peak=max(predicted_peak, r.rss)))

    def per_slot(self, r: Reading) -> float:
        """Bytes per micro-batch slot: the largest of the plan's estimate, the slope between the
        peaks of two micro-batches seen, and the step's growth over its resting RSS per slot (near
        zero while freed memory is kept, so never trusted alone)."""
        sizes = sorted(self._peaks)
        slope = 0.0
        if len(sizes) >= 2:
            lo, hi = sizes[0], sizes[-1]
            slope = (self._peaks[hi] - self._peaks[lo]) / (hi - lo)
        transient = max(0, r.step_peak - r.rss) / max(1, self.micro_batch)
        return max(float(self.slot_bytes), slope, transient, 1.0)

    def limits(self, r: Reading) -> tuple[float, float]:
        """(the most the step's peak may reach, the most it may grow beyond the resting RSS)."""
        shared = r.headroom if r.shared_headroom is None else r.shared_headroom
        crowded = r.others > CROWDED * (r.rss + shared)  # others run beside us: they may grow too
        reserve = (1 - self.threshold) * (r.rss + shared if crowded else shared)
        return min(self.budget * (1 - self.margin), r.rss + shared - reserve), self.threshold * r.headroom

    def fits(self, r: Reading, new: int, margin: float = 1.0) -> bool:
        peak = r.step_peak + (new - self.micro_batch) * self.per_slot(r)
        limit_peak, limit_growth = self.limits(r)
        return peak <= margin * limit_peak and peak - r.rss <= limit_growth

    def observe(self, step: int, r: Reading) -> int:
        """Decide the micro-batch of the next step from the last step's reading."""
        if step > 0:
            self._peaks[self.micro_batch] = max(self._peaks.get(self.micro_batch, 0), r.step_peak)
        if not self.fits(r, self.micro_batch) and self.micro_batch > 1:
            return self._shrink(step, r)
        if self.micro_batch < min(self.max_micro_batch, self.ceiling - 1):
            self._calm_steps += 1
            if self._calm_steps >= self.grow_after:
                self._calm_steps = 0
                new = divisors_upto(self.batch_size, min(self.max_micro_batch, self.ceiling - 1,
                                                         self.micro_batch * 2))
                if new > self.micro_batch and self.fits(r, new, self.grow_margin):
                    self._record(step, new, f"{self.grow_after} calm steps; predicted peak "
                                 f"{(r.step_peak + (new - self.micro_batch) * self.per_slot(r)) / GiB:.2f} "
                                 f"GiB fits under {self.grow_margin:.0%} of the limit")
        return self.micro_batch

    def _shrink(self, step: int, r: Reading) -> int:
        new = self.micro_batch - 1
        while new > 1 and not self.fits(r, new):
            new -= 1
        new = divisors_upto(self.batch_size, new)
        limit_peak, _ = self.limits(r)
        if r.step_peak > limit_peak >= self.budget * (1 - self.margin):  # the budget is fixed: never again
            self.ceiling = min(self.ceiling, self.micro_batch)
        shared = r.headroom if r.shared_headroom is None else r.shared_headroom
        self._calm_steps = 0
        self._record(step, new, f"step peak {r.step_peak / GiB:.2f} GiB vs {limit_peak / GiB:.2f} GiB: "
                     f"budget {self.budget / GiB:.2f} GiB, RSS {r.rss / GiB:.2f} GiB + shared headroom "
                     f"{shared / GiB:.2f} GiB less a reserve for other processes (using {r.others / GiB:.2f} GiB), "
                     f"headroom {r.headroom / GiB:.2f} GiB, {self.per_slot(r) / 2**20:.1f} MiB per slot")
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
