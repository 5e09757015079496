"""The execution plan: every 'auto' setting resolved for this machine, each with its reason.

The rooms:

    objects.py       Choice(value, reason), MemoryEstimate, Plan; the dtypes and their autocast
    memory_model.py  bytes per slot and fixed bytes of one step; what fits a budget
    cache.py         the measurement cache in the user's cache directory
    measure.py       speed probes: one network call at float32/bf16, torch.compile's cost and gain
    calibrate.py     fitting the memory model from real steps (subprocesses); learning from runs
    choose.py        each choice with its reason: budget, micro-batch, checkpointing, dtype, compile, ...
    device.py        device, threads, and the device's side of several processes
    make.py          make_plan, the report of `trmkit plan`, applying a plan to the process and model

This module re-exports what the trainer and the commands use.
"""

from trmkit.plan.choose import with_memory_limit
from trmkit.plan.make import apply_to_model, apply_to_process, check_sequence, make_plan, plan_lines_to, plan_report
from trmkit.plan.objects import Choice, Plan

__all__ = ["Choice", "Plan", "apply_to_model", "apply_to_process", "check_sequence", "make_plan", "plan_lines_to",
           "plan_report", "with_memory_limit"]
