"""Child processes that leave nothing behind.

A child started here runs in its own session (so its own process group): torchrun and its
ranks, a trainer and the workers it starts all share that group, and `kill_group` ends every
one of them. `subprocess.run(..., timeout=)` kills only the direct child: a torchrun whose rank
hangs would stay behind with its rank, adopted by init. Used by the tests, the benchmarks and
the fault-injection script (scripts/faults.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any, Iterator, Sequence


def start(cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Popen(cmd) in a new session: the child leads a process group of its own."""
    return subprocess.Popen(list(cmd), start_new_session=True, **popen)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait: float = 30.0) -> None:
    """Send `sig` to the child's whole process group (it and everything it started), then reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait)


def group_alive(pgid: int) -> list[int]:
    """Pids still in process group `pgid` (Linux /proc; [] where it cannot be read)."""
    alive = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return alive
    for entry in entries:
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
                    alive.append(int(entry))
    return alive


@contextlib.contextmanager
def group(cmd: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """`start(cmd)`; on leaving the block, normally or by an exception, the group is killed if
    anything of it still runs."""
    proc = start(cmd, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None or group_alive(proc.pid):
            kill_group(proc)


def communicate(proc: subprocess.Popen, timeout: float, input: str | bytes | None = None) -> tuple[Any, Any]:
    """proc.communicate(timeout=); on a timeout the whole group is killed before TimeoutExpired is raised."""
    try:
        return proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        raise


def run(cmd: Sequence[str], timeout: float, input: str | bytes | None = None, check: bool = False,
        **popen: Any) -> subprocess.CompletedProcess:
    """subprocess.run in its own process group; a timeout kills the group (not only the child)."""
    if popen.pop("capture_output", False):
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen.setdefault("stdin", subprocess.PIPE)
    with group(cmd, **popen) as proc:
        out, err = communicate(proc, timeout, input)
    done = subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
