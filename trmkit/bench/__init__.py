"""Benchmark one TRM training step: analytic FLOPs, the machine's matmul peak, MFU, memory per slot.

The rooms:

    flops.py    FLOP counts of a step and its model-shaped GEMMs
    peak.py     the machine's matmul peak and the GEMM ceiling
    session.py  the bench's training session (as the training loop builds it) and timed steps
    memory.py   MB per batch slot from fresh processes
    run.py      run_bench: the measurements in order, under the planner's memory budget
    results.py  the result: assembled, printed, compared with a baseline, saved and loaded

This module re-exports what the `trmkit bench` command uses.
"""

from trmkit.bench.results import compare, format_lines, load_result, save_result
from trmkit.bench.run import run_bench

__all__ = ["compare", "format_lines", "load_result", "run_bench", "save_result"]
