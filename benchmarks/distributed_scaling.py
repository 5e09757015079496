"""Scaling on one machine: 1, 2 and 4 processes training the same run (docs/distributed.md).

Every configuration trains the same config at the same global batch for --steps steps on a
generated store; samples/s is the median over the steps after --warmup, read from the run's
metrics.jsonl. Each run gets the whole machine: the cores are split between the processes
(threads = cores / processes, at least 1). Then the gradient all-reduce alone is timed between
2 gloo processes at the config's parameter count, next to the measured step time.

    python benchmarks/distributed_scaling.py                          # paper Sudoku model, batch 64
    python benchmarks/distributed_scaling.py --procs 1,2 --steps 8 --batch 32 --dtype bfloat16

Prints a Markdown table; --json FILE keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trmkit import config as config_mod  # noqa: E402
from trmkit.tasks.sudoku.build import build_sudoku  # noqa: E402
from trmkit.monitor import read_metrics  # noqa: E402
from trmkit.plan.memory_model import count_parameters  # noqa: E402


def run_training(nproc: int, threads: int, cfg_path: str, data: Path, out: Path, args) -> dict:
    overrides = [f"run.dir={out}", f"data.path={data}", f"train.batch_size={args.batch}",
                 f"train.max_steps={args.steps}", "train.eval_every=0", "data.eval_limit=8",
                 "train.checkpoint_minutes=0", "train.log_every=1", f"run.threads={threads}",
                 f"run.dtype={args.dtype}", f"run.compile={args.compile}", "train.warmup_steps=1"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "trmkit.cli", "train", cfg_path, *overrides]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "trmkit", "train", cfg_path, *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [r for r in read_metrics(out / "metrics.jsonl") if "perf/samples_per_second" in r]
    timed = [r for r in rows if r["step"] > args.warmup]
    sps = statistics.median(r["perf/samples_per_second"] for r in timed)
    step_s = statistics.median(r["perf/seconds_per_step"] for r in timed)
    summary = json.loads((out / "summary.json").read_text())
    return {"processes": nproc, "threads_each": threads, "samples_per_s": sps, "seconds_per_step": step_s,
            "timed_steps": len(timed), "wall_s": time.perf_counter() - t0,
            "peak_rss_gb_per_rank": summary.get("peak_rss_gb_per_rank", [summary.get("peak_rss_gb")])}


def _allreduce_worker(rank: int, world: int, numel: int, repeats: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.randn(numel)
    times = []
    for i in range(repeats + 2):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def time_allreduce(numel: int, world: int = 2, repeats: int = 10) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = 29600 + os.getpid() % 300
    procs = [ctx.Process(target=_allreduce_worker, args=(r, world, numel, repeats, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return q.get()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/sudoku-paper.yaml")
    ap.add_argument("--procs", default="1,2,4", help="process counts to run, e.g. 1,2,4")
    ap.add_argument("--batch", type=int, default=64, help="global batch (a multiple of every process count)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the median")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--compile", default="off", choices=["on", "off"])
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores the runs share")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cfg = config_mod.load(ROOT / args.config)
    work = Path(tempfile.mkdtemp(prefix="trmkit-dist-"))
    data = work / "data"
    build_sudoku("generate", data, num_generate=max(64, args.batch * 2), givens="24-30", test_fraction=0.1,
                 aug=1, seed=1, log=lambda m: None)
    results = []
    for n in (int(x) for x in args.procs.split(",")):
        threads = max(1, args.cores // n)
        r = run_training(n, threads, str(ROOT / args.config), data, work / f"p{n}", args)
        results.append(r)
        print(f"{n} process(es) x {threads} thread(s): {r['samples_per_s']:.2f} samples/s, "
              f"{r['seconds_per_step']:.2f} s/step", flush=True)
    base = results[0]["samples_per_s"]
    vocab = 11  # Sudoku: pad + 10 digits
    m = config_mod.replace(cfg, "model", vocab_size=vocab, seq_len=81, num_puzzle_ids=1).model
    params = count_parameters(m)
    allreduce = time_allreduce(params)
    two = next((r for r in results if r["processes"] == 2), None)
    print()
    print(f"config {args.config}, global batch {args.batch}, {args.dtype}, compile {args.compile}, "
          f"{args.cores} cores, medians of steps {args.warmup + 1}-{args.steps}")
    print()
    print("| processes x threads | samples/s | s/step | vs first row | peak RSS per rank (GB) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['processes']} x {r['threads_each']} | {r['samples_per_s']:.2f} | {r['seconds_per_step']:.2f} | "
              f"{r['samples_per_s'] / base:.2f} | {', '.join(f'{p:.2f}' for p in r['peak_rss_gb_per_rank'])} |")
    print()
    line = (f"gradient all-reduce, 2 gloo processes, {params:,} float32 parameters "
            f"({params * 4 / 2**20:.1f} MiB): {allreduce * 1000:.1f} ms")
    if two:
        line += f" = {allreduce / two['seconds_per_step']:.1%} of the 2-process step ({two['seconds_per_step']:.2f} s)"
    print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": results, "allreduce_s": allreduce,
                                               "parameters": params}, indent=2))


if __name__ == "__main__":
    main()
