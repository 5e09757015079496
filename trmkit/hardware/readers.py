"""Reading the machine's files and commands: text or None, never an exception.

Every parser in this package takes text or a `root` directory (default "/") so tests can
feed fake /proc and /sys trees; these readers return None for anything they cannot read,
and the report prints "unknown".
"""

from __future__ import annotations

import os
import re
import subprocess


def under_root(root: str, path: str) -> str:
    """`path` (absolute on the real system) placed under `root`."""
    return os.path.join(root, path.lstrip("/"))


def read_text(path: str | None, limit: int = 1 << 20) -> str | None:
    """File contents as text, or None if missing or unreadable."""
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def to_int(text: str | None) -> int | None:
    """First whitespace-separated token as int, or None."""
    if not text or not text.split():
        return None
    try:
        return int(text.split()[0])
    except ValueError:
        return None


def read_int(path: str) -> int | None:
    return to_int(read_text(path))


def run_command(cmd: list[str], timeout: float = 2.0) -> str | None:
    """Stdout of `cmd` (even when it exits non-zero), or None if it cannot run."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def parse_stat_value(text: str | None, key: str) -> int | None:
    """Value of `key` in a "key value" per line file such as memory.stat or /proc/meminfo."""
    if not text:
        return None
    match = re.search(rf"^{re.escape(key)}:?\s+(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else None
