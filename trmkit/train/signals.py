"""Graceful stop on SIGINT/SIGTERM: finish the step, save, exit 128 + the signal's number.

The first signal only sets a flag that the loop reads at the next step
boundary; the run saves a checkpoint, says how to resume, and the command exits
130 (SIGINT) or 143 (SIGTERM), as a shell reports a process those signals ended,
so `trmkit train ... && trmkit eval ...` does not go on to an unfinished run.
A second SIGINT restores the default behaviour and raises KeyboardInterrupt
at once; checkpoints are written atomically, so stopping
in the middle of a save cannot corrupt the previous ones.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


def exit_code(signal_name: str | None) -> int:
    """The exit status of a run stopped by `signal_name`: 128 + its number (SIGINT 130, SIGTERM 143);
    143 for a stop that came from another process of the run; 0 when nothing stopped it."""
    if signal_name is None:
        return 0
    try:
        return 128 + int(signal.Signals[signal_name])
    except KeyError:
        return 128 + int(signal.SIGTERM)


class StopFlag:
    def __init__(self) -> None:
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


@contextmanager
def graceful_stop(log: Callable[[str], None] = print) -> Iterator[StopFlag]:
    """Install the handlers for the duration of a run (main thread only)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, _frame):
        name = signal.Signals(signum).name
        if flag.requested:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt(f"second {name}: stopping now")
        flag.signal_name = name
        log(f"\n{name} received: finishing this step and saving a checkpoint "
            f"(press Ctrl-C again to stop at once)")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
