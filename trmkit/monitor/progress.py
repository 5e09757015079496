"""Showing a run as it goes: the system sampler, the progress line and throughput-drop warnings."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from typing import Callable, Mapping

import psutil

GB = 1024**3  # sizes are reported in GiB, printed as "GB" like most system monitors


# --------------------------------------------------------------------------- system sampling


class SystemSampler:
    """RSS, available RAM and CPU % of one process, read with psutil.

    CPU % is over the interval since the previous sample (100 = one core busy).
    `peak_bytes`, when given, reports the process's peak RSS as the kernel
    keeps it (trmkit.hardware.memory.PeakMeter.process_peak): samples taken here, at
    step boundaries, would miss the peaks inside steps, evaluation and saving.
    """

    def __init__(self, pid: int | None = None, peak_bytes: Callable[[], int] | None = None) -> None:
        self._proc = psutil.Process(pid)
        self._proc.cpu_percent(None)  # the first call only starts the interval
        self._peak_bytes = peak_bytes

    def sample(self) -> dict[str, float]:
        out = {
            "sys/rss_gb": self._proc.memory_info().rss / GB,
            "sys/available_gb": psutil.virtual_memory().available / GB,
            "sys/cpu_percent": self._proc.cpu_percent(None),
        }
        if self._peak_bytes is not None:
            out["sys/peak_rss_gb"] = self._peak_bytes() / GB
        return out


# --------------------------------------------------------------------------- progress line


def format_duration(seconds: float | None) -> str:
    """45 -> '45s', 552 -> '9m12s', 3720 -> '1h02m'; None or inf -> '--'."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def format_status(
    step: int,
    total_steps: int,
    metrics: Mapping[str, float],
    eta_seconds: float | None = None,
    cores: int | None = None,
    width: int | None = None,
) -> str:
    """One status line from the metric names above; absent fields are left out.

    >>> format_status(50, 200, {"train/loss": 0.5}, eta_seconds=90)
    'step 50/200 (25%) | loss 0.5000 | ETA 1m30s'
    """
    done = step / total_steps if total_steps > 0 else 0.0
    parts = [f"step {step}/{total_steps} ({100 * done:.0f}%)"]
    if "train/loss" in metrics:
        parts.append(f"loss {metrics['train/loss']:.4f}")
    acc = [_pct(metrics[k]) for k in ("train/accuracy",) if k in metrics]
    if "train/exact_accuracy" in metrics:
        acc.append(f"exact {_pct(metrics['train/exact_accuracy'])}")
    if acc:
        parts.append("acc " + " ".join(acc))
    if "perf/samples_per_second" in metrics:
        parts.append(f"{metrics['perf/samples_per_second']:.0f} samples/s")
    parts.append(f"ETA {format_duration(eta_seconds)}")
    if "sys/rss_gb" in metrics:
        ram = f"RSS {metrics['sys/rss_gb']:.2f} GB"
        if "sys/peak_rss_gb" in metrics:
            ram += f" (peak {metrics['sys/peak_rss_gb']:.2f})"
        if "sys/available_gb" in metrics:
            ram += f", {metrics['sys/available_gb']:.1f} GB free"
        parts.append(ram)
    if "sys/cpu_percent" in metrics:
        of = f"/{100 * cores}%" if cores else "%"
        parts.append(f"CPU {metrics['sys/cpu_percent']:.0f}{of}")
    if "sys/temperature_c" in metrics:
        parts.append(f"{metrics['sys/temperature_c']:.0f}°C")
    line = " | ".join(parts)
    return line[: width - 1] if width and len(line) >= width else line


