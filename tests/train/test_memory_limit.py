"""The memory guard under a real hard limit: with it the run completes under the limit, without it dies.

The fast version of `benchmarks/memory_limit.py` (scenario pinned-rlimit; docs/memory.md has
the cgroup scenarios). The user pinned train.micro_batch to the whole batch and gave a
--memory-budget that overstates the machine, so the planner accepts it; the real `trmkit train`
then runs in a subprocess under RLIMIT_AS, set below what that micro-batch needs (measured by a
reference run without a limit) and above what a quarter of it needs (the memory model's estimate).
"""

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import SAFETY_TIMEOUT
from trmkit import procs
import trmkit
from trmkit import rundir
from trmkit.hardware.limits import TRAIN_REPORTING_VM, find_cgroup_root
from trmkit.tasks.sudoku.build import build_sudoku

try:
    import resource
except ImportError:  # Windows: no setrlimit
    resource = None

pytestmark = pytest.mark.skipif(
    resource is None or not sys.platform.startswith("linux"),
    reason="no hard memory limit to test under: needs Linux (RLIMIT_AS via setrlimit, /proc/PID/status)")

GiB = 1 << 30
BATCH = 64
CONFIG = f"""
run: {{seed: 0, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}}
model: {{hidden_size: 128, L_layers: 2, H_cycles: 1, L_cycles: 2, halt_max_steps: 2, puzzle_emb_len: 16}}
train: {{batch_size: {BATCH}, micro_batch: {BATCH}, max_steps: 2, warmup_steps: 1, log_every: 1,
        checkpoint_minutes: 0}}
data: {{eval_limit: 4}}
"""
CHILD = TRAIN_REPORTING_VM  # `trmkit ARGS` that writes its Vm* high-water marks at exit


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_limit")
    build_sudoku("generate", root / "data", num_generate=20, givens="40-45", test_fraction=0.2, seed=0,
                 log=lambda m: None)
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def wait_and_sample(proc: subprocess.Popen, timeout: float = SAFETY_TIMEOUT) -> int:
    """The largest VmHWM/VmRSS of the running child, sampled every 10 ms: the guard resets the
    kernel's RSS high-water mark (and so ru_maxrss) at every step."""
    peak, deadline = 0, time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                peak = max([peak] + [int(line.split()[1]) * 1024 for line in f
                                     if line.startswith(("VmHWM:", "VmRSS:"))])
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    procs.kill_group(proc)  # a no-op when it ended by itself; else it and its children
    return peak


def train(root: Path, name: str, guard: bool, limit: int | None) -> dict:
    """`trmkit train` (budget overstated to 8 GiB) under RLIMIT_AS=limit; exit code, peaks, metrics."""
    return finish(root, name, launch(root, name, guard, limit))


