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
from pathlib import Path
from types import SimpleNamespace

import pytest

import trmkit
from trmkit.data.sudoku import build_sudoku

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
# `trmkit train ...` that writes its VmPeak (virtual: what RLIMIT_AS bounds) at exit.
CHILD = """\
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


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_limit")
    build_sudoku("generate", root / "data", num_generate=20, givens="40-45", test_fraction=0.2, seed=0,
                 log=lambda m: None)
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def wait_and_sample(proc: subprocess.Popen, timeout: float = 300) -> int:
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
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    return peak


def train(root: Path, name: str, guard: bool, limit: int | None) -> dict:
    """`trmkit train` (budget overstated to 8 GiB) under RLIMIT_AS=limit; exit code, peaks, metrics."""
    run_dir = root / name

    def set_limit():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    argv = [sys.executable, "-c", CHILD, str(root / f"{name}.vm.json"), "train", "--memory-budget", "8GiB",
            str(root / "cfg.yaml"), f"data.path={root / 'data'}", f"run.dir={run_dir}",
            f"run.memory_guard={str(guard).lower()}"]
    source = str(Path(trmkit.__file__).resolve().parents[1])  # the children run the trmkit under test
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(root / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    log = root / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root,
                                preexec_fn=set_limit)
        rss_peak = wait_and_sample(proc)
    output = log.read_text()
    vm = json.loads((root / f"{name}.vm.json").read_text())  # at exit; VmPeak is never reset
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").is_file() else []
    metrics = [json.loads(line) for line in lines]
    return {"code": proc.returncode, "output": output, "vm_peak": vm["VmPeak"],
            "rss_peak": max(rss_peak, vm["VmHWM"]),
            "losses": [m["train/loss"] for m in metrics if "train/loss" in m],
            "micro_batches": [m.get("perf/micro_batch") for m in metrics if "train/loss" in m],
            "activations": json.loads((run_dir / "plan.json").read_text())["memory"]["parts"]["activations"]}


def test_guard_completes_under_a_hard_limit_that_kills_the_unguarded_run(root):
    ref = train(root, "reference", guard=False, limit=None)
    assert ref["code"] == 0, ref["output"][-2000:]
    # Below the pinned micro-batch's need by 35% of its activations: a quarter of them fits.
    limit = ref["vm_peak"] - int(0.35 * ref["activations"])

    guarded = train(root, "guard-on", guard=True, limit=limit)
    unguarded = train(root, "guard-off", guard=False, limit=limit)
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
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from memory_ceiling import find_cgroup_root

    cgroup, why = find_cgroup_root()
    if cgroup is None:
        pytest.skip(f"no writable memory cgroup to set a hard limit on resident memory: {why}")

    build_sudoku("generate", tmp_path / "data", num_generate=20, givens="40-45", test_fraction=0.2, seed=0,
                 log=lambda m: None)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG.replace("micro_batch: 64, ", "").replace("max_steps: 2", "max_steps: 3"))
    budget = 620 * 10**6  # torch alone is ~0.3 GB here; the whole batch would need ~0.9 GB
    # Launched from a small fresh process, as from a shell: a child's ru_maxrss (what `time -v` reads)
    # starts at the high-water mark of the process that forked it, and this pytest process is larger.
    launcher = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'benchmarks')!r})\n"
                "from dataclasses import asdict\nfrom pathlib import Path\nfrom memory_ceiling import run_case\n"
                f"r = run_case('tiny', 'fresh', Path({str(tmp_path)!r}), Path({str(tmp_path / 'data')!r}), 3, "
                f"{tuple(cgroup)!r}, case=({str(cfg)!r}, {budget}, ['run.dtype=auto', 'train.eval_every=2', "
                "'train.checkpoint_every=2']))\nprint(json.dumps(asdict(r)))")
    done = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r = SimpleNamespace(**json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"\n{r.limit} limit {budget / 1e9:.2f} GB: exit {r.exit_code}, max RSS "
          f"{r.max_rss / 1e9:.3f} GB, reported {(r.reported_peak or 0) / 1e9:.3f} GB, oom_kill {r.oom_kills}, "
          f"micro-batches {r.micro_batches}, phases {r.phases}\n{r.tail}")
    assert r.exit_code == 0, r.tail
    assert not r.oom_kills
    assert 0 < r.max_rss <= budget
    assert abs(r.reported_peak - r.max_rss) <= 0.02 * r.max_rss  # the summary's peak is the kernel's
    assert all(mb < BATCH for mb in r.micro_batches)  # the plan had to fit the batch into the budget
    assert {"plan", "train step", "eval", "save"} <= set(r.phases)
