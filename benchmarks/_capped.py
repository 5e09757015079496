"""One benchmark arm in a fresh process under a hard memory cap; a kill by the cap is a result, not a crash.

The child runs in a fresh memory cgroup with that limit and no swap (trmkit.hardware.limits); where no cgroup can be
made, under RLIMIT_AS (virtual memory: looser in meaning, since torch maps more than it touches, said in the result
as `mechanism`). The child prints progress lines `phase NAME HH:MM:SS` on stderr and one JSON object as its last
`{`-line on stdout; `run_capped` returns that object, or, when the child was killed or failed, what is known:
exit code, oom kills, the last phase reached, the kernel's max RSS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def progress(phase: str) -> None:
    """A progress line the parent reads back to name the phase an arm was killed in."""
    print(f"phase {phase} {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


def _run_rlimit(argv: list[str], limit: int, log_path: Path) -> dict:
    from trmkit.hardware.limits import set_rlimit_as

    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                 preexec_fn=lambda: set_rlimit_as(limit))
        _, status, usage = os.wait4(child.pid, 0)
    return {"exit_code": os.waitstatus_to_exitcode(status), "max_rss": usage.ru_maxrss * 1024,
            "cgroup_peak": None, "oom_kills": None, "seconds": time.perf_counter() - t0}


def run_capped(argv: list[str], limit: int, name: str, echo: bool = True) -> dict:
    """`argv` (a python command) under `limit` bytes; its JSON result, or a `fitted: false` record."""
    sys.path.insert(0, str(ROOT))
    from trmkit.hardware.limits import find_cgroup_root, run_in_cgroup

    root, why = find_cgroup_root()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / f"{name}.log"
        if root is not None:
            out = run_in_cgroup(argv, limit, root, name, log, dict(os.environ), ROOT)
            mechanism = "cgroup memory limit (no swap)"
        else:
            out = _run_rlimit(argv, limit, log)
            mechanism = f"RLIMIT_AS (no cgroup: {why})"
        text = log.read_text(errors="replace")
    if echo:
        sys.stderr.write("".join(f"  [{name}] {line}\n" for line in text.splitlines()
                                 if not line.startswith("{"))[-4000:])
    return read_result(text, out, limit, mechanism)


def read_result(text: str, out: dict, limit: int, mechanism: str) -> dict:
    cap = {"cap_gb": round(limit / 2**30, 2), "cap_mechanism": mechanism,
           "cgroup_peak_gb": None if out["cgroup_peak"] is None else round(out["cgroup_peak"] / 2**30, 3)}
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if out["exit_code"] == 0 and lines:
        return {**json.loads(lines[-1]), **cap}
    reached = [line.split()[1] for line in text.splitlines() if line.startswith("phase ")]
    last = reached[-1] if reached else None
    killed = bool(out["oom_kills"]) or out["exit_code"] in (-9, 137)
    oom = killed or "out of memory" in text.lower() or "can't allocate memory" in text.lower()
    tail = [line for line in text.splitlines() if line.strip()][-3:]
    note = (f"did not fit under {limit / 2**30:.1f} GB: " + ("killed by the cap" if killed else "out of memory")
            + f" in phase {last}") if oom else f"failed (exit {out['exit_code']}) in phase {last}: {' | '.join(tail)}"
    # a dead child's own high-water mark is gone; ru_maxrss starts at the parent's mark (carried across fork and
    # exec), so the cgroup's peak, which the cap bounds, stands for it
    peak = cap["cgroup_peak_gb"] if cap["cgroup_peak_gb"] is not None else round(out["max_rss"] / 2**30, 3)
    return {"fitted": False if oom else None, "error": not oom, "exit_code": out["exit_code"],
            "oom_kills": out["oom_kills"], "last_phase": last, "peak_rss_gb": peak,
            "peak_source": "the cgroup's peak (the arm was stopped)", "ru_maxrss_gb": round(out["max_rss"] / 2**30, 3),
            "seconds": round(out["seconds"], 1), "note": note, **cap}
