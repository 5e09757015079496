"""The software trmkit runs on: the torch build (MKL, oneDNN, threads, CUDA, MPS) and the
operating system, architecture, Python and C library."""

from __future__ import annotations

import platform
import re
from typing import Any

from trmkit.hardware.info import PlatformInfo, TorchInfo


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


def torch_kernels() -> str | None:
    """The vector ISA torch's CPU kernels dispatch to ("AVX512", "AVX2", ...), None if unknown."""
    try:
        import torch
        return torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError, RuntimeError):
        return None


def probe_torch() -> TorchInfo:
    """Features of the installed torch build (all None/False when torch is missing)."""
    try:
        import torch
    except ImportError:
        return TorchInfo(None, None, None, None, None, None, None, None, False, None, None, False)
    backend, openmp = parse_parallel_info(torch.__config__.parallel_info())
    cuda, cuda_name, cuda_mem = _cuda_details(torch)
    mps = getattr(torch.backends, "mps", None)
    return TorchInfo(
        version=torch.__version__, mkl=torch.backends.mkl.is_available(),
        mkldnn=torch.backends.mkldnn.is_available(), parallel_backend=backend, openmp=openmp,
        num_threads=torch.get_num_threads(), num_interop_threads=torch.get_num_interop_threads(),
        cpu_capability=torch_kernels(), cuda_available=cuda, cuda_device=cuda_name,
        cuda_memory=cuda_mem, mps_available=bool(mps and mps.is_available()),
    )


def probe_platform() -> PlatformInfo:
    """OS, release, architecture and Python version."""
    name, version = platform.libc_ver()
    return PlatformInfo(platform.system(), platform.release(), platform.machine(), platform.python_version(),
                        f"{name} {version}".strip())
