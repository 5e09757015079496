"""Proof that the memory guard keeps a run alive under a real hard memory limit.

Each scenario runs the real `trmkit train` command twice in fresh processes under
the same hard limit, once with `run.memory_guard=true` and once with `false`, and
reports how each run ended and its measured peaks against the limit:

- pinned-rlimit: the user pinned `train.micro_batch` to the whole batch and gave
  a `--memory-budget` that overstates the memory (so the planner accepts it);
  the process runs under RLIMIT_AS (setrlimit in the child), set between what
  the guarded run needs and what the pinned micro-batch needs. An allocation
  over the limit fails inside torch, so the guard can halve and retry.
- pinned-cgroup: the same run in a memory cgroup (v1 memory.limit_in_bytes or
  v2 memory.max). Over the limit the kernel OOM-kills the process: there is no
  allocation error to catch, so the guard must act before the first step.
- hog-cgroup: no pinning, no budget: the planner sizes the run from the cgroup
  limit. Another program in the same cgroup, a browser whose tabs are
  processes of 128 MiB, opens tabs twice during the run, after steps
  HOG_STEPS[0] and HOG_STEPS[1]; the second time there is no longer room for
  the planned micro-batch. When the cgroup runs out, the kernel kills its
  largest process: the trainer.

The limits come from two unlimited reference runs measured first (guard off):
the pinned micro-batch (the unguarded need) and a quarter of it (the guarded
need). Peaks: the trainer's RSS peak is the largest of its ru_maxrss (os.wait4)
and VmHWM/VmRSS sampled from /proc/PID/status every 10 ms: the guard resets
the kernel's RSS high-water mark at every step (clear_refs), which ru_maxrss
and VmHWM share, so alone they would show only the last step's peak. VmPeak
(virtual, what RLIMIT_AS bounds) is not reset. For cgroups,
memory.max_usage_in_bytes (v1) or memory.peak (v2), which include the other
program, with failcnt and oom_kill.

    python benchmarks/memory_limit.py                      # all scenarios, ~3 min on 2 cores
    python benchmarks/memory_limit.py --scenarios pinned-rlimit
    python benchmarks/memory_limit.py --src /path/to/other/checkout   # trmkit from another tree
    python benchmarks/memory_limit.py --json results.json --keep out/

Cgroups need root and a writable memory controller; without them the cgroup
scenarios are skipped with the reason and pinned-rlimit still runs. The cgroup
v2 code path was written for laptops (systemd, v2) but exercised here only on v1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
BATCH = 64  # global batch; the pinned micro-batch is all of it
SMALL = BATCH // 4  # what the guard ends up with: the "guarded need" reference
HOG_STEPS = (2, 4)  # the hog takes memory after these steps
CONFIG = """\
run: {seed: 0, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: mlp_t, hidden_size: 128, L_layers: 2, H_cycles: 2, L_cycles: 2, halt_max_steps: 4,
        puzzle_emb_len: 16}
train: {batch_size: %d, max_steps: 3, warmup_steps: 1, lr: 1.0e-4, log_every: 1, checkpoint_minutes: 0}
data: {eval_limit: 6}
""" % BATCH

# The trainer: `trmkit train ARGS`, writing its own Vm* high-water marks at exit
# (atexit also runs after an uncaught exception; not after SIGKILL): trmkit.hardware.limits.
from trmkit.hardware.limits import TRAIN_REPORTING_VM as CHILD, Cgroup, find_cgroup_root, set_rlimit_as  # noqa: E402

# The other program: a browser whose tabs are processes (as Chrome's and Firefox's are).
# When the trainer's metrics.jsonl shows each step of its schedule, it opens tabs of
# TAB_BYTES (every page touched) until it holds that step's total, then keeps them.
TAB_BYTES = 128 * MiB
HOG = """\
import json, os, sys, time
metrics, schedule, tab = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
def last_step():
    try:
        with open(metrics) as f:
            return max([json.loads(l).get("step", 0) for l in f if l.endswith("}\\n")], default=0)
    except (OSError, ValueError):
        return 0
def open_tab(size):
    ready, done = os.pipe()
    if os.fork() == 0:
        page = bytearray(size)
        page[::4096] = b"\\1" * len(range(0, size, 4096))
        os.write(done, b"1")
        while True:
            time.sleep(60)
    os.read(ready, 1)
total = 0
for after, target in schedule:
    while last_step() < after:
        time.sleep(0.01)
    while total < target:
        open_tab(min(tab, target - total))
        total += min(tab, target - total)
    print(f"browser: {total / 2**30:.2f} GiB in tabs after step {after}", flush=True)
while True:
    time.sleep(60)