def launch(root: Path, name: str, guard: bool, limit: int | None) -> subprocess.Popen:
    """Start `trmkit train` under RLIMIT_AS=limit, its output to NAME.log. Call it from the main thread
    only: preexec_fn runs between fork and exec, unsafe while other threads may hold locks."""
    def set_limit():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    argv = [sys.executable, "-c", CHILD, str(root / f"{name}.vm.json"), "train", "--memory-budget", "8GiB",
            str(root / "cfg.yaml"), f"data.path={root / 'data'}", f"run.dir={root / name}",
            f"run.memory_guard={str(guard).lower()}"]
    source = str(Path(trmkit.__file__).resolve().parents[1])  # the children run the trmkit under test
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(root / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    with open(root / f"{name}.log", "w") as out:
        return procs.start(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root, preexec_fn=set_limit)


def finish(root: Path, name: str, proc: subprocess.Popen) -> dict:
    """Wait for the launched run (sampling its RSS); exit code, peaks, metrics."""
    rss_peak = wait_and_sample(proc)
    output = (root / f"{name}.log").read_text()
    vm = json.loads((root / f"{name}.vm.json").read_text())  # at exit; VmPeak is never reset
    metrics_file = rundir.path(root / name, rundir.METRICS)
    lines = metrics_file.read_text().splitlines() if metrics_file.is_file() else []
    metrics = [json.loads(line) for line in lines]
    plan = json.loads(rundir.path(root / name, rundir.PLAN).read_text())
    return {"code": proc.returncode, "output": output, "vm_peak": vm["VmPeak"],
            "rss_peak": max(rss_peak, vm["VmHWM"]),
            "losses": [m["train/loss"] for m in metrics if "train/loss" in m],
            "micro_batches": [m.get("perf/micro_batch") for m in metrics if "train/loss" in m],
            "activations": plan["memory"]["parts"]["activations"]}


def test_guard_completes_under_a_hard_limit_that_kills_the_unguarded_run(root):
    ref = train(root, "reference", guard=False, limit=None)
    assert ref["code"] == 0, ref["output"][-2000:]
    # Below the pinned micro-batch's need by 35% of its activations: a quarter of them fits.
    limit = ref["vm_peak"] - int(0.35 * ref["activations"])

    # The two limited runs side by side (one thread each, own run dir and RLIMIT_AS): what each asserts
    # is its own process's, and the pair takes the wall time of one (37 -> 27 s on 2 busy cores).
    runs = {name: launch(root, name, guard=g, limit=limit) for name, g in (("guard-on", True), ("guard-off", False))}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {name: pool.submit(finish, root, name, proc) for name, proc in runs.items()}
        guarded, unguarded = done["guard-on"].result(), done["guard-off"].result()
    print(f"\nRLIMIT_AS {limit / GiB:.2f} GiB; reference without a limit: VmPeak {ref['vm_peak'] / GiB:.2f} GiB, "
          f"RSS peak {ref['rss_peak'] / GiB:.2f} GiB\n"
          f"guard on:  exit {guarded['code']}, VmPeak {guarded['vm_peak'] / GiB:.2f} GiB, "
          f"RSS peak {guarded['rss_peak'] / GiB:.2f} GiB, micro-batches {guarded['micro_batches']}\n"
          f"guard off: exit {unguarded['code']}, VmPeak {unguarded['vm_peak'] / GiB:.2f} GiB, "
          f"RSS peak {unguarded['rss_peak'] / GiB:.2f} GiB")

    assert guarded["code"] == 0, guarded["output"][-3000:]
    assert guarded["vm_peak"] <= limit and guarded["rss_peak"] < limit
    assert re.search(r"memory guard @ step \d+: micro_batch 64 -> \d+", guarded["output"])
    assert all(mb < BATCH for mb in guarded["micro_batches"])
    # the same effective batch: the same training as the reference, up to float summation order
    assert guarded["losses"] == pytest.approx(ref["losses"], rel=1e-5)

    assert unguarded["code"] == 1, unguarded["output"][-3000:]
    assert "can't allocate memory" in unguarded["output"] or "MemoryError" in unguarded["output"]
    assert unguarded["losses"] == []  # it died in its first step


def test_the_budget_is_a_ceiling_for_the_whole_process_under_a_hard_limit_equal_to_it(tmp_path):
    """`--memory-budget B` under a cgroup limit of exactly B: the run, planner probes included (fresh
    cache), completes with nothing killed, its maximum resident set as `time -v` reports it is at most
    B, and its summary reports that same peak. (RLIMIT_AS bounds virtual memory, ~0.5-1 GB more than a
    torch process touches: no stand-in for a limit on resident memory.)"""
    cgroup, why = find_cgroup_root()
    if cgroup is None:
        pytest.skip(f"no writable memory cgroup to set a hard limit on resident memory: {why}")

    build_sudoku("generate", tmp_path / "data", num_generate=20, givens="40-45", test_fraction=0.2, seed=0,
                 log=lambda m: None)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG.replace("micro_batch: 64, ", "").replace("max_steps: 2", "max_steps: 3"))
    budget = 620 * 10**6  # torch alone is ~0.3 GB here; the whole batch would need ~0.9 GB
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "trmkit.cli", "train", str(cfg), f"data.path={tmp_path / 'data'}",
            f"run.dir={run_dir}", "run.dtype=auto", "train.eval_every=2", "train.checkpoint_every=2",
            "--memory-budget", str(budget)]
    source = str(Path(trmkit.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    # Launched from a small fresh process, as from a shell: a child's ru_maxrss (what `time -v` reads)
    # starts at the high-water mark of the process that forked it, and this pytest process is larger.
    launcher = ("import json, sys; from pathlib import Path; from trmkit.hardware.limits import run_in_cgroup\n"
                f"print(json.dumps(run_in_cgroup({argv!r}, {budget}, {tuple(cgroup)!r}, 'ceiling-test', "
                f"Path({str(tmp_path / 'output.txt')!r}), {env!r}, {str(tmp_path)!r})))")
    done = procs.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=SAFETY_TIMEOUT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    r = SimpleNamespace(**json.loads(done.stdout.strip().splitlines()[-1]))
    r.tail = "\n".join((tmp_path / "output.txt").read_text().splitlines()[-12:])
    summary = json.loads(rundir.path(run_dir, rundir.SUMMARY).read_text()) if r.exit_code == 0 else {}
    r.reported_peak = int(summary.get("peak_rss_gb", 0) * 2**30)
    r.phases = (summary.get("memory") or {}).get("phases", {})
    records = [json.loads(line) for line in rundir.path(run_dir, rundir.METRICS).read_text().splitlines()
               if line.endswith("}")] if r.exit_code == 0 else []
    r.micro_batches = [rec.get("perf/micro_batch") for rec in records if "train/loss" in rec]
    print(f"\ncgroup limit {budget / 1e9:.2f} GB: exit {r.exit_code}, max RSS "
          f"{r.max_rss / 1e9:.3f} GB, reported {(r.reported_peak or 0) / 1e9:.3f} GB, oom_kill {r.oom_kills}, "
          f"micro-batches {r.micro_batches}, phases {r.phases}\n{r.tail}")
    assert r.exit_code == 0, r.tail
    assert not r.oom_kills
    assert 0 < r.max_rss <= budget
    assert abs(r.reported_peak - r.max_rss) <= 0.02 * r.max_rss  # the summary's peak is the kernel's
    assert all(mb < BATCH for mb in r.micro_batches)  # the plan had to fit the batch into the budget
    assert {"plan", "train step", "eval", "save"} <= set(r.phases)
