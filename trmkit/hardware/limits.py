"""Running a process under a hard memory limit, and reading what the kernel saw.

Used by the memory-ceiling tests (tests/train/test_memory_limit.py) and their long versions
(benchmarks/memory_limit.py, benchmarks/memory_ceiling.py), so that a test and a benchmark share
one harness from the package rather than importing each other.

- `Cgroup`: a fresh memory cgroup (v1 or v2) with a hard limit on resident memory, no swap,
  joined by a child between fork and exec; its peak and oom-kill counts afterwards.
- `find_cgroup_root`: where such cgroups can be made (root and a memory controller), or why not.
- `set_rlimit_as`: RLIMIT_AS (virtual memory) for a child, where no cgroup can be had.
- `TRAIN_REPORTING_VM`: Python source that runs `trmkit ARGS` and writes the process's Vm*
  high-water marks to a JSON file at exit (atexit also runs after an uncaught exception).
- `run_in_cgroup`: one command in a fresh cgroup: exit code, max RSS (ru_maxrss) and the cgroup's stats.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

MiB = 1 << 20

# `trmkit train ...` that writes its VmPeak (virtual: what RLIMIT_AS bounds) at exit.
TRAIN_REPORTING_VM = """\
import atexit, json, sys
def report(path=sys.argv[1]):
    with open("/proc/self/status") as f:
        vm = {k: int(v.split()[0]) * 1024 for k, v in (l.split(":", 1) for l in f) if k.startswith("Vm")}
    with open(path, "w") as f:
        json.dump(vm, f)
atexit.register(report)
from trmkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


class Cgroup:
    """A fresh memory cgroup with a hard limit (no swap), joined by children at fork."""

    def __init__(self, root: str, version: int, name: str, limit: int) -> None:
        self.path, self.version, self.limit = os.path.join(root, name), version, limit
        os.mkdir(self.path)
        try:
            if version == 1:
                self._write("memory.limit_in_bytes", limit)
                if os.path.exists(self._file("memory.memsw.limit_in_bytes")):
                    self._write("memory.memsw.limit_in_bytes", limit)
            else:
                self._write("memory.max", limit)
                if os.path.exists(self._file("memory.swap.max")):
                    self._write("memory.swap.max", 0)
        except OSError:
            self.remove()
            raise

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _write(self, name: str, value: int) -> None:
        with open(self._file(name), "w") as f:
            f.write(str(value))

    def _read(self, name: str) -> str:
        try:
            with open(self._file(name)) as f:
                return f.read()
        except OSError:
            return ""

    def join(self) -> None:
        """Move the calling process in (run in the child between fork and exec)."""
        self._write("cgroup.procs", os.getpid())

    def stats(self) -> dict:
        def key(text: str, name: str) -> int | None:
            found = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
            return int(found[0]) if found else None

        if self.version == 1:
            peak, failcnt = self._read("memory.max_usage_in_bytes"), self._read("memory.failcnt")
            return {"cgroup_peak": int(peak) if peak else None, "cgroup_failcnt": int(failcnt or 0),
                    "oom_kills": key(self._read("memory.oom_control"), "oom_kill")}
        events, peak = self._read("memory.events"), self._read("memory.peak")
        return {"cgroup_peak": int(peak) if peak else None, "cgroup_failcnt": key(events, "max"),
                "oom_kills": key(events, "oom_kill")}

    def remove(self) -> None:
        for _ in range(100):  # the last child may still be leaving
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)
        print(f"warning: could not remove {self.path}", file=sys.stderr)


def find_cgroup_root() -> tuple[tuple[str, int] | None, str]:
    """((mount point, version), "") of a memory cgroup hierarchy to create children in,
    else (None, why not)."""
    if os.geteuid() != 0:
        return None, "not root: cannot create memory cgroups"
    v1, v2 = None, None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, opts = right.split()[0], right.split()[-1].split(",")
            point = left.split()[4]
            if fstype == "cgroup" and "memory" in opts:
                v1 = point
            elif fstype == "cgroup2":
                try:
                    with open(os.path.join(point, "cgroup.subtree_control")) as c:
                        if "memory" in c.read().split():
                            v2 = point
                except OSError:
                    pass
    if v1 or v2:
        found = (v1, 1) if v1 else (v2, 2)
        why = probe_cgroup(*found)
        return (None, why) if why else (found, "")
    return None, "no writable memory cgroup controller (v1 memory mount or v2 with +memory)"


def probe_cgroup(root: str, version: int) -> str | None:
    """None if a child cgroup with a limit can be made here, else why not."""
    try:
        Cgroup(root, version, f"trmkit-proof-{os.getpid()}-probe", 512 * MiB).remove()
        return None
    except OSError as err:
        return f"cannot create a cgroup under {root}: {err}"


def set_rlimit_as(n: int) -> None:
    """RLIMIT_AS = n bytes for the calling process (a child's preexec_fn)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (n, n))


def run_in_cgroup(argv: list[str], limit: int, cgroup_root: tuple[str, int], name: str, log_path: Path,
                  env: dict[str, str], cwd: str | Path) -> dict:
    """`argv` in a fresh cgroup limited to `limit` bytes, output to log_path; waits for it.
    {'exit_code', 'max_rss' (ru_maxrss, what `time -v` prints), 'cgroup_peak', 'oom_kills', 'seconds'}."""
    cg = Cgroup(cgroup_root[0], cgroup_root[1], f"trmkit-{name}-{os.getpid()}", limit)
    t0 = time.perf_counter()
    try:
        with open(log_path, "w") as log:
            child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                     preexec_fn=cg.join)
            _, status, usage = os.wait4(child.pid, 0)
        result = {"exit_code": os.waitstatus_to_exitcode(status), "max_rss": usage.ru_maxrss * 1024}
    finally:
        stats = cg.stats()
        cg.remove()
    return {**result, "cgroup_peak": stats["cgroup_peak"], "oom_kills": stats["oom_kills"],
            "seconds": time.perf_counter() - t0}
