"""Probe the machine trmkit trains on: cores, ISA features, memory limits, torch build, thermal.

`probe()` returns a frozen `HardwareInfo` snapshot (`to_dict()` for JSON,
`format_report()` for people). `read_memory_now()` and `read_thermal()` are
the cheap samplers for use during training (memory guard every step,
thermal every few seconds).

Nothing runs at import time. The rooms:

    info.py       the dataclasses a probe fills (HardwareInfo and its parts)
    readers.py    reading files and commands: text or None, never an exception
    cgroups.py    this process's cgroups: their memory and CPU limits
    cpu.py        model, ISA features, effective cores
    memory.py     the memory limit and headroom; the peak meter (PeakMeter, kernel_peak)
    thermal.py    temperatures, frequency, throttling
    software.py   the torch build and the platform
    allocator.py  glibc malloc: keep freed memory, return it, trim the heap
    report.py     what `trmkit hw` prints; format_bytes

This module re-exports the names the trainer and the commands use.
"""

from __future__ import annotations

from trmkit.hardware.allocator import trim_heap
from trmkit.hardware.cgroups import find_cgroups
from trmkit.hardware.cpu import probe_cpu
from trmkit.hardware.info import HardwareInfo, MemoryInfo, MemorySample
from trmkit.hardware.memory import effective_available, probe_memory, read_memory_now
from trmkit.hardware.report import format_report
from trmkit.hardware.software import probe_platform, probe_torch
from trmkit.hardware.thermal import probe_thermal, read_thermal

__all__ = ["HardwareInfo", "MemoryInfo", "MemorySample", "effective_available", "format_report", "probe",
           "read_memory_now", "read_thermal", "trim_heap"]


def probe(root: str = "/") -> HardwareInfo:
    """Probe everything once (imports torch; ~1 s the first time, mostly that import)."""
    plat = probe_platform()
    cgroups = find_cgroups(root)
    torch_info = probe_torch()  # first, so the RSS below includes torch itself
    return HardwareInfo(
        platform=plat,
        cpu=probe_cpu(root, plat.system, plat.machine, cgroups),
        memory=probe_memory(root, cgroups),
        torch=torch_info,
        thermal=probe_thermal(root, plat.system),
    )
