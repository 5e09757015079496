"""Temperatures, CPU frequency and throttle hints readable without root.

`probe_thermal()` reads everything once; `read_thermal()` is the cheap sampler for use during
training (every few seconds). CPU frequency is reported as current/maximum, not as
"throttled": an idle core sits far below its turbo maximum, so the ratio only means
something while training runs.
"""

from __future__ import annotations

import glob
import os
import platform
import re
from collections.abc import Iterable

from trmkit.hardware.info import ThermalInfo, ThermalSample, ThermalSensor
from trmkit.hardware.readers import read_int, read_text, run_command, to_int, under_root

_SANE_TEMP_C = (-40.0, 150.0)  # readings outside are disabled or broken sensors
# Name fragments of sensors that measure the CPU package or cores.
_CPU_SENSOR_HINTS = ("x86_pkg", "coretemp", "k10temp", "zenpower", "cpu", "soc", "package", "tctl", "tdie")


def parse_temperature(text: str | None) -> float | None:
    """°C from a sysfs temperature file (millidegrees; plain degrees if the value is small)."""
    value = to_int(text)
    if value is None:
        return None
    temp = value / 1000 if abs(value) > 200 else float(value)
    return temp if _SANE_TEMP_C[0] < temp < _SANE_TEMP_C[1] else None


def read_thermal_zones(root: str = "/") -> list[ThermalSensor]:
    """Readable /sys/class/thermal/thermal_zone*/temp, named by their type."""
    sensors = []
    for zone in sorted(glob.glob(under_root(root, "/sys/class/thermal/thermal_zone*"))):
        temp = parse_temperature(read_text(os.path.join(zone, "temp")))
        if temp is not None:
            name = (read_text(os.path.join(zone, "type")) or os.path.basename(zone)).strip()
            sensors.append(ThermalSensor(name, temp, os.path.join(zone, "temp")))
    return sensors


def read_hwmon_temps(root: str = "/") -> list[ThermalSensor]:
    """Readable /sys/class/hwmon/hwmon*/temp*_input, named "driver/label" (e.g. coretemp/Core 0)."""
    sensors = []
    for hwmon in sorted(glob.glob(under_root(root, "/sys/class/hwmon/hwmon*"))):
        driver = (read_text(os.path.join(hwmon, "name")) or os.path.basename(hwmon)).strip()
        for path in sorted(glob.glob(os.path.join(hwmon, "temp*_input"))):
            temp = parse_temperature(read_text(path))
            if temp is not None:
                label = read_text(path.replace("_input", "_label"))
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
    for cpu in glob.glob(under_root(root, "/sys/devices/system/cpu/cpu[0-9]*/cpufreq")):
        cur = read_int(os.path.join(cpu, "scaling_cur_freq"))
        top = read_int(os.path.join(cpu, "cpuinfo_max_freq"))
        if cur and top:
            pairs.append((cur, top))
    if not pairs:
        return None
    n = len(pairs)
    return sum(c for c, _ in pairs) / n / 1000, sum(t for _, t in pairs) / n / 1000  # kHz -> MHz


def read_throttle_count(root: str = "/") -> int | None:
    """Sum of Intel core_throttle_count over CPUs (thermal throttle events since boot)."""
    counts = [read_int(p) for p in glob.glob(
        under_root(root, "/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle/core_throttle_count"))]
    counts = [c for c in counts if c is not None]
    return sum(counts) if counts else None


def parse_pmset_therm(text: str | None) -> int | None:
    """CPU_Speed_Limit (percent) from `pmset -g therm`; Apple Silicon usually omits it."""
    match = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def probe_thermal(root: str = "/", system: str | None = None) -> ThermalInfo:
    """All readable temperatures, CPU frequency ratio and throttle hints."""
    if (system or platform.system()) == "Darwin":
        limit = parse_pmset_therm(run_command(["pmset", "-g", "therm"]))
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
