"""Progress of a phase that can take minutes (the input_linear choice's cross-validation, EM, self-training):
a line per step, but only once the phase has run for SLOW_S seconds, so a small store's fit stays one line."""

from __future__ import annotations

import time
from typing import Callable

Log = Callable[[str], None]
SLOW_S = 5.0  # a phase quicker than this shows its summary line only


def slow_steps(log: Log, start: float | None = None) -> Log:
    """`log` for a phase's step lines: silent until SLOW_S seconds after `start` (default: now), then each line
    with the seconds spent so far."""
    began = time.perf_counter() if start is None else start

    def say(line: str) -> None:
        spent = time.perf_counter() - began
        if spent >= SLOW_S:
            log(f"{line} ({spent:.0f} s so far)")
    return say
