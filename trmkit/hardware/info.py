"""What a probe of the machine found: frozen dataclasses, one per part (cgroups, CPU, memory,
torch, thermal, platform) and `HardwareInfo`, the whole snapshot."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CgroupDir:
    """A cgroup directory of this process and the mount point above it."""

    path: str  # directory holding the controller files, e.g. /sys/fs/cgroup/user.slice/x.scope
    top: str  # mount point; limits are looked up from `path` up to here
    version: int  # 1 or 2


@dataclass(frozen=True)
class CgroupPaths:
    """Where this process's memory and cpu controllers live (None: no cgroup found)."""

    memory: CgroupDir | None
    cpu: CgroupDir | None


@dataclass(frozen=True)
class CpuFeatures:
    """Instruction-set features that change which kernels torch can use; None = unknown."""

    avx2: bool | None
    avx512f: bool | None
    avx512_bf16: bool | None
    amx_bf16: bool | None
    amx_tile: bool | None
    neon: bool | None  # ARM Advanced SIMD ("asimd" on aarch64 Linux)
    arm_bf16: bool | None  # ARMv8.6 BF16 instructions (Graviton3, Apple M2+)
    apple_silicon: bool | None
    source: str  # "/proc/cpuinfo", "sysctl" or "unknown"


@dataclass(frozen=True)
class CpuInfo:
    """Core counts (what exists and what this process may use), model and features."""

    model: str  # "unknown" when unreadable
    physical_cores: int | None
    logical_cores: int
    affinity_cores: int | None  # len(os.sched_getaffinity(0)) where available
    quota_cores: float | None  # cgroup CPU quota in cores; None = no quota
    effective_cores: int  # what trmkit should size its thread pool to
    effective_source: str  # which of the above set effective_cores
    features: CpuFeatures
    rosetta: bool | None  # x86 Python translated on Apple Silicon (macOS only)


@dataclass(frozen=True)
class CgroupMemory:
    """Memory controller state of the cgroup whose limit applies to this process."""

    version: int
    dir: str  # directory whose limit applies (the process's own when unlimited)
    limit: int | None  # bytes; None = unlimited
    current: int | None  # bytes charged to `dir` now
    inactive_file: int | None  # reclaimable page cache included in `current`


@dataclass(frozen=True)
class MemoryInfo:
    """Memory sizes and the limit this process runs under, all in bytes."""

    total: int  # physical RAM
    available: int  # system-wide available (psutil) at probe time
    limit: int  # min(total, cgroup limit, RLIMIT_AS)
    limit_source: str  # "physical RAM", "cgroup v2 memory.max", "cgroup v1 memory.limit_in_bytes", "RLIMIT_AS"
    cgroup: CgroupMemory | None
    rlimit_as: int | None  # soft RLIMIT_AS; None = unlimited
    rss: int  # this process, at probe time
    vms: int
    swap_total: int
    swap_used: int
    pressure_some_avg10: float | None  # % of time some task stalled on memory, last 10 s
    pressure_path: str | None  # file read for the pressure value


@dataclass(frozen=True)
class MemorySample:
    """One cheap reading of memory state, taken by `read_memory_now()` (bytes)."""

    rss: int
    vms: int
    available: int  # system-wide
    cgroup_limit: int | None
    cgroup_current: int | None
    cgroup_inactive_file: int | None
    rlimit_as: int | None
    pressure_some_avg10: float | None


@dataclass(frozen=True)
class TorchInfo:
    """What the installed torch build offers; None where torch is missing or silent."""

    version: str | None
    mkl: bool | None
    mkldnn: bool | None  # oneDNN
    parallel_backend: str | None  # "OpenMP", "native thread pool", "TBB"
    openmp: str | None  # e.g. "OpenMP 201511 (a.k.a. OpenMP 4.5)"
    num_threads: int | None
    num_interop_threads: int | None
    cpu_capability: str | None  # vector ISA ATen dispatches to: "AVX512", "AVX2", "DEFAULT", ...
    cuda_available: bool
    cuda_device: str | None
    cuda_memory: int | None  # bytes
    mps_available: bool


@dataclass(frozen=True)
class ThermalSensor:
    """One temperature reading."""

    name: str  # zone type or "hwmon name/label", e.g. "x86_pkg_temp", "coretemp/Package id 0"
    temp_c: float
    path: str


@dataclass(frozen=True)
class ThermalInfo:
    """Temperatures and frequency readable without root; None = unknown."""

    sensors: tuple[ThermalSensor, ...]
    cpu_temp_c: float | None  # hottest CPU-like sensor (hottest of all when none looks like a CPU)
    cur_freq_mhz: float | None  # mean scaling_cur_freq over CPUs
    max_freq_mhz: float | None  # mean cpuinfo_max_freq over CPUs
    freq_ratio: float | None  # cur/max; meaningful only under load
    throttle_count: int | None  # Intel thermal_throttle events since boot, summed over cores
    speed_limit_pct: int | None  # macOS `pmset -g therm` CPU_Speed_Limit


@dataclass(frozen=True)
class ThermalSample:
    """One cheap thermal reading, taken by `read_thermal()`."""

    max_temp_c: float | None
    freq_ratio: float | None
    throttle_count: int | None
    speed_limit_pct: int | None


@dataclass(frozen=True)
class PlatformInfo:
    """Operating system, architecture and Python."""

    system: str  # "Linux", "Darwin", "Windows"
    release: str
    machine: str  # "x86_64", "arm64", "aarch64"
    python: str
    libc: str = ""  # "glibc 2.36"; empty where Python cannot tell (macOS, Windows, musl)


@dataclass(frozen=True)
class HardwareInfo:
    """Everything `probe()` found."""

    platform: PlatformInfo
    cpu: CpuInfo
    memory: MemoryInfo
    torch: TorchInfo
    thermal: ThermalInfo

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable dict (tuples become lists)."""
        return dataclasses.asdict(self)
