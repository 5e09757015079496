"""trmkit next to the TRM reference code, same machine, same time, interleaved pairs (docs/results.md).

    git clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels /tmp/trm-ref   # outside this repository
    pip install einops pydantic                                                          # what its models import
    python benchmarks/reference_side_by_side.py --reference /tmp/trm-ref [--pairs 3] [--compile]

What runs on each side, at the paper's Sudoku config (mlp_t, D=512, 2 layers, T=3, n=6,
N_sup=16, 16 puzzle-embedding positions, halting exploration 0.1), batch --batch (32), --threads
(2) threads, bf16 (--dtype):

- reference: its own `models/` (the TRM, `ACTLossHead` with stable-max cross-entropy, the
  sparse-embedding sign-SGD), imported from the checkout unchanged: they run on a CPU as they
  are. Its `pretrain.py` is not run: it hard-codes CUDA, imports the CUDA-only `adam_atan2`
  extension, wandb and its own data loader. This script does what its `train_batch` does for
  one process: `initial_carry` once, `model(carry=..., batch=...)`, `(loss / batch).backward()`,
  each optimizer's `step()` and `zero_grad()`. Adam-atan2 is trmkit's pure-PyTorch one on both
  sides (the same update rule), so the optimizer costs the same. Batches are random
  Sudoku-shaped tensors (tokens 1-10), a fresh one each step, as its loader would give.
  Its `forward_dtype` is set to --dtype (the reference casts weights and activations itself).
- trmkit: `trmkit.bench`'s session (the training loop's model, optimizers and `run_step`, the step the loop runs),
  autocast in --dtype, the whole batch in one micro-batch, no activation checkpointing, and
  the planner's `fused_inference` choice (on for eager bf16 on a CPU: no-gradient calls use
  oneDNN's fused matmuls; off under --compile).

Each measurement runs in its own fresh process (nothing one side sets, such as allocator
settings, leaks into the other), warms up --warmup steps, then times --steps steps; the sides
alternate (reference, trmkit, reference, trmkit, ...) and the ratio of each pair is printed:
trmkit samples/s over the reference's. --compile compiles the whole model on both sides.

--reference-keeps-freed-memory gives the reference's fresh process trmkit's glibc setting
(`keep_freed_memory`: freed activation buffers stay in the heap instead of being unmapped and
faulted back in), so that the pairs compare the models and steps alone.

--same-process builds both sides in one process and alternates single steps (reference,
trmkit, then trmkit, reference, ...) for --steps rounds: on a noisy shared machine both sides
see the same load, so the per-round ratios are much tighter than the pairs'. The process's
allocator settings are then trmkit's for both sides, which can only help the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB, SEQ, PUZZLE_IDS = 11, 81, 1  # Sudoku: pad + 10 digits, 81 cells, one puzzle identifier


def reference_step_fn(ref: Path, batch: int, dtype: str, compile_model: bool):
    """A closure doing one training step of the reference's own model, as its train_batch does."""
    import torch

    sys.path.insert(0, str(ref))
    from models.losses import ACTLossHead  # noqa: E402  (the reference checkout's)
    from models.recursive_reasoning.trm import TinyRecursiveReasoningModel_ACTV1  # noqa: E402
    from models.sparse_embedding import CastedSparseEmbeddingSignSGD_Distributed  # noqa: E402

    sys.path.insert(0, str(ROOT))
    from trmkit.train.optim import AdamAtan2

    arch = dict(batch_size=batch, seq_len=SEQ, puzzle_emb_ndim=512, num_puzzle_identifiers=PUZZLE_IDS,
                vocab_size=VOCAB, H_cycles=3, L_cycles=6, H_layers=0, L_layers=2, hidden_size=512, expansion=4,
                num_heads=8, pos_encodings="none", halt_max_steps=16, halt_exploration_prob=0.1,
                forward_dtype=dtype, mlp_t=True, puzzle_emb_len=16, no_ACT_continue=True)
    torch.manual_seed(0)
    model = ACTLossHead(TinyRecursiveReasoningModel_ACTV1(arch), loss_type="stablemax_cross_entropy")
    optimizers = [CastedSparseEmbeddingSignSGD_Distributed(model.model.puzzle_emb.buffers(), world_size=1,
                                                           lr=1e-4, weight_decay=1.0),
                  AdamAtan2(model.parameters(), lr=1e-4, weight_decay=1.0, betas=(0.9, 0.95))]
    if compile_model:
        model = torch.compile(model)
    gen = torch.Generator().manual_seed(1)

    def new_batch():
        cells = torch.randint(1, VOCAB, (batch, SEQ), generator=gen, dtype=torch.int32)
        return {"inputs": cells, "labels": torch.randint(1, VOCAB, (batch, SEQ), generator=gen, dtype=torch.int32),
                "puzzle_identifiers": torch.zeros(batch, dtype=torch.int32)}

    state = {"carry": None}

    def step():
        b = new_batch()
        if state["carry"] is None:
            state["carry"] = model.initial_carry(b)
        state["carry"], loss, _, _, _ = model(carry=state["carry"], batch=b, return_keys=[])
        ((1 / batch) * loss).backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()

    return step


