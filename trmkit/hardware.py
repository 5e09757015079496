"""Probe the machine trmkit trains on: cores, ISA features, memory limits, torch build, thermal.

`probe()` returns a frozen `HardwareInfo` snapshot (`to_dict()` for JSON,
`format_report()` for people). `read_memory_now()` and `read_thermal()` are
the cheap samplers for use during training (memory guard every step,
thermal every few seconds).

Nothing runs at import time. Every parser takes text or a `root` directory
(default "/") so tests can feed fake /proc and /sys trees; every reader
returns None for anything it cannot read, and the report prints "unknown".

Choices worth knowing about:
- Effective cores = min(logical cores, CPUs in the affinity mask, floor of
  the cgroup CPU quota), at least 1. The quota is floored, not rounded up:
  OpenMP kernels wait at barriers for the slowest thread, so 2 threads on a
  1.5-core quota get throttled every period and run slower than 1.
- The memory limit is min(physical RAM, cgroup v2 memory.max or v1
  memory.limit_in_bytes over this process's cgroup and its ancestors,
  soft RLIMIT_AS). Values of 2**60 or more (v1 writes 9223372036854771712)
  mean "unlimited".
- `effective_available()` counts cgroup usage minus `inactive_file`, the
  reclaimable page cache (as `docker stats` does); otherwise reading a
  memory-mapped dataset would look like a leak.
- RLIMIT_AS limits *virtual* size, so its headroom is rlimit - VMS, and a
  torch process reserves far more address space than it touches.
- CPU frequency is reported as current/maximum, not as "throttled": an idle
  core sits far below its turbo maximum, so the ratio only means something
  while training runs.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import platform
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psutil

_UNLIMITED = 1 << 60  # at or above this, a byte limit means "no limit"
_SANE_TEMP_C = (-40.0, 150.0)  # readings outside are disabled or broken sensors
# Name fragments of sensors that measure the CPU package or cores.
_CPU_SENSOR_HINTS = ("x86_pkg", "coretemp", "k10temp", "zenpower", "cpu", "soc", "package", "tctl", "tdie")
# Per cgroup version: limit file, usage file, reclaimable key in memory.stat.
_CGROUP_MEMORY_FILES = {
    2: ("memory.max", "memory.current", "inactive_file"),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}
_SYSCTL_NAMES = (
    "machdep.cpu.brand_string", "hw.optional.arm64", "hw.optional.neon", "hw.optional.AdvSIMD",
    "hw.optional.avx2_0", "hw.optional.avx512f", "hw.optional.arm.FEAT_BF16", "sysctl.proc_translated",
)


# ----------------------------------------------------------------------------- dataclasses

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


# ----------------------------------------------------------------------------- file helpers

def _join(root: str, path: str) -> str:
    """`path` (absolute on the real system) placed under `root`."""
    return os.path.join(root, path.lstrip("/"))


def _read_text(path: str | None, limit: int = 1 << 20) -> str | None:
    """File contents as text, or None if missing or unreadable."""
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _to_int(text: str | None) -> int | None:
    """First whitespace-separated token as int, or None."""
    if not text or not text.split():
        return None
    try:
        return int(text.split()[0])
    except ValueError:
        return None


def _read_int(path: str) -> int | None:
    return _to_int(_read_text(path))


def _run(cmd: list[str], timeout: float = 2.0) -> str | None:
    """Stdout of `cmd` (even when it exits non-zero), or None if it cannot run."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


# ----------------------------------------------------------------------------- cgroups

@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy (from /proc/self/mountinfo)."""

    point: str  # mount point, e.g. /sys/fs/cgroup/memory
    root: str  # cgroup path that appears at the mount point ("/" unless namespaced bind mount)
    version: int
    controllers: tuple[str, ...]  # v1 only, e.g. ("cpu", "cpuacct")


def parse_proc_cgroup(text: str) -> list[tuple[int, tuple[str, ...], str]]:
    """Lines of /proc/self/cgroup as (hierarchy id, controllers, path); v2 is (0, (), path)."""
    entries = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        entries.append((int(parts[0]), controllers, parts[2]))
    return entries


def parse_cgroup_mounts(text: str) -> list[CgroupMount]:
    """cgroup and cgroup2 mounts from /proc/self/mountinfo text."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point, root = (f.replace("\\040", " ") for f in (fields[4], fields[3]))
        if tail[0] == "cgroup2":
            mounts.append(CgroupMount(point, root, 2, ()))
        else:
            opts = tuple(o for o in tail[2].split(",") if o not in ("rw", "ro") and "=" not in o)
            mounts.append(CgroupMount(point, root, 1, opts))
    return mounts


