"""Memory: the limit this process runs under, what it can still allocate, and its peak RSS.

- The limit is min(physical RAM, cgroup v2 memory.max or v1 memory.limit_in_bytes over this
  process's cgroup and its ancestors, soft RLIMIT_AS) (`probe_memory`).
- `effective_available()` counts cgroup usage minus `inactive_file`, the reclaimable page
  cache (as `docker stats` does); otherwise reading a memory-mapped dataset would look like a
  leak. RLIMIT_AS limits *virtual* size, so its headroom is rlimit - VMS, and a torch process
  reserves far more address space than it touches.
- `read_memory_now()` is the cheap sampler for every training step.

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

from trmkit.hardware.cgroups import CGROUP_MEMORY_FILES, UNLIMITED, find_cgroups, read_cgroup_memory
from trmkit.hardware.info import CgroupDir, CgroupMemory, CgroupPaths, HardwareInfo, MemoryInfo, MemorySample
from trmkit.hardware.readers import parse_stat_value, read_int, read_text, under_root

GiB = 1 << 30
SAMPLE_SECONDS = 0.005


# ----------------------------------------------------------------------------- limits and headroom

def read_rlimit_as() -> int | None:
    """Soft RLIMIT_AS in bytes, or None when unlimited or unsupported (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 or soft >= UNLIMITED else soft


def effective_limit(total: int, cgroup: CgroupMemory | None, rlimit_as: int | None) -> tuple[int, str]:
    """min(physical RAM, cgroup limit, RLIMIT_AS) and the name of the bound that set it."""
    limit, source = total, "physical RAM"
    if cgroup is not None and cgroup.limit is not None and cgroup.limit < limit:
        limit, source = cgroup.limit, f"cgroup v{cgroup.version} {CGROUP_MEMORY_FILES[cgroup.version][0]}"
    if rlimit_as is not None and rlimit_as < limit:
        limit, source = rlimit_as, "RLIMIT_AS"
    return limit, source


def parse_pressure(text: str | None) -> float | None:
    """"some avg10" from a PSI file such as /proc/pressure/memory."""
    match = re.search(r"^some\b.*?\bavg10=([0-9.]+)", text or "", re.MULTILINE)
    return float(match.group(1)) if match else None


def _pressure_path(root: str, cg: CgroupDir | None) -> str | None:
    """The cgroup's memory.pressure (v2), else the system-wide /proc/pressure/memory."""
    candidates = [os.path.join(cg.path, "memory.pressure")] if cg is not None and cg.version == 2 else []
    for path in candidates + [under_root(root, "/proc/pressure/memory")]:
        if read_text(path) is not None:
            return path
    return None


def probe_memory(root: str = "/", cgroups: CgroupPaths | None = None) -> MemoryInfo:
    """RAM, swap, this process's usage and the limits it runs under."""
    cg_dir = (cgroups or find_cgroups(root)).memory
    cgroup, rlimit_as = read_cgroup_memory(cg_dir), read_rlimit_as()
    vm, swap, proc = psutil.virtual_memory(), psutil.swap_memory(), psutil.Process().memory_info()
    limit, source = effective_limit(vm.total, cgroup, rlimit_as)
    pressure_path = _pressure_path(root, cg_dir)
    return MemoryInfo(
        total=vm.total, available=vm.available, limit=limit, limit_source=source, cgroup=cgroup,
        rlimit_as=rlimit_as, rss=proc.rss, vms=proc.vms, swap_total=swap.total, swap_used=swap.used,
        pressure_some_avg10=parse_pressure(read_text(pressure_path)), pressure_path=pressure_path,
    )


def parse_statm(text: str | None, page_size: int) -> tuple[int, int] | None:
    """(rss, vms) in bytes from /proc/self/statm ("size resident shared ..." in pages)."""
    parts = (text or "").split()
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[1]) * page_size, int(parts[0]) * page_size


def _process_memory(root: str) -> tuple[int, int]:
    """(rss, vms) of this process: /proc/self/statm, else psutil."""
    found = None
    if hasattr(os, "sysconf"):  # not on Windows
        found = parse_statm(read_text(under_root(root, "/proc/self/statm"), 256), os.sysconf("SC_PAGE_SIZE"))
    if found is None:
        info = psutil.Process().memory_info()
        found = info.rss, info.vms
    return found


def _system_available(root: str) -> int:
    """MemAvailable from /proc/meminfo, else psutil."""
    kib = parse_stat_value(read_text(under_root(root, "/proc/meminfo"), 8192), "MemAvailable")
    if kib is not None:
        return kib * 1024
    return psutil.virtual_memory().available


def read_memory_now(memory: MemoryInfo | None = None, root: str = "/") -> MemorySample:
    """Cheap memory reading for every training step.

    Pass the `MemoryInfo` from `probe()` so the cgroup directory and the
    limits are not looked up again; without it this probes first (~ms).
    """
    if memory is None:
        memory = probe_memory(root)
    rss, vms = _process_memory(root)
    cg, current, inactive = memory.cgroup, None, None
    if cg is not None:
        _limit_file, current_file, inactive_key = CGROUP_MEMORY_FILES[cg.version]
        current = read_int(os.path.join(cg.dir, current_file))
        inactive = parse_stat_value(read_text(os.path.join(cg.dir, "memory.stat"), 16384), inactive_key)
    return MemorySample(
        rss=rss, vms=vms, available=_system_available(root),
        cgroup_limit=cg.limit if cg is not None else None, cgroup_current=current,
        cgroup_inactive_file=inactive, rlimit_as=memory.rlimit_as,
        pressure_some_avg10=parse_pressure(read_text(memory.pressure_path, 512)),
    )


def effective_available(info_or_limits: HardwareInfo | MemoryInfo | MemorySample) -> int:
    """Bytes this process can still allocate: the smallest headroom among
    system available, cgroup limit - (usage - inactive_file), RLIMIT_AS - VMS.

    Pure arithmetic on the given snapshot; pass `read_memory_now(...)` for a fresh value.
    """
    m = info_or_limits.memory if isinstance(info_or_limits, HardwareInfo) else info_or_limits
    if isinstance(m, MemoryInfo):
        cg = m.cgroup
        m = MemorySample(m.rss, m.vms, m.available, cg and cg.limit, cg and cg.current,
                         cg and cg.inactive_file, m.rlimit_as, m.pressure_some_avg10)
    headroom = [m.available]
    if m.cgroup_limit is not None:
        used = m.cgroup_current - (m.cgroup_inactive_file or 0) if m.cgroup_current is not None else m.rss
        headroom.append(m.cgroup_limit - used)
    if m.rlimit_as is not None:
        headroom.append(m.rlimit_as - m.vms)
    return max(0, min(headroom))


# ----------------------------------------------------------------------------- peak RSS

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