def trmkit_step_fn(batch: int, dtype: str, compile_model: bool, overrides: list[str] | None = None):
    sys.path.insert(0, str(ROOT))
    from trmkit import config as config_mod
    from trmkit.bench.session import bench_settings, build_session
    from trmkit.train.loop import run_step

    cfg = config_mod.load(ROOT / "configs" / "sudoku-paper.yaml", [
        f"train.batch_size={batch}", f"train.micro_batch={batch}", f"run.dtype={dtype}",
        f"run.compile={'on' if compile_model else 'off'}", "run.grad_checkpointing=off", "data.path=",
        f"model.vocab_size={VOCAB}", f"model.seq_len={SEQ}", f"model.num_puzzle_ids={PUZZLE_IDS}",
        *(overrides or [])])
    s = build_session(cfg, bench_settings(cfg), compile_target="model")

    def step():
        run_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)

    return step


def worker(args) -> None:
    """One side's measurement, in this (fresh) process: JSON on stdout."""
    import torch

    torch.set_num_threads(args.threads)
    if args.worker == "reference" and args.reference_keeps_freed_memory:
        sys.path.insert(0, str(ROOT))
        from trmkit.hardware.allocator import keep_freed_memory
        keep_freed_memory()  # what trmkit's planner sets for itself (run.keep_freed_memory=auto, glibc)
    step = (reference_step_fn(Path(args.reference), args.batch, args.dtype, args.compile) if args.worker == "reference"
            else trmkit_step_fn(args.batch, args.dtype, args.compile, args.trmkit))
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"side": args.worker, "seconds_per_step": med, "samples_per_s": args.batch / med,
                      "times": times}))


def interleaved(args) -> None:
    """--same-process: both sides built in this one process, their steps alternating one by one
    (reference, trmkit, trmkit, reference, ...), so a busy machine slows both alike; a ratio per round.
    The process's allocator settings are trmkit's for both (the reference gains from them too)."""
    import torch

    torch.set_num_threads(args.threads)
    ours = trmkit_step_fn(args.batch, args.dtype, args.compile, args.trmkit)
    ref = reference_step_fn(Path(args.reference), args.batch, args.dtype, args.compile)
    for _ in range(args.warmup):
        ref(), ours()
    times: dict[str, list[float]] = {"reference": [], "trmkit": []}
    for i in range(args.steps):
        order = (("reference", ref), ("trmkit", ours)) if i % 2 == 0 else (("trmkit", ours), ("reference", ref))
        for name, step in order:
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    ratios = sorted(r / o for r, o in zip(times["reference"], times["trmkit"]))
    mode = "compiled (whole model)" if args.compile else "eager"
    print(f"{mode}, batch {args.batch}, {args.dtype}, {args.threads} threads, one process, steps alternating, "
          f"{args.steps} rounds after {args.warmup} warm-up")
    for name in ("reference", "trmkit"):
        print(f"{name}: median {args.batch / statistics.median(times[name]):.2f} samples/s "
              f"(steps {min(times[name]):.2f}-{max(times[name]):.2f} s)")
    q = len(ratios) // 4
    print(f"trmkit / reference per round: median {statistics.median(ratios):.3f}, "
          f"IQR {ratios[q]:.3f}-{ratios[-q - 1]:.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "times": times, "ratios": ratios}, indent=2))


def measure(side: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", side, "--reference", args.reference, "--batch", str(args.batch),
           "--dtype", args.dtype, "--threads", str(args.threads), "--steps", str(args.steps),
           "--warmup", str(args.warmup)] + (["--compile"] if args.compile else []) \
        + (["--reference-keeps-freed-memory"] if args.reference_keeps_freed_memory else []) \
        + [f"--trmkit={o}" for o in args.trmkit]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", required=True, help="a checkout of the TRM reference code (outside this repo)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile the whole model on both sides")
    ap.add_argument("--json", default=None)
    ap.add_argument("--same-process", action="store_true",
                    help="both sides in one process, steps alternating one by one (--steps rounds)")
    ap.add_argument("--reference-keeps-freed-memory", action="store_true",
                    help="fresh processes: give the reference's process trmkit's glibc setting too "
                         "(keep_freed_memory), as --same-process does")
    ap.add_argument("--trmkit", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for trmkit's side, e.g. --trmkit run.fused_inference=on (repeatable)")
    ap.add_argument("--worker", choices=["reference", "trmkit"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not (Path(args.reference) / "models" / "recursive_reasoning" / "trm.py").is_file():
        raise SystemExit(f"{args.reference}: not a checkout of the TRM reference code (no models/recursive_reasoning/"
                         "trm.py); clone https://github.com/SamsungSAILMontreal/TinyRecursiveModels there")
    if args.same_process:
        return interleaved(args)
    pairs = []
    for i in range(args.pairs):
        ref, ours = measure("reference", args), measure("trmkit", args)
        pairs.append((ref, ours))
        print(f"pair {i + 1}: reference {ref['samples_per_s']:.2f} samples/s, trmkit {ours['samples_per_s']:.2f} "
              f"samples/s, ratio {ours['samples_per_s'] / ref['samples_per_s']:.3f}", flush=True)
    mode = "compiled (whole model)" if args.compile else "eager"
    print(f"\n{mode}, batch {args.batch}, {args.dtype}, {args.threads} threads, median of {args.steps} steps "
          f"after {args.warmup} warm-up, each side in a fresh process, alternating\n")
    print("| pair | reference samples/s | trmkit samples/s | ratio |")
    print("|---|---|---|---|")
    for i, (ref, ours) in enumerate(pairs):
        print(f"| {i + 1} | {ref['samples_per_s']:.2f} | {ours['samples_per_s']:.2f} | "
              f"{ours['samples_per_s'] / ref['samples_per_s']:.2f} |")
    ratios = [o["samples_per_s"] / r["samples_per_s"] for r, o in pairs]
    print(f"\nratio median {statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "pairs": pairs, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
