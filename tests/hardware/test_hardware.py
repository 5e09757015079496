"""Tests for trmkit.hardware: parsers on fake /proc and /sys trees, plus one real probe."""

import json
import os
import resource
import time
from pathlib import Path

import pytest

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit import hardware
from trmkit.hardware import cpu as hw_cpu
from trmkit.hardware import thermal as hw_thermal
from trmkit.hardware.cgroups import (find_cgroups, parse_cfs_quota, parse_cgroup_mounts, parse_cpu_max,
                                     parse_memory_limit, read_cgroup_memory, read_cpu_quota)
from trmkit.hardware.cpu import (effective_cores, features_from_flags, native_bf16, parse_cpuinfo_flags,
                                 parse_cpuinfo_model, probe_cpu)
from trmkit.hardware.info import (CgroupMemory, CgroupPaths, HardwareInfo, MemorySample, PlatformInfo,
                                  ThermalSample, ThermalSensor, TorchInfo)
from trmkit.hardware.memory import (effective_available, effective_limit, parse_pressure, probe_memory,
                                    read_memory_now, read_rlimit_as)
from trmkit.hardware.readers import parse_stat_value
from trmkit.hardware.report import _thermal_line, format_report
from trmkit.hardware.software import parse_parallel_info, probe_platform
from trmkit.hardware.thermal import (cpu_temperature, parse_pmset_therm, parse_temperature, probe_thermal,
                                     read_thermal)

GiB = 1 << 30
V1_UNLIMITED = "9223372036854771712\n"


