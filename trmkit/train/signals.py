"""Graceful stop on SIGINT/SIGTERM: finish the step, save, exit 0.

The first signal only sets a flag that the loop reads at the next step
boundary. A second SIGINT restores the default behaviour and raises
KeyboardInterrupt at once; checkpoints are written atomically, so stopping
in the middle of a save cannot corrupt the previous ones.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


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
