"""This process's cgroups: where its memory and cpu controllers live, their limits and usage.

Limits are looked up from the process's own cgroup directory up to the mount point (a parent
may set a smaller one), v2 first, then v1. Byte values of 2**60 or more (v1 writes
9223372036854771712) mean "unlimited".
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from trmkit.hardware.info import CgroupDir, CgroupMemory, CgroupPaths
from trmkit.hardware.readers import parse_stat_value, read_int, read_text, to_int, under_root

UNLIMITED = 1 << 60  # at or above this, a byte limit means "no limit"
# Per cgroup version: limit file, usage file, reclaimable key in memory.stat.
CGROUP_MEMORY_FILES = {
    2: ("memory.max", "memory.current", "inactive_file"),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
}


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
    base = under_root(root, mount.point)
    for cand in (under_root(base, rel), base):
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
                    return CgroupDir(found, os.path.normpath(under_root(root, mount.point)), version)
    return None


def find_cgroups(root: str = "/") -> CgroupPaths:
    """Locate this process's memory and cpu cgroup directories under `root`."""
    text = read_text(under_root(root, "/proc/self/cgroup"))
    if text is None:
        return CgroupPaths(None, None)
    entries = parse_proc_cgroup(text)
    mounts = parse_cgroup_mounts(read_text(under_root(root, "/proc/self/mountinfo")) or "") or _default_mounts()
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
    value = to_int(text)
    return value if value is not None and 0 < value < UNLIMITED else None


def parse_cpu_max(text: str | None) -> float | None:
    """Cores from cgroup v2 cpu.max ("200000 100000" -> 2.0); None for "max ..." or garbage."""
    parts = (text or "").split()
    if len(parts) < 1 or parts[0] == "max":
        return None
    period = parts[1] if len(parts) > 1 else "100000"
    return parse_cfs_quota(parts[0], period)


def parse_cfs_quota(quota: str | None, period: str | None) -> float | None:
    """Cores from cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us; -1 means no quota."""
    q, p = to_int(quota), to_int(period)
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
            quotas.append(parse_cpu_max(read_text(os.path.join(d, "cpu.max"))))
        else:
            quotas.append(parse_cfs_quota(read_text(os.path.join(d, "cpu.cfs_quota_us")),
                                          read_text(os.path.join(d, "cpu.cfs_period_us"))))
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def read_cgroup_memory(cg: CgroupDir | None) -> CgroupMemory | None:
    """Limit (smallest over the cgroup and its ancestors) and the usage where it applies."""
    if cg is None:
        return None
    limit_file, current_file, inactive_key = CGROUP_MEMORY_FILES[cg.version]
    limit, limit_dir = None, cg.path
    for d in _walk_up(cg.path, cg.top):
        value = parse_memory_limit(read_text(os.path.join(d, limit_file)))
        if value is not None and (limit is None or value < limit):
            limit, limit_dir = value, d
    current = read_int(os.path.join(limit_dir, current_file))
    inactive = parse_stat_value(read_text(os.path.join(limit_dir, "memory.stat")), inactive_key)
    return CgroupMemory(cg.version, limit_dir, limit, current, inactive)