def write(root: Path, files: dict[str, str]) -> str:
    """Create `files` (relative path -> content) under `root`; return root as str."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def v2_tree(tmp_path: Path, memory_max: str, parent_max: str | None = None) -> str:
    leaf = "sys/fs/cgroup/user.slice/app.scope/"
    files = {
        "proc/self/cgroup": "0::/user.slice/app.scope\n",
        "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
        leaf + "memory.max": memory_max,
        leaf + "memory.current": f"{GiB}\n",
        leaf + "memory.stat": "anon 700000000\nfile 300000000\ninactive_file 268435456\nactive_file 1\n",
        leaf + "memory.pressure": "some avg10=1.50 avg60=0.20 avg300=0.00 total=10\n"
                                  "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        leaf + "cpu.max": "200000 100000\n",
    }
    if parent_max is not None:
        files["sys/fs/cgroup/user.slice/memory.max"] = parent_max
        files["sys/fs/cgroup/user.slice/memory.current"] = f"{3 * GiB}\n"
    return write(tmp_path, files)


# ----------------------------------------------------------------------------- cgroups

def test_cgroup_v2_limited(tmp_path):
    root = v2_tree(tmp_path, "4294967296\n")
    paths = find_cgroups(root)
    assert paths.memory.version == 2 and paths.memory.path.endswith("user.slice/app.scope")
    mem = read_cgroup_memory(paths.memory)
    assert (mem.limit, mem.current, mem.inactive_file) == (4 * GiB, GiB, 268435456)
    assert read_cpu_quota(paths.cpu) == 2.0


def test_cgroup_v2_unlimited_memory_and_cpu(tmp_path):
    root = v2_tree(tmp_path, "max\n")
    write(tmp_path, {"sys/fs/cgroup/user.slice/app.scope/cpu.max": "max 100000\n"})
    paths = find_cgroups(root)
    assert read_cgroup_memory(paths.memory).limit is None
    assert read_cpu_quota(paths.cpu) is None
    assert effective_limit(16 * GiB, read_cgroup_memory(paths.memory), None) == (16 * GiB, "physical RAM")


def test_cgroup_v2_ancestor_limit_applies_with_its_usage(tmp_path):
    root = v2_tree(tmp_path, "max\n", parent_max=f"{6 * GiB}\n")
    mem = read_cgroup_memory(find_cgroups(root).memory)
    assert mem.limit == 6 * GiB
    assert mem.dir.endswith("user.slice") and mem.current == 3 * GiB


def test_cgroup_v1_with_namespaced_mounts(tmp_path):
    # Docker without cgroupns: /proc/self/cgroup names /docker/abc, which is the mount's root.
    mountinfo = (
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    )
    root = write(tmp_path, {
        "proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
        "proc/self/mountinfo": mountinfo,
        "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{2 * GiB}\n",
        "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{GiB // 2}\n",
        "sys/fs/cgroup/memory/memory.stat": "cache 5\ninactive_file 7\ntotal_inactive_file 1024\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    paths = find_cgroups(root)
    assert paths.memory.version == 1 and paths.cpu.version == 1
    mem = read_cgroup_memory(paths.memory)
    assert (mem.limit, mem.current, mem.inactive_file) == (2 * GiB, GiB // 2, 1024)
    assert effective_limit(16 * GiB, mem, None) == (2 * GiB, "cgroup v1 memory.limit_in_bytes")
    assert read_cpu_quota(paths.cpu) == 1.5


def test_cgroup_v1_unlimited_values(tmp_path):
    root = write(tmp_path, {
        "proc/self/cgroup": "4:memory:/\n2:cpu:/\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
    })
    paths = find_cgroups(root)
    assert read_cgroup_memory(paths.memory).limit is None
    assert read_cpu_quota(paths.cpu) is None


def test_no_cgroup_files(tmp_path):
    assert find_cgroups(str(tmp_path)) == CgroupPaths(None, None)
    assert read_cgroup_memory(None) is None and read_cpu_quota(None) is None


def test_limit_parsers():
    assert parse_memory_limit("max\n") is None
    assert parse_memory_limit(V1_UNLIMITED) is None
    assert parse_memory_limit("4294967296\n") == 4 * GiB
    assert parse_memory_limit("garbage") is None
    assert parse_cpu_max("200000 100000") == 2.0
    assert parse_cpu_max("50000 100000") == 0.5
    assert parse_cpu_max("max 100000") is None
    assert parse_cfs_quota("-1", "100000") is None


def test_parse_mountinfo_line_from_hybrid_host():
    text = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
            "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    mounts = parse_cgroup_mounts(text)
    assert [(m.point, m.version, m.controllers) for m in mounts] == [
        ("/sys/fs/cgroup/cpu", 1, ("cpu",)), ("/sys/fs/cgroup/unified", 2, ())]


def test_effective_cores():
    assert effective_cores(8, 8, None) == (8, "logical cores")
    assert effective_cores(8, 3, None) == (3, "CPU affinity")
    assert effective_cores(8, 8, 1.5) == (1, "cgroup CPU quota")  # floored
    assert effective_cores(8, 8, 0.5) == (1, "cgroup CPU quota")  # never below 1
    assert effective_cores(4, None, 16.0) == (4, "logical cores")


# ----------------------------------------------------------------------------- memory limits

def test_effective_limit_is_minimum_and_names_source():
    cg = CgroupMemory(2, "/x", 4 * GiB, GiB, 0)
    assert effective_limit(16 * GiB, cg, None) == (4 * GiB, "cgroup v2 memory.max")
    assert effective_limit(16 * GiB, cg, 3 * GiB) == (3 * GiB, "RLIMIT_AS")
    assert effective_limit(2 * GiB, cg, 3 * GiB) == (2 * GiB, "physical RAM")


def test_rlimit_as(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (8 * GiB, resource.RLIM_INFINITY))
    assert read_rlimit_as() == 8 * GiB
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert read_rlimit_as() is None


def test_probe_memory_uses_rlimit(monkeypatch, tmp_path):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 << 20, resource.RLIM_INFINITY))
    mem = probe_memory(str(tmp_path))
    assert (mem.limit, mem.limit_source, mem.rlimit_as) == (64 << 20, "RLIMIT_AS", 64 << 20)
    assert effective_available(mem) == max(0, (64 << 20) - mem.vms)


def test_effective_available_is_smallest_headroom():
    sample = MemorySample(rss=GiB, vms=5 * GiB, available=10 * GiB, cgroup_limit=4 * GiB,
                             cgroup_current=3 * GiB, cgroup_inactive_file=GiB // 2,
                             rlimit_as=None, pressure_some_avg10=None)
    assert effective_available(sample) == 4 * GiB - (3 * GiB - GiB // 2)
    tight_as = MemorySample(GiB, 5 * GiB, 10 * GiB, None, None, None, 6 * GiB, None)
    assert effective_available(tight_as) == GiB
    assert effective_available(MemorySample(GiB, GiB, 10 * GiB, GiB, 2 * GiB, 0, None, None)) == 0


def test_read_memory_now_on_fake_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    root = v2_tree(tmp_path, f"{4 * GiB}\n")
    page = os.sysconf("SC_PAGE_SIZE")
    write(tmp_path, {"proc/self/statm": "1000 250 10 1 0 100 0\n",
                     "proc/meminfo": "MemTotal: 16000000 kB\nMemFree: 1 kB\nMemAvailable: 8000000 kB\n"})
    mem = probe_memory(root)
    assert mem.limit_source == "cgroup v2 memory.max" and mem.pressure_some_avg10 == 1.5
    now = read_memory_now(mem, root)
    assert (now.rss, now.vms) == (250 * page, 1000 * page)
    assert now.available == 8000000 * 1024
    assert (now.cgroup_limit, now.cgroup_current, now.cgroup_inactive_file) == (4 * GiB, GiB, 268435456)
    assert now.pressure_some_avg10 == 1.5
    assert effective_available(now) == 4 * GiB - (GiB - 268435456)


def test_read_memory_now_is_cheap():
    mem = probe_memory()
    read_memory_now(mem)
    start, n = time.perf_counter(), 200
    for _ in range(n):
        sample = read_memory_now(mem)
    per_call = (time.perf_counter() - start) / n
    assert sample.rss > 0 and sample.available > 0
    assert per_call < 1e-3  # measured ~80 µs; loose bound so slow CI does not flake


def test_parse_pressure_and_meminfo():
    psi = "some avg10=12.34 avg60=1.00 avg300=0.00 total=5\nfull avg10=9.00 avg60=0.00 avg300=0.00 total=1\n"
    assert parse_pressure(psi) == 12.34
    assert parse_pressure(None) is None
    assert parse_stat_value("MemTotal: 10 kB\nMemAvailable:   42 kB\n", "MemAvailable") == 42
    assert parse_stat_value("inactive_file 5\n", "total_inactive_file") is None


# ----------------------------------------------------------------------------- CPU

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2
"""

ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp bf16 i8mm
CPU implementer\t: 0x41
"""


def test_cpuinfo_x86_flags():
    assert parse_cpuinfo_model(X86_CPUINFO) == "Intel(R) Xeon(R) Platinum 8480+"
    f = features_from_flags(parse_cpuinfo_flags(X86_CPUINFO), "x86_64")
    assert (f.avx2, f.avx512f, f.avx512_bf16, f.amx_bf16, f.amx_tile) == (True,) * 5
    assert (f.neon, f.arm_bf16, f.source) == (False, False, "/proc/cpuinfo")


def test_bf16_is_native_only_where_torch_kernels_and_onednn_may_use_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    xeon = features_from_flags(parse_cpuinfo_flags(X86_CPUINFO), "x86_64")
    assert native_bf16(xeon, kernels="AVX512")
    assert not native_bf16(xeon, kernels="AVX2")  # ATEN_CPU_CAPABILITY=avx2: the kernels emulate bf16
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not native_bf16(xeon, kernels="AVX512")  # oneDNN's matmuls capped below its bf16 ISA
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert native_bf16(xeon, kernels="AVX512")
    plain = features_from_flags("fpu avx avx2 fma".split(), "x86_64")
    assert not native_bf16(plain, kernels="AVX512")
    assert native_bf16(features_from_flags(parse_cpuinfo_flags(ARM_CPUINFO), "aarch64"), kernels="DEFAULT")


def test_cpuinfo_arm_and_plain_avx2():
    f = features_from_flags(parse_cpuinfo_flags(ARM_CPUINFO), "aarch64")
    assert f.neon and f.arm_bf16 and not f.avx2
    assert parse_cpuinfo_model(ARM_CPUINFO) is None
    plain = features_from_flags("fpu avx avx2 fma".split(), "x86_64")
    assert plain.avx2 and not plain.avx512f and not plain.avx512_bf16 and not plain.amx_tile


def test_cpuinfo_missing_is_unknown(tmp_path):
    f = features_from_flags(parse_cpuinfo_flags(None), "x86_64")
    assert f.avx2 is None and f.source == "unknown"
    cpu = probe_cpu(str(tmp_path), system="Linux", machine="x86_64")
    assert cpu.features.source == "unknown" and cpu.logical_cores >= 1


def test_probe_cpu_macos_from_sysctl(monkeypatch):
    sysctl = ("machdep.cpu.brand_string: Apple M2\nhw.optional.arm64: 1\nhw.optional.neon: 1\n"
              "hw.optional.arm.FEAT_BF16: 1\nsysctl.proc_translated: 0\n")
    monkeypatch.setattr(hw_cpu, "run_command", lambda cmd, timeout=2.0: sysctl if cmd[0] == "sysctl" else None)
    cpu = probe_cpu("/nonexistent", system="Darwin", machine="arm64")
    f = cpu.features
    assert cpu.model == "Apple M2" and cpu.rosetta is False
    assert f.apple_silicon and f.neon and f.arm_bf16 and not f.avx2 and f.source == "sysctl"


def test_sysctl_failure_tolerated(monkeypatch):
    monkeypatch.setattr(hw_cpu, "run_command", lambda cmd, timeout=2.0: None)
    cpu = probe_cpu("/nonexistent", system="Darwin", machine="x86_64")
    assert cpu.features.source == "unknown" and cpu.rosetta is None


# ----------------------------------------------------------------------------- thermal

def thermal_tree(tmp_path: Path) -> str:
    return write(tmp_path, {
        "sys/class/thermal/thermal_zone0/type": "acpitz\n",
        "sys/class/thermal/thermal_zone0/temp": "50000\n",
        "sys/class/thermal/thermal_zone1/type": "x86_pkg_temp\n",
        "sys/class/thermal/thermal_zone1/temp": "71500\n",
        "sys/class/thermal/thermal_zone2/type": "iwlwifi_1\n",
        "sys/class/thermal/thermal_zone2/temp": "88000\n",  # hot, but not the CPU
        "sys/class/thermal/thermal_zone3/type": "disabled\n",
        "sys/class/thermal/thermal_zone3/temp": "-273000\n",
        "sys/class/hwmon/hwmon0/name": "coretemp\n",
        "sys/class/hwmon/hwmon0/temp1_input": "73000\n",
        "sys/class/hwmon/hwmon0/temp1_label": "Package id 0\n",
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "1200000\n",
        "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "4000000\n",
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq": "2800000\n",
        "sys/devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq": "4000000\n",
        "sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count": "3\n",
        "sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count": "4\n",
    })


def test_thermal_present(tmp_path):
    root = thermal_tree(tmp_path)
    th = probe_thermal(root, system="Linux")
    names = {s.name: s.temp_c for s in th.sensors}
    assert names["x86_pkg_temp"] == 71.5 and names["coretemp/Package id 0"] == 73.0
    assert "disabled" not in names  # -273 °C is a dead sensor
    assert th.cpu_temp_c == 73.0  # CPU sensors win over the hotter wifi chip
    assert (th.cur_freq_mhz, th.max_freq_mhz, th.freq_ratio) == (2000.0, 4000.0, 0.5)
    assert th.throttle_count == 7
    sample = read_thermal(root, system="Linux")
    assert (sample.max_temp_c, sample.freq_ratio) == (73.0, 0.5)


def test_thermal_absent_is_unknown(tmp_path):
    th = probe_thermal(str(tmp_path), system="Linux")
    assert th.sensors == () and th.cpu_temp_c is None and th.freq_ratio is None and th.throttle_count is None
    assert read_thermal(str(tmp_path), system="Linux") == ThermalSample(None, None, None, None)
    assert "thermal    unknown; frequency unknown" in _thermal_line(th)


def test_non_cpu_sensors_used_when_nothing_looks_like_cpu():
    sensors = [ThermalSensor("acpitz", 40.0, "a"), ThermalSensor("nvme/Composite", 45.0, "b")]
    assert cpu_temperature(sensors) == 45.0
    assert cpu_temperature([]) is None


def test_macos_pmset(monkeypatch):
    text = ("Note: No thermal warning level has been recorded\n"
            "2024-01-01 CPU Power notify\n\tCPU_Scheduler_Limit \t= 100\n\tCPU_Speed_Limit \t= 80\n")
    assert parse_pmset_therm(text) == 80
    assert parse_pmset_therm("Note: No thermal warning level has been recorded\n") is None
    monkeypatch.setattr(hw_thermal, "run_command", lambda cmd, timeout=2.0: text)
    assert read_thermal(system="Darwin").speed_limit_pct == 80


def test_parse_temperature_units():
    assert parse_temperature("45000") == 45.0
    assert parse_temperature("45") == 45.0  # some ARM drivers report whole degrees
    assert parse_temperature("") is None and parse_temperature(None) is None


# ----------------------------------------------------------------------------- torch, probe, report

def test_parse_parallel_info():
    text = ("ATen/Parallel:\n\tat::get_num_threads() : 2\nOpenMP 201511 (a.k.a. OpenMP 4.5)\n"
            "\tomp_get_max_threads() : 2\nATen parallel backend: OpenMP\n")
    assert parse_parallel_info(text) == ("OpenMP", "OpenMP 201511 (a.k.a. OpenMP 4.5)")
    assert parse_parallel_info("") == (None, None)


@pytest.fixture(scope="module")
def real_info():
    return hardware.probe()


def test_real_probe_is_sane(real_info):
    cpu, mem = real_info.cpu, real_info.memory
    assert cpu.logical_cores >= 1 and 1 <= cpu.effective_cores <= cpu.logical_cores
    assert mem.total > 0 and 0 < mem.limit <= mem.total
    assert 0 <= effective_available(real_info) <= mem.limit
    assert mem.rss > 0 and real_info.torch.version is not None
    assert real_info.torch.num_threads >= 1


def test_to_dict_is_json(real_info):
    data = json.loads(json.dumps(real_info.to_dict()))
    assert data["memory"]["total"] == real_info.memory.total
    assert data["cpu"]["features"]["source"] == real_info.cpu.features.source
    assert isinstance(data["thermal"]["sensors"], list)


def test_format_report_has_key_lines(real_info):
    report = format_report(real_info)
    for prefix in ("OS ", "CPU ", "cores ", "ISA ", "memory ", "limit ", "usable ", "torch ", "GPU ", "thermal "):
        assert any(line.startswith(prefix) for line in report.splitlines()), prefix
    assert f"{real_info.cpu.effective_cores} effective" in report
    assert real_info.memory.limit_source in report


def test_format_report_with_unknowns(tmp_path, monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    info = HardwareInfo(
        platform=PlatformInfo("Linux", "6.1", "x86_64", "3.11.0"),
        cpu=probe_cpu(str(tmp_path), system="Linux", machine="x86_64"),
        memory=probe_memory(str(tmp_path)),
        torch=TorchInfo(None, None, None, None, None, None, None, None, False, None, None, False),
        thermal=probe_thermal(str(tmp_path), system="Linux"),
    )
    report = format_report(info)
    assert "AVX2 unknown" in report and "torch      not installed" in report
    assert "cgroup none found" in report and "thermal    unknown" in report
    json.dumps(info.to_dict())


# Allocates and frees activation-sized buffers (1-40 MB, as a training step does) in rounds and
# prints the minor page faults of the rounds after the first: with freed memory kept, the later
# rounds reuse the heap's pages instead of faulting fresh ones in.
_ALLOC_ROUNDS = r"""
import json, resource, sys
import torch
from trmkit.hardware.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
sizes = [1, 3, 17, 40, 9, 24, 5, 33]  # MB
def one_round():
    bufs = [torch.ones(mb << 18) for mb in sizes]  # float32: mb * 2**18 elements = mb MB, touched
    del bufs
one_round()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    one_round()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": kept, "faults": faults, "pages_per_round": sum(sizes) << 8}))
"""


def test_kept_freed_memory_is_reused_without_page_faults():
    if not probe_platform().libc.startswith("glibc"):
        pytest.skip("glibc only: keep_freed_memory tunes glibc's malloc")
    import sys

    def rounds(mode):
        out = procs.run([sys.executable, "-c", _ALLOC_ROUNDS, mode], capture_output=True, text=True,
                        check=True, timeout=SAFETY_TIMEOUT)
        return json.loads(out.stdout)

    kept, default = rounds("keep"), rounds("default")
    assert kept["kept"] is True
    # 5 rounds touch 5 x 33,792 pages. By default glibc unmaps the large buffers and faults them
    # in again (~165,000 faults here); kept, the rounds reuse the first round's pages.
    assert kept["faults"] < kept["pages_per_round"] < default["faults"], (kept, default)