"""


# ----------------------------------------------------------------------------- limits

@dataclass
class Limit:
    kind: str  # "none", "rlimit" (RLIMIT_AS) or "cgroup"
    bytes: int = 0


# ----------------------------------------------------------------------------- one run

@dataclass
class Run:
    name: str
    guard: bool
    limit: Limit
    exit_code: int = 0  # negative: killed by that signal
    outcome: str = ""
    seconds: float = 0.0
    rss_peak: int = 0  # the trainer's peak RSS: ru_maxrss and 10 ms samples of VmHWM, VmRSS (bytes)
    ru_maxrss: int = 0  # alone: reset with VmHWM by the guard at every step
    vm_peak: int | None = None  # VmPeak (virtual): sampled, and written by the trainer at exit
    cgroup_peak: int | None = None  # whole cgroup, hog included
    cgroup_failcnt: int | None = None
    oom_kills: int | None = None
    hog_bytes: list = field(default_factory=list)  # what the other program held after each scheduled step
    steps: int = 0
    micro_batches: list = field(default_factory=list)  # the guard's choice after each step
    losses: list = field(default_factory=list)  # train/loss per logged step
    guard_lines: list = field(default_factory=list)
    plan_micro_batch: int | None = None
    estimated_peak: int | None = None  # the plan's memory estimate of its step
    tail: str = ""


def run_train(name: str, out: Path, args: list[str], limit: Limit, guard: bool, cgroup_root=None,
              hog: list[tuple[int, int]] | None = None, src: str | None = None,
              options: tuple[str, ...] = (), timeout: float = 600) -> Run:
    """`trmkit train OPTIONS ARGS` in a fresh process under `limit` (with the hog when given)."""
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    status = run_dir / "vm.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(out / "cache")}
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    argv = [sys.executable, "-c", CHILD, str(status), "train", *options, *args, f"run.dir={run_dir}",
            f"run.memory_guard={str(guard).lower()}"]
    cg = None
    if limit.kind == "cgroup":
        cg = Cgroup(cgroup_root[0], cgroup_root[1], f"trmkit-proof-{os.getpid()}-{name}", limit.bytes)
    preexec = cg.join if cg else (lambda: set_rlimit_as(limit.bytes)) if limit.kind == "rlimit" else None
    result = Run(name=name, guard=guard, limit=limit)
    log = open(run_dir / "output.txt", "w+")
    child = hog_proc = None
    t0 = time.perf_counter()
    try:
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out,
                                 preexec_fn=preexec)
        if hog:
            hog_proc = start_hog(run_dir, hog, cg, log)
        wstatus, usage, sampled = wait_and_sample(child, timeout)
        result.seconds = time.perf_counter() - t0
        result.exit_code = os.waitstatus_to_exitcode(wstatus)
        result.ru_maxrss = usage.ru_maxrss * 1024
        result.rss_peak = max(result.ru_maxrss, sampled["VmHWM"], sampled["VmRSS"])
        result.vm_peak = sampled["VmPeak"] or None
    finally:
        if child is not None and child.returncode is None:  # interrupted: leave nothing behind
            child.kill()
            child.wait()
        if hog_proc is not None:
            os.killpg(hog_proc.pid, signal.SIGKILL)  # the group we started: the browser and its tabs
            hog_proc.wait()
        if cg is not None:
            for k, v in cg.stats().items():
                setattr(result, k, v)
            cg.remove()
    log.seek(0)
    text = log.read()
    log.close()
    read_results(result, run_dir, status, text)
    return result


def start_hog(run_dir: Path, schedule, cg: Cgroup | None, log) -> subprocess.Popen:
    """The browser, in its own process group (its tabs are killed with it), in the cgroup."""
    return subprocess.Popen([sys.executable, "-c", HOG, str(run_dir / "metrics.jsonl"), json.dumps(schedule),
                             str(TAB_BYTES)], stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=cg.join if cg is not None else None, start_new_session=True)


def wait_and_sample(child: subprocess.Popen, timeout: float) -> tuple[int, object, dict]:
    """Wait for the child; meanwhile keep the largest VmHWM, VmRSS and VmPeak seen every 10 ms."""
    deadline, peaks = time.monotonic() + timeout, {"VmHWM": 0, "VmRSS": 0, "VmPeak": 0}
    while True:
        pid, wstatus, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(wstatus)
            return wstatus, usage, peaks
        try:
            with open(f"/proc/{child.pid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in peaks:
                        peaks[key] = max(peaks[key], int(value.split()[0]) * 1024)
        except (OSError, ValueError, IndexError):
            pass
        if time.monotonic() > deadline:
            child.kill()
        time.sleep(0.01)


def read_results(r: Run, run_dir: Path, status: Path, text: str) -> None:
    if status.is_file():
        vm = json.loads(status.read_text())
        r.vm_peak = max(r.vm_peak or 0, vm.get("VmPeak", 0)) or None
        r.rss_peak = max(r.rss_peak, vm.get("VmHWM", 0))
    lines = text.splitlines()
    r.guard_lines = [line for line in lines if line.startswith("memory guard @")]
    r.hog_bytes = [line.split(": ", 1)[1] for line in lines if line.startswith("browser: ")]
    r.tail = "\n".join(lines[-6:])
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()
               if line.endswith("}")] if metrics.is_file() else []
    records = [rec for rec in records if "step" in rec and "train/loss" in rec]
    r.steps = max((rec["step"] for rec in records), default=0)
    r.losses = [rec["train/loss"] for rec in records]
    r.micro_batches = [rec.get("perf/micro_batch") for rec in records]
    plan_file = run_dir / "plan.json"
    if plan_file.is_file():
        plan = json.loads(plan_file.read_text())
        r.plan_micro_batch = plan["micro_batch"]["value"]
        r.estimated_peak = (plan.get("memory") or {}).get("train_peak")
    if r.exit_code == 0 and (run_dir / "summary.json").is_file():
        r.outcome = "completed"
    elif r.exit_code < 0:
        sig = signal.Signals(-r.exit_code).name
        oom = f", cgroup oom_kill={r.oom_kills}" if r.oom_kills is not None else ""
        r.outcome = f"killed by {sig}{oom}"
    else:
        errors = [line for line in lines if "Error" in line or "error" in line]
        r.outcome = f"exit {r.exit_code}: " + (errors[-1].strip()[:160] if errors else "no error line")


# ----------------------------------------------------------------------------- scenarios

def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def describe(r: Run) -> str:
    peaks = [f"RSS peak {gib(r.rss_peak)} (ru_maxrss {gib(r.ru_maxrss)})"]
    if r.vm_peak is not None:
        peaks.append(f"VmPeak {gib(r.vm_peak)}")
    if r.cgroup_peak is not None:
        peaks.append(f"cgroup peak {gib(r.cgroup_peak)} (failcnt {r.cgroup_failcnt}, oom_kill {r.oom_kills})")
    if r.hog_bytes:
        peaks.append("browser " + ", ".join(r.hog_bytes))
    mbs = ",".join(str(m) for m in r.micro_batches)
    return (f"  guard {'on ' if r.guard else 'off'}: {r.outcome} after {r.steps} steps in {r.seconds:.0f} s; "
            + "; ".join(peaks) + f"\n             plan micro-batch {r.plan_micro_batch}; after each step [{mbs}]"
            + "".join(f"\n             {line[:200]}" for line in r.guard_lines))


def print_scenario(title: str, limit: Limit, runs: list[Run], why: str) -> None:
    print(f"\n{title}: {limit.kind} limit {gib(limit.bytes)} ({why})")
    for r in runs:
        print(describe(r))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="pinned-rlimit,pinned-cgroup,hog-cgroup")
    p.add_argument("--keep", default=None, help="directory for the runs (default: a temporary one, removed)")
    p.add_argument("--json", default=None, help="write every run's numbers here")
    p.add_argument("--src", default=None, help="run trmkit from this source tree (PYTHONPATH)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so children and cgroups are cleaned up
    wanted = args.scenarios.split(",")
    out = Path(args.keep or tempfile.mkdtemp(prefix="trmkit-memory-limit-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        results = run_all(out, wanted, args.src)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(s.get("proved", True) for s in results["scenarios"].values()) else 1


def run_all(out: Path, wanted: list[str], src: str | None) -> dict:
    from trmkit.tasks.sudoku.build import build_sudoku

    # its own scratch store: a rerun with --keep DIR builds the same one again over it
    build_sudoku("generate", out / "data", num_generate=60, givens="40-45", seed=0, force=True, log=lambda m: None)
    (out / "cfg.yaml").write_text(CONFIG)
    base = [str(out / "cfg.yaml"), f"data.path={out / 'data'}"]
    cgroup, why_not = find_cgroup_root()
    print(f"cgroup: {'v%d at %s' % (cgroup[1], cgroup[0]) if cgroup else 'unavailable: ' + why_not}")
    if not cgroup and any(s.endswith("cgroup") for s in wanted):
        print("falling back to RLIMIT_AS: the cgroup scenarios are skipped")
        wanted = [s for s in wanted if not s.endswith("cgroup")]

    # The needs, measured without a limit (in a roomy cgroup, so the cgroup charge is known too).
    roomy = Limit("cgroup", 16 * GiB) if cgroup else Limit("none")
    need = {mb: run_train(f"reference-mb{mb}", out, base + [f"train.micro_batch={mb}"], roomy, False,
                          cgroup, src=src) for mb in (BATCH, SMALL)}
    print("unguarded footprint (no limit, guard off):")
    for mb, r in need.items():
        print(f"  micro-batch {mb:>3}: {r.outcome}; RSS peak {gib(r.rss_peak)}, VmPeak {gib(r.vm_peak)}, "
              f"cgroup peak {gib(r.cgroup_peak)}; plan estimate {gib(r.estimated_peak)}")
    results = {"references": {mb: asdict(r) for mb, r in need.items()}, "scenarios": {}}
    big, small = need[BATCH], need[SMALL]
    pinned = base + [f"train.micro_batch={BATCH}"]
    overstated = ("--memory-budget", "8GiB")  # the user's idea of the machine, not the limit

    if "pinned-rlimit" in wanted:
        limit = Limit("rlimit", (big.vm_peak + small.vm_peak) // 2)
        runs = [run_train(f"pinned-rlimit-guard-{g}", out, pinned, limit, g, src=src, options=overstated)
                for g in (True, False)]
        why = f"halfway between VmPeak {gib(small.vm_peak)} at micro-batch {SMALL} and {gib(big.vm_peak)} at {BATCH}"
        results["scenarios"]["pinned-rlimit"] = summarize(limit, runs, why, "vm_peak", big)

    if "pinned-cgroup" in wanted:
        limit = Limit("cgroup", (big.cgroup_peak + small.cgroup_peak) // 2)
        runs = [run_train(f"pinned-cgroup-guard-{g}", out, pinned, limit, g, cgroup, src=src,
                          options=overstated) for g in (True, False)]
        why = (f"halfway between the cgroup peaks {gib(small.cgroup_peak)} at micro-batch {SMALL} "
               f"and {gib(big.cgroup_peak)} at {BATCH}")
        results["scenarios"]["pinned-cgroup"] = summarize(limit, runs, why, "cgroup_peak", big)

    if "hog-cgroup" in wanted:
        limit, schedule, why = hog_setup(big, small)
        steps = [f"train.max_steps={HOG_STEPS[1] + 3}"]
        runs = [run_train(f"hog-cgroup-guard-{g}", out, base + steps, limit, g, cgroup, hog=schedule, src=src)
                for g in (True, False)]
        results["scenarios"]["hog-cgroup"] = summarize(limit, runs, why, "cgroup_peak", big)
    return results


def hog_setup(big: Run, small: Run) -> tuple[Limit, list[tuple[int, int]], str]:
    """A limit under which the planner picks the whole batch and the guard has no reason to act
    (step peak under 80% of the budget, itself 80% of the limit); then the browser's schedule:
    first it leaves the trainer a headroom of 20% of its footprint, then it takes a quarter of
    the difference between the whole batch's and a quarter batch's footprints beyond the room
    the whole batch leaves."""
    footprint, lean = big.cgroup_peak, small.cgroup_peak
    limit = int(max(big.rss_peak, big.estimated_peak or 0) / 0.8 / 0.8 * 1.05)
    room = limit - footprint
    first = room - footprint // 5
    second = room + (footprint - lean) // 4
    why = (f"the planner's budget is 80% of it; the trainer alone peaks at {gib(footprint)} in the "
           f"cgroup, at micro-batch {SMALL} at {gib(lean)}; the browser holds {gib(first)} after step "
           f"{HOG_STEPS[0]}, {gib(second)} after step {HOG_STEPS[1]}")
    return Limit("cgroup", limit), [(HOG_STEPS[0], first), (HOG_STEPS[1], second)], why


def summarize(limit: Limit, runs: list[Run], why: str, peak_key: str, reference: Run) -> dict:
    """Proved: the guarded run completed under the limit and trained as the unlimited whole-batch
    run did (same losses: same effective batch); the unguarded run did not complete."""
    guarded, unguarded = runs
    pairs = list(zip(guarded.losses, reference.losses))
    drift = max((abs(a - b) / abs(b) for a, b in pairs), default=float("inf"))
    proved = (guarded.outcome == "completed" and guarded.rss_peak < limit.bytes
              and (getattr(guarded, peak_key) or 0) <= limit.bytes and drift < 1e-4
              and unguarded.outcome != "completed")
    title = f"{guarded.name.rsplit('-guard', 1)[0]}: {'PROVED' if proved else 'NOT PROVED'}"
    print_scenario(title, limit, runs, why)
    print(f"  losses of the guarded run vs the unlimited run at micro-batch {BATCH}, first {len(pairs)} "
          f"steps: largest relative difference {drift:.1e}")
    return {"limit": asdict(limit), "why": why, "proved": proved, "loss_drift": drift,
            "guard_on": asdict(guarded), "guard_off": asdict(unguarded)}


if __name__ == "__main__":
    sys.exit(main())
