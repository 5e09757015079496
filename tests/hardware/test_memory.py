"""The peak meter: the process peak is the kernel's, phases see peaks freed before they end."""

import resource
import sys

import pytest
import torch

from trmkit import hardware
from trmkit.hardware.memory import PeakMeter, RssReader

MiB = 1 << 20
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and statm are Linux files")


def kernel_hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


@linux
def test_process_peak_is_the_kernels_and_phases_never_reset_it():
    meter = PeakMeter(interval=0.001).start()
    with meter.phase("big"):
        block = torch.ones(200 * MiB // 4)  # touched: 200 MiB resident
        del block
        hardware.trim_heap()
    hwm = kernel_hwm()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with meter.phase("small"):
        torch.ones(1024)
    meter.stop()
    # statm's and VmHWM's counters are kept per CPU and synced in batches: a sample may be a few pages off
    assert meter.process_peak() >= hwm >= meter.phases["big"].peak - 4 * MiB
    assert kernel_hwm() >= hwm  # the meter did not lower the kernel's mark (clear_refs would)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 >= maxrss
    report = meter.report()
    assert report["process"]["peak_gb"] * 2**30 >= hwm * 0.999 and report["process"]["source"] == "VmHWM"


@linux
def test_a_phase_sees_memory_freed_before_it_ends():
    meter = PeakMeter(interval=0.001).start()
    meter.rss()
    with meter.phase("step"):
        start = meter.rss()
        block = torch.ones(128 * MiB // 4)
        del block
        hardware.trim_heap()
    meter.stop()
    assert meter.last - start > 100 * MiB
    assert meter.phases["step"].count == 1 and meter.phases["step"].start <= start + 8 * MiB


def test_rss_reader_agrees_with_psutil():
    import psutil

    rss = RssReader()
    ours, theirs = rss(), psutil.Process().memory_info().rss
    rss.close()
    assert abs(ours - theirs) < 16 * MiB
