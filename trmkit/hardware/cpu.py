"""The CPU: model, ISA features (cpuinfo on Linux, sysctl on macOS) and the cores this process can use.

Effective cores = min(logical cores, CPUs in the affinity mask, floor of the cgroup CPU
quota), at least 1. The quota is floored, not rounded up: OpenMP kernels wait at barriers for
the slowest thread, so 2 threads on a 1.5-core quota get throttled every period and run
slower than 1.
"""

from __future__ import annotations

import math
import os
import platform
import re
from collections.abc import Iterable

import psutil

from trmkit.hardware.cgroups import find_cgroups, read_cpu_quota
from trmkit.hardware.info import CgroupPaths, CpuFeatures, CpuInfo
from trmkit.hardware.readers import read_text, run_command, under_root
from trmkit.hardware.software import torch_kernels

_SYSCTL_NAMES = (
    "machdep.cpu.brand_string", "hw.optional.arm64", "hw.optional.neon", "hw.optional.AdvSIMD",
    "hw.optional.avx2_0", "hw.optional.avx512f", "hw.optional.arm.FEAT_BF16", "sysctl.proc_translated",
)


def parse_cpuinfo_model(text: str | None) -> str | None:
    """CPU model from /proc/cpuinfo ("model name" on x86, "Model"/"Hardware" on some ARM boards)."""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text or "", re.MULTILINE)
        if match and match.group(1).strip():
            return match.group(1).strip()
    return None


def parse_cpuinfo_flags(text: str | None) -> tuple[str, ...]:
    """Feature flags of the first CPU ("flags" on x86, "Features" on ARM)."""
    match = re.search(r"^(?:flags|Features)\s*:(.*)$", text or "", re.MULTILINE)
    return tuple(match.group(1).split()) if match else ()


def features_from_flags(flags: Iterable[str], machine: str) -> CpuFeatures:
    """CpuFeatures from Linux cpuinfo flags; all None when there are no flags."""
    have = set(flags)
    if not have:
        return CpuFeatures(None, None, None, None, None, None, None, None, "unknown")
    return CpuFeatures(
        avx2="avx2" in have, avx512f="avx512f" in have, avx512_bf16="avx512_bf16" in have,
        amx_bf16="amx_bf16" in have, amx_tile="amx_tile" in have,
        neon=bool(have & {"asimd", "neon"}), arm_bf16="bf16" in have and machine.lower() in ("aarch64", "arm64"),
        apple_silicon=False, source="/proc/cpuinfo",
    )


def parse_sysctl(text: str | None) -> dict[str, str]:
    """`sysctl name ...` output ("name: value" lines) as a dict."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def features_from_sysctl(values: dict[str, str], machine: str) -> CpuFeatures:
    """CpuFeatures from macOS sysctl values; all None when sysctl gave nothing."""
    if not values:
        return CpuFeatures(None, None, None, None, None, None, None, None, "unknown")
    on = {k for k, v in values.items() if v == "1"}
    arm = machine == "arm64" or "hw.optional.arm64" in on
    return CpuFeatures(
        avx2="hw.optional.avx2_0" in on, avx512f="hw.optional.avx512f" in on, avx512_bf16=False,
        amx_bf16=False, amx_tile=False,  # Apple's matrix unit is not Intel AMX
        neon=arm or bool(on & {"hw.optional.neon", "hw.optional.AdvSIMD"}),
        arm_bf16="hw.optional.arm.FEAT_BF16" in on, apple_silicon=arm, source="sysctl",
    )


def effective_cores(logical: int, affinity: int | None, quota: float | None) -> tuple[int, str]:
    """Cores this process can keep busy, and which bound set it (see module docstring)."""
    best, source = max(1, logical), "logical cores"
    if affinity is not None and affinity < best:
        best, source = affinity, "CPU affinity"
    if quota is not None and max(1, math.floor(quota)) < best:
        best, source = max(1, math.floor(quota)), "cgroup CPU quota"
    return max(1, best), source


def _affinity_cores() -> int | None:
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            return None
    return None


def probe_cpu(root: str = "/", system: str | None = None, machine: str | None = None,
              cgroups: CgroupPaths | None = None) -> CpuInfo:
    """Cores, model and ISA features (cpuinfo under `root` on Linux, sysctl on macOS)."""
    system, machine = system or platform.system(), machine or platform.machine()
    rosetta = None
    if system == "Darwin":
        values = parse_sysctl(run_command(["sysctl", *_SYSCTL_NAMES]))
        model, features = values.get("machdep.cpu.brand_string"), features_from_sysctl(values, machine)
        rosetta = values.get("sysctl.proc_translated") == "1" if values else None
    else:
        text = read_text(under_root(root, "/proc/cpuinfo"))
        model, features = parse_cpuinfo_model(text), features_from_flags(parse_cpuinfo_flags(text), machine)
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    affinity = _affinity_cores()
    quota = read_cpu_quota((cgroups or find_cgroups(root)).cpu)
    cores, source = effective_cores(logical, affinity, quota)
    return CpuInfo(model or platform.processor() or "unknown", psutil.cpu_count(logical=False), logical,
                   affinity, quota, cores, source, features, rosetta)


def native_bf16(features: CpuFeatures, kernels: str | None = None) -> bool:
    """Whether bf16 runs natively here: the CPU has bf16 instructions (AVX512-BF16, AMX or ARM BF16)
    and, on x86, torch's kernels may use them. Without them torch emulates bf16, slower than float32,
    so it is not even measured. `kernels`: the vector ISA torch dispatches to (default: asked of
    torch); kernels capped below AVX-512 (ATEN_CPU_CAPABILITY=avx2) or oneDNN capped below its bf16
    ISA (ONEDNN_MAX_CPU_ISA=AVX2) emulate bf16 whatever the CPU has."""
    if features.arm_bf16:
        return True
    if not (features.avx512_bf16 or features.amx_bf16):
        return False
    kernels = torch_kernels() if kernels is None else kernels
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    onednn_bf16 = onednn == "ALL" or "BF16" in onednn or "AMX" in onednn
    return (kernels is None or kernels.upper().startswith("AVX512")) and onednn_bf16