def _default_mounts() -> list[CgroupMount]:
    """Usual mount points, for when /proc/self/mountinfo is unreadable."""
    v1 = [CgroupMount(f"/sys/fs/cgroup/{d}", "/", 1, tuple(d.split(","))) for d in ("memory", "cpu", "cpu,cpuacct")]
    return [CgroupMount("/sys/fs/cgroup", "/", 2, ()), CgroupMount("/sys/fs/cgroup/unified", "/", 2, ())] + v1


def _resolve_dir(root: str, mount: CgroupMount, cg_path: str, marker: str) -> str | None:
    """The directory for `cg_path` under `mount` if it holds `marker`; else the mount point if it does."""
    rel = cg_path
    if mount.root != "/" and (rel == mount.root or rel.startswith(mount.root + "/")):
        rel = rel[len(mount.root):]
    base = _join(root, mount.point)
    for cand in (_join(base, rel), base):
        if os.path.exists(os.path.join(cand, marker)):
            return os.path.normpath(cand)
    return None


def _serves(version: int, controllers: tuple[str, ...], controller: str) -> bool:
    """Whether a v1/v2 hierarchy with these controllers can hold `controller` (v2 holds all)."""
    return version == 2 or controller in controllers


def _find_controller(root: str, entries: list[tuple[int, tuple[str, ...], str]], mounts: list[CgroupMount],
                     controller: str, markers: dict[int, str]) -> CgroupDir | None:
    """First v2, then v1 directory of this process that has the controller's files."""
    for version in (2, 1):
        for hier, ctrls, cg_path in entries:
            entry_version = 2 if hier == 0 and not ctrls else 1
            if entry_version != version or not _serves(version, ctrls, controller):
                continue
            for mount in mounts:
                if mount.version != version or not _serves(version, mount.controllers, controller):
                    continue
                found = _resolve_dir(root, mount, cg_path, markers[version])
                if found:
                    return CgroupDir(found, os.path.normpath(_join(root, mount.point)), version)
    return None


def find_cgroups(root: str = "/") -> CgroupPaths:
    """Locate this process's memory and cpu cgroup directories under `root`."""
    text = _read_text(_join(root, "/proc/self/cgroup"))
    if text is None:
        return CgroupPaths(None, None)
    entries = parse_proc_cgroup(text)
    mounts = parse_cgroup_mounts(_read_text(_join(root, "/proc/self/mountinfo")) or "") or _default_mounts()
    memory = _find_controller(root, entries, mounts, "memory", {2: "memory.max", 1: "memory.limit_in_bytes"})
    cpu = _find_controller(root, entries, mounts, "cpu", {2: "cpu.max", 1: "cpu.cfs_quota_us"})
    return CgroupPaths(memory, cpu)


def _walk_up(path: str, top: str) -> list[str]:
    """`path` and its parents up to and including `top` (just `path` if it is not under `top`)."""
    dirs = [path]
    while path != top and path.startswith(top + os.sep):
        path = os.path.dirname(path)
        dirs.append(path)
    return dirs


def parse_memory_limit(text: str | None) -> int | None:
    """Bytes from memory.max / memory.limit_in_bytes; None for "max", huge values or garbage."""
    if text is None or text.strip() == "max":
        return None
    value = _to_int(text)
    return value if value is not None and 0 < value < _UNLIMITED else None


def parse_cpu_max(text: str | None) -> float | None:
    """Cores from cgroup v2 cpu.max ("200000 100000" -> 2.0); None for "max ..." or garbage."""
    parts = (text or "").split()
    if len(parts) < 1 or parts[0] == "max":
        return None
    period = parts[1] if len(parts) > 1 else "100000"
    return parse_cfs_quota(parts[0], period)


def parse_cfs_quota(quota: str | None, period: str | None) -> float | None:
    """Cores from cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us; -1 means no quota."""
    q, p = _to_int(quota), _to_int(period)
    if q is None or p is None or q <= 0 or p <= 0:
        return None
    return q / p