class Progress:
    """A live status line on a terminal, periodic plain lines otherwise.

    On a terminal the line is rewritten in place with "\\r" at most every
    `redraw_seconds` (log must accept print's `end` and `flush` keywords);
    elsewhere (files, CI) one line every `every_seconds`. The ETA comes from a
    smoothed rate of steps per wall-clock second measured here, so it includes
    evaluation and checkpoint time (samples/s shown is the loop's own, smoothed).
    """

    def __init__(
        self,
        total_steps: int,
        is_tty: bool,
        every_seconds: float = 10.0,
        log: Callable[..., None] = print,
        clock: Callable[[], float] = time.monotonic,
        sampler: SystemSampler | None = None,
        cores: int | None = None,
        width: int | None = None,
        redraw_seconds: float = 0.5,
        smoothing: float = 0.3,
        time_limit_s: float = 0.0,
    ) -> None:
        self.total_steps = total_steps
        self.time_limit_s = time_limit_s  # the run's wall-clock budget (train.max_minutes), 0 = none
        self._start = clock()
        self.is_tty = is_tty
        self.every_seconds = every_seconds if not is_tty else redraw_seconds
        self._log, self._clock = log, clock
        self._sampler = sampler
        self._cores, self._width, self._alpha = cores, width, smoothing
        self._last: tuple[int, float] | None = None  # (step, time) of the last shown line
        self._steps_per_s: float | None = None
        self._samples_per_s: float | None = None
        self._shown_len = 0
        self._pending: tuple[int, dict[str, float]] | None = None

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self._alpha) * old + self._alpha * new

    def eta_seconds(self, step: int) -> float | None:
        """Remaining steps / smoothed steps per second, or the time left of the run's wall-clock
        budget when that ends it first; None before a rate is known."""
        if not self._steps_per_s:
            return None
        by_steps = max(self.total_steps - step, 0) / self._steps_per_s
        if self.time_limit_s:
            return min(by_steps, max(0.0, self.time_limit_s - (self._clock() - self._start)))
        return by_steps

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        """Call every step (cheap); a line is shown only when the interval has passed."""
        now = self._clock()
        self._pending = (step, dict(metrics))
        if self._last is not None and now - self._last[1] < self.every_seconds:
            return
        self._show(step, dict(metrics), now)

    def _show(self, step: int, metrics: dict[str, float], now: float) -> None:
        if self._last is not None and now > self._last[1] and step > self._last[0]:
            self._steps_per_s = self._smooth(self._steps_per_s, (step - self._last[0]) / (now - self._last[1]))
        if "perf/samples_per_second" in metrics:
            self._samples_per_s = self._smooth(self._samples_per_s, metrics["perf/samples_per_second"])
            metrics["perf/samples_per_second"] = self._samples_per_s
        if self._sampler is not None:
            metrics = {**self._sampler.sample(), **metrics}
        line = format_status(step, self.total_steps, metrics, self.eta_seconds(step), self._cores, self._width)
        if self.is_tty:
            self._log("\r" + line.ljust(self._shown_len), end="", flush=True)
            self._shown_len = len(line)
        else:
            self._log(line)
        self._last = (step, now)
        self._pending = None

    def close(self) -> None:
        """Show the latest state if it was held back, and end the live line."""
        if self._pending is not None:
            self._show(*self._pending, self._clock())
        if self.is_tty and self._shown_len:
            self._log("", flush=True)  # newline: later output starts on its own line
            self._shown_len = 0


# --------------------------------------------------------------------------- throughput drops


class ThroughputWatch:
    """Warns once when samples/s falls well below its own earlier median.

    The baseline is the median of the last `window` healthy readings (the
    first `warmup` readings are ignored: they include start-up and compile).
    Readings taken during a drop do not enter the baseline; the watch re-arms
    once throughput is back above `recover_ratio` of it.
    """

    def __init__(
        self, drop_ratio: float = 0.6, recover_ratio: float = 0.8,
        min_history: int = 5, window: int = 50, warmup: int = 1,
    ) -> None:
        self.drop_ratio, self.recover_ratio = drop_ratio, recover_ratio
        self.min_history, self.warmup = min_history, warmup
        self.history: deque[float] = deque(maxlen=window)
        self.all_readings: list[float] = []
        self._seen = 0
        self._in_drop = False

    def check(self, current: float, step: int | None = None) -> str | None:
        """Record one samples/s reading; a warning string on the first reading of a drop."""
        self._seen += 1
        self.all_readings.append(current)
        if self._seen <= self.warmup:
            return None
        if len(self.history) < self.min_history:
            self.history.append(current)
            return None
        median = statistics.median(self.history)
        if self._in_drop:
            if current >= self.recover_ratio * median:
                self._in_drop = False
                self.history.append(current)
            return None
        if current < self.drop_ratio * median:
            self._in_drop = True
            at = f" at step {step}" if step is not None else ""
            return (
                f"throughput fell to {current:.0f} samples/s{at}, {100 * current / median:.0f}% of "
                f"its earlier median {median:.0f} samples/s: the CPU may be throttling (heat, "
                f"battery saver), another program may be busy, or memory may be swapping"
            )
        self.history.append(current)
        return None
