"""What `trmkit hw` prints: the probe as lines for people, and byte sizes as text."""

from __future__ import annotations

from trmkit.hardware.info import CpuInfo, HardwareInfo, MemoryInfo, ThermalInfo, TorchInfo
from trmkit.hardware.memory import effective_available


def format_bytes(n: int | float | None) -> str:
    """1536 -> "1.5 KiB"; None -> "unknown"."""
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _yes(flag: bool | None) -> str:
    return "unknown" if flag is None else ("yes" if flag else "no")


def _cpu_lines(cpu: CpuInfo) -> list[str]:
    f = cpu.features
    quota = f"{cpu.quota_cores:g}" if cpu.quota_cores is not None else "none"
    amx = None if f.amx_tile is None else (f.amx_tile and bool(f.amx_bf16))
    lines = [
        f"CPU        {cpu.model}" + (" (x86 Python under Rosetta 2: install an arm64 Python)" if cpu.rosetta else ""),
        f"cores      {cpu.physical_cores or 'unknown'} physical, {cpu.logical_cores} logical, "
        f"affinity {cpu.affinity_cores or 'unknown'}, cgroup quota {quota}"
        f" -> {cpu.effective_cores} effective ({cpu.effective_source})",
        f"ISA        AVX2 {_yes(f.avx2)}, AVX-512F {_yes(f.avx512f)}, AVX512-BF16 {_yes(f.avx512_bf16)}, "
        f"AMX {_yes(amx)}, NEON {_yes(f.neon)}, ARM BF16 {_yes(f.arm_bf16)}, "
        f"Apple Silicon {_yes(f.apple_silicon)} (from {f.source})",
    ]
    return lines


def _memory_lines(mem: MemoryInfo) -> list[str]:
    cg = mem.cgroup
    if cg is None:
        cgroup = "cgroup none found"
    else:
        cgroup = (f"cgroup v{cg.version} {format_bytes(cg.limit) if cg.limit else 'unlimited'}, "
                  f"usage {format_bytes(cg.current)} (reclaimable cache {format_bytes(cg.inactive_file)})")
    pressure = f"{mem.pressure_some_avg10:.2f}%" if mem.pressure_some_avg10 is not None else "unknown"
    return [
        f"memory     {format_bytes(mem.total)} total, {format_bytes(mem.available)} available, "
        f"swap {format_bytes(mem.swap_used)} used of {format_bytes(mem.swap_total)}",
        f"limit      {format_bytes(mem.limit)} (set by {mem.limit_source}); {cgroup}; "
        f"RLIMIT_AS {format_bytes(mem.rlimit_as) if mem.rlimit_as else 'unlimited'}",
        f"usable     {format_bytes(effective_available(mem))} now; this process RSS {format_bytes(mem.rss)}, "
        f"memory pressure (some avg10) {pressure}",
    ]


def _torch_lines(t: TorchInfo) -> list[str]:
    if t.version is None:
        return ["torch      not installed"]
    cuda = f"yes ({t.cuda_device}, {format_bytes(t.cuda_memory)})" if t.cuda_available else "no"
    return [
        f"torch      {t.version}: MKL {_yes(t.mkl)}, oneDNN {_yes(t.mkldnn)}, "
        f"CPU kernels {t.cpu_capability or 'unknown'}, parallel backend {t.parallel_backend or 'unknown'}, "
        f"{t.num_threads} threads ({t.num_interop_threads} inter-op)",
        f"GPU        CUDA {cuda}, MPS {_yes(t.mps_available)}",
    ]


def _thermal_line(th: ThermalInfo) -> str:
    temp = "unknown"
    if th.cpu_temp_c is not None:
        temp = f"CPU {th.cpu_temp_c:.0f} °C (hottest of {len(th.sensors)} sensors)"
    freq = "frequency unknown"
    if th.freq_ratio is not None:
        freq = (f"frequency {th.cur_freq_mhz:.0f}/{th.max_freq_mhz:.0f} MHz = {th.freq_ratio:.0%} of max "
                "(low is normal when idle)")
    extra = ""
    if th.throttle_count is not None:
        extra += f"; {th.throttle_count} throttle events since boot"
    if th.speed_limit_pct is not None:
        extra += f"; CPU speed limit {th.speed_limit_pct}%"
    return f"thermal    {temp}; {freq}{extra}"


def format_report(info: HardwareInfo) -> str:
    """Multi-line human-readable report (what `trmkit hw` prints)."""
    p = info.platform
    lines = [f"OS         {p.system} {p.release} ({p.machine}), Python {p.python}"]
    lines += _cpu_lines(info.cpu) + _memory_lines(info.memory) + _torch_lines(info.torch)
    lines.append(_thermal_line(info.thermal))
    return "\n".join(lines)