def read_cpu_quota(cg: CgroupDir | None) -> float | None:
    """Smallest CPU quota (in cores) over the cgroup and its ancestors; None = no quota."""
    if cg is None:
        return None
    quotas = []
    for d in _walk_up(cg.path, cg.top):
        if cg.version == 2:
            quotas.append(parse_cpu_max(_read_text(os.path.join(d, "cpu.max"))))
        else:
            quotas.append(parse_cfs_quota(_read_text(os.path.join(d, "cpu.cfs_quota_us")),
                                          _read_text(os.path.join(d, "cpu.cfs_period_us"))))
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def parse_stat_value(text: str | None, key: str) -> int | None:
    """Value of `key` in a "key value" per line file such as memory.stat or /proc/meminfo."""
    if not text:
        return None
    match = re.search(rf"^{re.escape(key)}:?\s+(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def read_cgroup_memory(cg: CgroupDir | None) -> CgroupMemory | None:
    """Limit (smallest over the cgroup and its ancestors) and the usage where it applies."""
    if cg is None:
        return None
    limit_file, current_file, inactive_key = _CGROUP_MEMORY_FILES[cg.version]
    limit, limit_dir = None, cg.path
    for d in _walk_up(cg.path, cg.top):
        value = parse_memory_limit(_read_text(os.path.join(d, limit_file)))
        if value is not None and (limit is None or value < limit):
            limit, limit_dir = value, d
    current = _read_int(os.path.join(limit_dir, current_file))
    inactive = parse_stat_value(_read_text(os.path.join(limit_dir, "memory.stat")), inactive_key)
    return CgroupMemory(cg.version, limit_dir, limit, current, inactive)


# ----------------------------------------------------------------------------- CPU

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
        values = parse_sysctl(_run(["sysctl", *_SYSCTL_NAMES]))
        model, features = values.get("machdep.cpu.brand_string"), features_from_sysctl(values, machine)
        rosetta = values.get("sysctl.proc_translated") == "1" if values else None
    else:
        text = _read_text(_join(root, "/proc/cpuinfo"))
        model, features = parse_cpuinfo_model(text), features_from_flags(parse_cpuinfo_flags(text), machine)
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    affinity = _affinity_cores()
    quota = read_cpu_quota((cgroups or find_cgroups(root)).cpu)
    cores, source = effective_cores(logical, affinity, quota)
    return CpuInfo(model or platform.processor() or "unknown", psutil.cpu_count(logical=False), logical,
                   affinity, quota, cores, source, features, rosetta)


# ----------------------------------------------------------------------------- memory

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
    return None if soft == resource.RLIM_INFINITY or soft < 0 or soft >= _UNLIMITED else soft


def effective_limit(total: int, cgroup: CgroupMemory | None, rlimit_as: int | None) -> tuple[int, str]:
    """min(physical RAM, cgroup limit, RLIMIT_AS) and the name of the bound that set it."""
    limit, source = total, "physical RAM"
    if cgroup is not None and cgroup.limit is not None and cgroup.limit < limit:
        limit, source = cgroup.limit, f"cgroup v{cgroup.version} {_CGROUP_MEMORY_FILES[cgroup.version][0]}"
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
    for path in candidates + [_join(root, "/proc/pressure/memory")]:
        if _read_text(path) is not None:
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
        pressure_some_avg10=parse_pressure(_read_text(pressure_path)), pressure_path=pressure_path,
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
        found = parse_statm(_read_text(_join(root, "/proc/self/statm"), 256), os.sysconf("SC_PAGE_SIZE"))
    if found is None:
        info = psutil.Process().memory_info()
        found = info.rss, info.vms
    return found


def _system_available(root: str) -> int:
    """MemAvailable from /proc/meminfo, else psutil."""
    kib = parse_stat_value(_read_text(_join(root, "/proc/meminfo"), 8192), "MemAvailable")
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
        _limit_file, current_file, inactive_key = _CGROUP_MEMORY_FILES[cg.version]
        current = _read_int(os.path.join(cg.dir, current_file))
        inactive = parse_stat_value(_read_text(os.path.join(cg.dir, "memory.stat"), 16384), inactive_key)
    return MemorySample(
        rss=rss, vms=vms, available=_system_available(root),
        cgroup_limit=cg.limit if cg is not None else None, cgroup_current=current,
        cgroup_inactive_file=inactive, rlimit_as=memory.rlimit_as,
        pressure_some_avg10=parse_pressure(_read_text(memory.pressure_path, 512)),
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


# ----------------------------------------------------------------------------- thermal

def parse_temperature(text: str | None) -> float | None:
    """°C from a sysfs temperature file (millidegrees; plain degrees if the value is small)."""
    value = _to_int(text)
    if value is None:
        return None
    temp = value / 1000 if abs(value) > 200 else float(value)
    return temp if _SANE_TEMP_C[0] < temp < _SANE_TEMP_C[1] else None


def read_thermal_zones(root: str = "/") -> list[ThermalSensor]:
    """Readable /sys/class/thermal/thermal_zone*/temp, named by their type."""
    sensors = []
    for zone in sorted(glob.glob(_join(root, "/sys/class/thermal/thermal_zone*"))):
        temp = parse_temperature(_read_text(os.path.join(zone, "temp")))
        if temp is not None:
            name = (_read_text(os.path.join(zone, "type")) or os.path.basename(zone)).strip()
            sensors.append(ThermalSensor(name, temp, os.path.join(zone, "temp")))
    return sensors


def read_hwmon_temps(root: str = "/") -> list[ThermalSensor]:
    """Readable /sys/class/hwmon/hwmon*/temp*_input, named "driver/label" (e.g. coretemp/Core 0)."""
    sensors = []
    for hwmon in sorted(glob.glob(_join(root, "/sys/class/hwmon/hwmon*"))):
        driver = (_read_text(os.path.join(hwmon, "name")) or os.path.basename(hwmon)).strip()
        for path in sorted(glob.glob(os.path.join(hwmon, "temp*_input"))):
            temp = parse_temperature(_read_text(path))
            if temp is not None:
                label = _read_text(path.replace("_input", "_label"))
                name = f"{driver}/{label.strip()}" if label else driver
                sensors.append(ThermalSensor(name, temp, path))
    return sensors


def cpu_temperature(sensors: Iterable[ThermalSensor]) -> float | None:
    """Hottest sensor whose name looks like the CPU; hottest of all when none does."""
    sensors = list(sensors)
    cpu = [s.temp_c for s in sensors if any(h in s.name.lower() for h in _CPU_SENSOR_HINTS)]
    temps = cpu or [s.temp_c for s in sensors]
    return max(temps) if temps else None


def read_cpu_freq(root: str = "/") -> tuple[float, float] | None:
    """(mean current MHz, mean maximum MHz) over CPUs from cpufreq; None if unreadable."""
    pairs = []
    for cpu in glob.glob(_join(root, "/sys/devices/system/cpu/cpu[0-9]*/cpufreq")):
        cur = _read_int(os.path.join(cpu, "scaling_cur_freq"))
        top = _read_int(os.path.join(cpu, "cpuinfo_max_freq"))
        if cur and top:
            pairs.append((cur, top))
    if not pairs:
        return None
    n = len(pairs)
    return sum(c for c, _ in pairs) / n / 1000, sum(t for _, t in pairs) / n / 1000  # kHz -> MHz


def read_throttle_count(root: str = "/") -> int | None:
    """Sum of Intel core_throttle_count over CPUs (thermal throttle events since boot)."""
    counts = [_read_int(p) for p in glob.glob(
        _join(root, "/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle/core_throttle_count"))]
    counts = [c for c in counts if c is not None]
    return sum(counts) if counts else None


def parse_pmset_therm(text: str | None) -> int | None:
    """CPU_Speed_Limit (percent) from `pmset -g therm`; Apple Silicon usually omits it."""
    match = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def probe_thermal(root: str = "/", system: str | None = None) -> ThermalInfo:
    """All readable temperatures, CPU frequency ratio and throttle hints."""
    if (system or platform.system()) == "Darwin":
        limit = parse_pmset_therm(_run(["pmset", "-g", "therm"]))
        return ThermalInfo((), None, None, None, None, None, limit)
    sensors = tuple(read_thermal_zones(root) + read_hwmon_temps(root))
    freq = read_cpu_freq(root)
    ratio = freq[0] / freq[1] if freq else None
    return ThermalInfo(sensors, cpu_temperature(sensors), freq and freq[0], freq and freq[1], ratio,
                       read_throttle_count(root), None)


def read_thermal(root: str = "/", system: str | None = None) -> ThermalSample:
    """Hottest CPU temperature and frequency ratio now; cheap enough for every few seconds
    on Linux (sysfs reads), ~tens of ms on macOS (runs pmset)."""
    info = probe_thermal(root, system)
    return ThermalSample(info.cpu_temp_c, info.freq_ratio, info.throttle_count, info.speed_limit_pct)


# ----------------------------------------------------------------------------- torch and platform

def parse_parallel_info(text: str | None) -> tuple[str | None, str | None]:
    """(ATen parallel backend, OpenMP version line) from torch.__config__.parallel_info()."""
    backend = re.search(r"ATen parallel backend:\s*(.+)", text or "")
    openmp = re.search(r"^(OpenMP .+)$", text or "", re.MULTILINE)
    return (backend.group(1).strip() if backend else None, openmp.group(1).strip() if openmp else None)


def _cuda_details(torch: Any) -> tuple[bool, str | None, int | None]:
    try:
        if not torch.cuda.is_available():
            return False, None, None
        props = torch.cuda.get_device_properties(0)
        return True, props.name, props.total_memory
    except (RuntimeError, AssertionError):
        return False, None, None


def probe_torch() -> TorchInfo:
    """Features of the installed torch build (all None/False when torch is missing)."""
    try:
        import torch
    except ImportError:
        return TorchInfo(None, None, None, None, None, None, None, None, False, None, None, False)
    backend, openmp = parse_parallel_info(torch.__config__.parallel_info())
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    cuda, cuda_name, cuda_mem = _cuda_details(torch)
    mps = getattr(torch.backends, "mps", None)
    return TorchInfo(
        version=torch.__version__, mkl=torch.backends.mkl.is_available(),
        mkldnn=torch.backends.mkldnn.is_available(), parallel_backend=backend, openmp=openmp,
        num_threads=torch.get_num_threads(), num_interop_threads=torch.get_num_interop_threads(),
        cpu_capability=capability() if capability else None, cuda_available=cuda, cuda_device=cuda_name,
        cuda_memory=cuda_mem, mps_available=bool(mps and mps.is_available()),
    )


def probe_platform() -> PlatformInfo:
    """OS, release, architecture and Python version."""
    name, version = platform.libc_ver()
    return PlatformInfo(platform.system(), platform.release(), platform.machine(), platform.python_version(),
                        f"{name} {version}".strip())


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


# ----------------------------------------------------------------------------- the C allocator

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
RETURN_MMAP_THRESHOLD = 1 << 20  # blocks from 1 MiB up get their own mapping, unmapped when freed
KEEP_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: free heap top is returned only above ~2 GiB


def _libc() -> Any:
    import ctypes
    return ctypes.CDLL(None)


def keep_freed_memory(trim_threshold: int = KEEP_TRIM_THRESHOLD) -> bool:
    """Make glibc's malloc keep freed memory for reuse; False where the C library is not glibc.

    By default glibc serves blocks over a threshold (128 KB, rising to at most
    32 MB) with their own mmap and unmaps them when freed, and returns the
    heap's free top to the OS. A training step frees and re-allocates the
    same activation buffers every step, so each comes back as fresh pages
    that the kernel faults in and zeroes: 23,000-88,000 page faults per step
    of the paper Sudoku config here. With mmap off (M_MMAP_MAX=0) and a
    high trim threshold (at most ~2 GiB; the planner bounds it by what the
    run's budget holds beyond its live memory, so that free memory kept at
    the top of the heap cannot take the process past the budget) the
    buffers stay in the heap and are reused; the
    memory guard still returns memory explicitly (`trim_heap`) when it
    shrinks the micro-batch. Process-wide and not undone.
    """
    try:
        libc = _libc()
        threshold = max(1 << 20, min(int(trim_threshold), KEEP_TRIM_THRESHOLD))
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, threshold))
    except (OSError, AttributeError):  # no mallopt: macOS, Windows
        return False


def return_freed_memory() -> bool:
    """Make glibc's malloc give freed activation buffers back to the OS at once; False where the C
    library is not glibc.

    The opposite of `keep_freed_memory`, for budgets without room to spare: every block of 1 MiB
    or more gets its own mapping and is unmapped when freed, and setting the threshold fixes it
    (glibc would otherwise raise it up to 32 MiB as large blocks are freed, after which they live
    in the heap, where freed holes can leave the resident set above what is live). Costs a page
    fault per 4 KiB of each new buffer. Process-wide and not undone.
    """
    try:
        libc = _libc()
        return (bool(libc.mallopt(M_MMAP_THRESHOLD, RETURN_MMAP_THRESHOLD))
                and bool(libc.mallopt(M_TRIM_THRESHOLD, RETURN_MMAP_THRESHOLD)))
    except (OSError, AttributeError):  # no mallopt: macOS, Windows
        return False


def trim_heap() -> bool:
    """Return free heap memory to the OS (glibc malloc_trim); False where there is none."""
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):  # not glibc: macOS, musl, Windows
        return False


# ----------------------------------------------------------------------------- report

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
