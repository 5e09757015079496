"""The process's peak resident memory as the kernel sees it, and per phase of a run.

`PeakMeter` answers two questions:

- What was the peak RSS of the whole process so far? The kernel's high-water
  mark: VmHWM of /proc/self/status on Linux (the number `getrusage`'s
  ru_maxrss and `/usr/bin/time -v` report), ru_maxrss elsewhere. The meter
  never resets that mark (/proc/self/clear_refs would also reset what
  `time -v` reports, hiding the peak from the user's own tools).
- What was the peak of one phase (a training step, an evaluation, a
  checkpoint save)? A background thread reads the current RSS every
  `interval` seconds (5 ms: /proc/self/statm through an open descriptor, a few
  microseconds a read; psutil elsewhere). A phase's peak is the largest of
  those samples within it and, when the kernel's mark rose during the phase,
  that mark: the rise can only have happened then, so the phase peak is exact
  whenever the phase set a new process record, and sampled otherwise.

Only the standard library and psutil are imported; nothing runs at import time.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Iterator

import psutil

GiB = 1 << 30
SAMPLE_SECONDS = 0.005


def kernel_peak() -> int | None:
    """VmHWM (Linux) or ru_maxrss (macOS: bytes; other Unix: KiB) of this process, in bytes.

    On Linux VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's high-water mark (the
    kernel carries it across fork and exec), so a small child of a large process would report the
    parent's peak. VmHWM belongs to the process's own address space."""
    try:
        with open("/proc/self/status") as f:
            found = re.search(r"VmHWM:\s+(\d+)\s*kB", f.read())
        if found:
            return int(found.group(1)) * 1024
    except OSError:
        pass
    peak = _maxrss(children=False)
    if peak is None:  # Windows
        return int(getattr(psutil.Process().memory_info(), "peak_wset", 0)) or None
    return peak


def children_peak() -> int:
    """ru_maxrss of this process's finished children (the largest one), in bytes; 0 if none."""
    return _maxrss(children=True) or 0


def _maxrss(children: bool) -> int | None:
    """getrusage's ru_maxrss in bytes (macOS reports bytes, other Unix KiB); None without getrusage."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class RssReader:
    """Current RSS in bytes: /proc/self/statm through a kept descriptor, else psutil."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd, self._proc = None, psutil.Process()

    def __call__(self) -> int:
        if self._fd is not None:
            return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
        return int(self._proc.memory_info().rss)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class PhasePeak:
    """The largest peak seen in phases of one name, and how many there were."""

    peak: int = 0
    count: int = 0
    exact: bool = False  # True when the kernel's mark rose in the phase that set `peak`
    start: int = 0  # RSS when the phase that set `peak` began (memory it found already resident)


@dataclass
class PeakMeter:
    """Process peak (the kernel's) and per-phase peaks (sampled + the kernel's mark)."""

    interval: float = SAMPLE_SECONDS
    phases: dict[str, PhasePeak] = field(default_factory=dict)
    last: int = 0  # peak of the phase that ended last (bytes)

    def __post_init__(self) -> None:
        self._rss = RssReader()
        self._window = self._rss()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "PeakMeter":
        """Start the sampling thread (a daemon: it never keeps the process alive)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample, name="trmkit-peak-meter", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            rss = self._rss()
            if rss > self._window:
                self._window = rss

    def rss(self) -> int:
        return self._rss()

    def process_peak(self) -> int:
        """The kernel's high-water mark of this process's RSS (bytes), at least any sample seen."""
        return max(kernel_peak() or 0, self._window, max((p.peak for p in self.phases.values()), default=0))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure the peak RSS of the enclosed code as phase `name`."""
        before = kernel_peak()
        start = self._window = self._rss()
        try:
            yield
        finally:
            self.last = self._close(name, before, start)

    def _close(self, name: str, before: int | None, start: int) -> int:
        after = kernel_peak()
        sampled = max(self._window, self._rss())
        rose = before is not None and after is not None and after > before
        peak = max(sampled, after) if rose else sampled
        entry = self.phases.setdefault(name, PhasePeak())
        entry.count += 1
        if peak >= entry.peak:
            entry.peak, entry.exact, entry.start = peak, rose, start
        return peak

    def report(self) -> dict[str, dict]:
        """{'process': {...}, phase: {'peak_gb', 'start_gb', 'count', 'exact'}} for summaries."""
        out = {name: {"peak_gb": round(p.peak / GiB, 3), "start_gb": round(p.start / GiB, 3), "count": p.count,
                      "exact": p.exact}
               for name, p in self.phases.items()}
        kids = children_peak()
        out["process"] = {"peak_gb": round(self.process_peak() / GiB, 3),
                          "source": "VmHWM" if sys.platform.startswith("linux") else "ru_maxrss"}
        if kids:
            out["process"]["children_peak_gb"] = round(kids / GiB, 3)
        return out
