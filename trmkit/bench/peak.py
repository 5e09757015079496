"""The machine's own matmul peak (square torch.matmul, same process, same threads) and the
GEMM ceiling: how fast the step would be if it did nothing but its model-shaped matmuls."""

from __future__ import annotations

import time
from typing import Any

import torch

from trmkit.bench.flops import Gemm
from trmkit.plan.objects import DTYPES


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float = 1.0,
                  reps: int = 3, transpose_a: bool = False) -> float:
    """Best-of-`reps` GFLOP/s of (m,k)x(k,n) torch.matmul, each rep ~seconds/reps long.

    transpose_a multiplies a transposed view, as autograd does for weight gradients.
    """
    a = torch.randn(k, m).to(dtype).t() if transpose_a else torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up: the first call picks and loads kernels
    best = 0.0
    for _ in range(reps):
        count, start = 0, time.perf_counter()
        while True:
            torch.matmul(a, b, out=out)
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / reps:
                break
        best = max(best, 2 * m * k * n * count / elapsed / 1e9)
    return best


def machine_peak(sizes: tuple[int, ...] = (1024, 2048), seconds: float = 1.0,
                 dtypes: tuple[str, ...] = tuple(DTYPES)) -> dict[str, float]:
    """GFLOP/s per dtype in `dtypes`: the best square torch.matmul over `sizes`, with torch's threads."""
    return {name: max(matmul_gflops(s, s, s, DTYPES[name], seconds) for s in sizes) for name in dtypes}


def peak_dtypes(run_dtype: str, native_bf16: bool, every: bool = False) -> tuple[str, ...]:
    """Which dtypes' peaks a benchmark samples: the run's own, the other one only where the CPU has
    it natively (an emulated bf16 matmul of 2048^3 takes ~20 s on an AVX2 laptop), or when asked."""
    if every or native_bf16:
        return tuple(DTYPES)
    return (run_dtype,)


def gemm_ceiling(gemms: list[Gemm], dtype: torch.dtype, seconds: float = 0.3) -> dict[str, Any]:
    """Time each model-shaped matmul; the step's time if it did nothing but these GEMMs."""
    rates, gemm_seconds, flops = {}, 0.0, 0
    for g in gemms:
        rate = matmul_gflops(g.m, g.k, g.n, dtype, seconds, reps=2, transpose_a=g.name.endswith("dW"))
        rates[f"{g.name} ({g.m}x{g.k})x({g.k}x{g.n})"] = round(rate, 1)
        gemm_seconds += g.count * g.flops / (rate * 1e9)
        flops += g.count * g.flops
    return {"gflops": flops / gemm_seconds / 1e9, "seconds_per_step": gemm_seconds, "shapes": rates}
