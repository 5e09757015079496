"""A depth curriculum (train.depth_curriculum): few recursion cycles early in training, the full depth later.

CGAR (Qasim and Zhang, 2025, "Accelerating Training Speed of Tiny Recursive Models with Curriculum
Guided Adaptive Recursion") trains T=3, n=6 at (T, n) = (1, 2) for the first 30% of training, (2, 4)
until 60% and (3, 6) after, and reports the same Sudoku accuracy 1.7-2.3x sooner. Here the setting is
the list of stage ends as shares of train.max_steps ("0.3,0.6": three stages). Stage k of S uses the
share (k + 1) / S of the configured cycles, rounded up, at least 1 each: with T=3, n=6 and "0.3,0.6"
that is CGAR's schedule; with T=2, n=2 it is (1, 1) until 30% and (2, 2) after (stages of equal depth
merge). The stage is a function of the step and train.max_steps only, so a resumed run takes the same
depths. Only training steps are shallower: evaluation, `trmkit eval` and export always run the full
depth (TRM.cycles reads the training depth in train mode only).

A shallower step costs less, so a time budget's fit of train.max_steps (train/timefit.py, `bench
--learn`) counts each step by `relative_cost`: one supervision step makes (T - 1)(n + 1) network calls
without gradients and n + 1 with them (forward and backward, about 3 calls' work): cost proportional to
(n + 1)(T + 2), 1 at the full depth.
"""

from __future__ import annotations

import functools
import math

from trmkit.config import ConfigError, ModelConfig


@functools.lru_cache(maxsize=8)
def stage_ends(spec: str) -> tuple[float, ...]:
    """'0.3,0.6' -> (0.3, 0.6); '' -> () (off). Shares of train.max_steps, increasing, in (0, 1).
    Cached: every training step asks (train/step.py), the string is parsed once."""
    if not spec.strip():
        return ()
    try:
        ends = tuple(float(part) for part in spec.split(","))
    except ValueError:
        raise ConfigError(f"train.depth_curriculum={spec!r}: write the stage ends as shares of "
                          "train.max_steps, e.g. 0.3,0.6 (CGAR's three stages), or leave it empty (off)") from None
    if any(not 0.0 < e < 1.0 for e in ends) or list(ends) != sorted(set(ends)):
        raise ConfigError(f"train.depth_curriculum={spec!r}: stage ends must increase strictly and lie "
                          "between 0 and 1, e.g. 0.3,0.6")
    return ends


def stage_cycles(m: ModelConfig, ends: tuple[float, ...]) -> list[tuple[int, int]]:
    """(T, n) of each stage: the share (k + 1) / S of the model's cycles, rounded up, at least 1."""
    stages = len(ends) + 1
    return [(max(1, math.ceil(m.H_cycles * (k + 1) / stages)), max(1, math.ceil(m.L_cycles * (k + 1) / stages)))
            for k in range(stages)]


def cycles_at(step: int, max_steps: int, m: ModelConfig, ends: tuple[float, ...]) -> tuple[int, int]:
    """(T, n) for the optimizer step `step` (0-based) of a run of max_steps."""
    stage = sum(step >= e * max_steps for e in ends)
    return stage_cycles(m, ends)[stage]


def relative_cost(cycles: tuple[int, int], m: ModelConfig) -> float:
    """Work of a supervision step at `cycles` against one at the model's full depth (module docstring)."""
    t, n = cycles
    return (n + 1) * (t + 2) / ((m.L_cycles + 1) * (m.H_cycles + 2))


def cost_between(first: int, last: int, max_steps: int, m: ModelConfig, ends: tuple[float, ...]) -> float:
    """Summed relative cost of steps first..last-1 in a run of max_steps."""
    bounds = [0] + [math.ceil(e * max_steps) for e in ends] + [max(max_steps, last)]
    total = 0.0
    for cycles, (lo, hi) in zip(stage_cycles(m, ends), zip(bounds, bounds[1:])):
        total += max(0, min(hi, last) - max(lo, first)) * relative_cost(cycles, m)
    return total


def fitted_max_steps(step: int, timed: tuple[int, float], left_s: float, max_steps: int,
                     m: ModelConfig | None, ends: tuple[float, ...]) -> tuple[int, float]:
    """The max_steps whose remaining steps fill `left_s` seconds: (steps, seconds per full-depth step).

    timed = (first timed step, seconds the steps first..step-1 took) under the current max_steps. Off
    (no ends; m may be None) every step costs 1 and this is step + left_s / (seconds per step)."""
    if not ends or m is None:
        unit = timed[1] / max(step - timed[0], 1)
        return max(step + 1, step + int(left_s / unit)), unit
    unit = timed[1] / max(cost_between(timed[0], step, max_steps, m, ends), 1e-12)
    lo, hi = step + 1, step + 1 + int(left_s / (unit * relative_cost(stage_cycles(m, ends)[0], m)))
    while lo < hi:  # the largest total whose remaining cost fits (the stages move with the total)
        mid = (lo + hi + 1) // 2
        if cost_between(step, mid, mid, m, ends) * unit <= left_s:
            lo = mid
        else:
            hi = mid - 1
    return lo, unit


def describe(m: ModelConfig, ends: tuple[float, ...]) -> str:
    """The schedule in words, e.g. '(T, n) = (1, 1) until 30% of train.max_steps, then (2, 2)'."""
    parts, cycles = [], stage_cycles(m, ends)
    for k, (t, n) in enumerate(cycles):
        if k + 1 < len(cycles) and cycles[k + 1] == (t, n):
            continue  # stages of equal depth merge
        parts.append(f"({t}, {n})" + (f" until {ends[k]:.0%} of train.max_steps" if k < len(ends) else ""))
    return "(T, n) = " + ", then ".join(parts)
