"""Peak memory and seconds of one full TR-RPG round of an LM policy, one arm per fresh process under a hard cap.

    python benchmarks/rl_lm_memory.py --shape qwen2.5-0.5b --batch 8 --prompt-len 256 --response-len 256 \\
        --arms naive,efficient,trl_grpo --dtype bfloat16 --json /tmp/round.json
    python benchmarks/rl_lm_memory.py --shape qwen2.5-1.5b --memory-budget 10GB --arms efficient,naive --json OUT

A round (benchmarks/_lm_round.py) on random weights of the shape: rollouts of the three roles (propose, solve,
critique; prompts from AZR seed programs, `--group` samples per prompt, `--batch` rows per role) with a KV cache,
their texts parsed and executed in the sandbox (counted: random weights write nonsense, so most are unparsable),
then the update of all roles with synthetic advantages (every real one would be 0), so backward runs in full.

Arms: naive (full fine-tune, float32, whole-batch logits, a separate reference copy, no checkpointing); lora,
checkpoint, chunked, bf16 (naive with that one switch on); efficient (all of them, weights in --dtype, through
trmkit.rl.lm.update); trl_grpo (TRL's GRPOTrainer, PEFT LoRA + gradient checkpointing, benchmarks/_lm_trl.py;
skipped with the reason when trl is not importable).

Every arm runs with the same allocator setting (--allocator; by default glibc returns freed blocks of 1 MiB or more
at once, trmkit's `hardware.allocator` choice for tight budgets: with glibc's own thresholds freed activation
buffers stay resident and the peak RSS runs well past what is live) and the same --threads.

Each arm runs in a fresh process in a fresh memory cgroup limited to --cap (or --memory-budget, which also makes the
planner, trmkit.rl.lm.memory.pick_micro_batch, choose the efficient arm's micro-batch). An arm killed by the cap or
failing to allocate is a result: `fitted: false`, "did not fit under X GB". Per arm in the JSON: peak_rss_gb (the
process's VmHWM, the kernel's high-water mark; sandbox workers apart in sandbox_children_peak_gb; cgroup_peak_gb is
the cgroup's, children and page cache included), seconds (the round after building the model), fitted,
tokens_updated, the phase peaks and the parse/execution counts.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

ALL_ARMS = ("naive", "lora", "checkpoint", "chunked", "bf16", "efficient", "trl_grpo")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="qwen2.5-0.5b", help="a named shape of trmkit.rl.lm.shapes")
    p.add_argument("--batch", type=int, default=8, help="rows per role (prompts x --group)")
    p.add_argument("--group", type=int, default=4, help="samples per prompt")
    p.add_argument("--prompt-len", type=int, default=256, help="prompt tokens at most (longer prompts keep their end)")
    p.add_argument("--response-len", type=int, default=256, help="generated tokens at most")
    p.add_argument("--arms", default="naive,efficient,trl_grpo", help=f"comma-separated: {', '.join(ALL_ARMS)}")
    p.add_argument("--dtype", default="bfloat16", help="the efficient and trl_grpo arms' frozen weights' dtype")
    p.add_argument("--memory-budget", default=None, help="e.g. 10GB: the planner picks the efficient arm's "
                   "micro-batch for it, and it is every arm's cap")
    p.add_argument("--cap", default="12GB", help="hard memory cap of each arm's process (without --memory-budget)")
    p.add_argument("--micro-batch", type=int, default=None, help="the efficient arm's micro-batch (default: all rows)")
    p.add_argument("--chunk", type=int, default=256, help="lm_head chunk in response tokens (chunked arms)")
    p.add_argument("--seed-dir", default=str(ROOT.parent / "shared" / "data" / "rl"), help="AZR seed files")
    p.add_argument("--threads", type=int, default=None, help="torch threads per arm (default: torch's; on a "
                   "shared machine 1 avoids waiting at every barrier)")
    p.add_argument("--allocator", choices=("return", "default"), default="return",
                   help="return (every arm): glibc gives freed blocks of 1 MiB or more back at once, as trmkit's "
                   "hardware.allocator does under a tight budget; default: glibc's own thresholds")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    bad = [a for a in arms if a not in ALL_ARMS]
    if bad:
        p.error(f"--arms: unknown arm {bad[0]!r}; choose from {', '.join(ALL_ARMS)}")
    if args.batch % args.group:
        p.error(f"--batch {args.batch} must be a multiple of --group {args.group}")
    args.arm_list = arms
    return args


def child(args: argparse.Namespace) -> None:
    """Run one arm in this process and print its JSON line."""
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.allocator == "return":
        from trmkit.hardware.allocator import return_freed_memory
        return_freed_memory()
    if args.child == "trl_grpo":
        from _lm_trl import run_trl
        result = run_trl(args)
    else:
        from _lm_round import run_round
        result = run_round(args, args.child)
    print(json.dumps(result), flush=True)


def cpu() -> dict:
    """The CPU's name and its bfloat16 matrix features (lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")),
                platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Flags")), [])
    import os
    return {"name": name, "cores": len(os.sched_getaffinity(0)),
            "bf16_features": sorted(f for f in flags if f in ("avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"))}


def run_arm(args: argparse.Namespace, arm: str, argv: list[str]) -> dict:
    from _capped import run_capped

    from trmkit.config import parse_size

    if arm == "trl_grpo":
        try:
            import trl  # noqa: F401
        except ImportError as e:
            print(f"trl_grpo: skipped, trl is not importable ({e}); pip install -e '.[bench]'", flush=True)
            return {"fitted": None, "skipped": f"trl is not importable: {e}"}
    cap = parse_size(args.memory_budget or args.cap)
    print(f"{arm}: a fresh process under a {cap / 2**30:.1f} GiB cap", flush=True)
    return run_capped([sys.executable, str(Path(__file__)), *argv, "--child", arm], cap, f"lm-{arm}")


def targets(arms: dict) -> dict:
    """The figures the efficient arm is held to, where the arms ran."""
    eff = arms.get("efficient", {})
    out = {}
    if not eff.get("fitted"):
        return out
    naive, trl = arms.get("naive", {}), arms.get("trl_grpo", {})
    if naive:
        out["efficient_vs_naive"] = (round(eff["peak_rss_gb"] / naive["peak_rss_gb"], 3) if naive.get("fitted")
                                     else f"naive did not fit under {naive.get('cap_gb')} GB")
    if trl.get("fitted"):
        out["efficient_below_trl"] = eff["peak_rss_gb"] < trl["peak_rss_gb"]
    out["efficient_peak_gb"] = eff["peak_rss_gb"]
    return out


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.child:
        return child(args)
    results = {}
    for arm in args.arm_list:
        results[arm] = run_arm(args, arm, argv)
        brief = {k: results[arm].get(k) for k in ("fitted", "peak_rss_gb", "seconds", "tokens_updated", "note")}
        print(f"{arm}: {json.dumps(brief)}", flush=True)
    summary = {"shape": args.shape, "batch": args.batch, "group": args.group, "prompt_len": args.prompt_len,
               "response_len": args.response_len, "dtype": args.dtype, "memory_budget": args.memory_budget,
               "chunk": args.chunk, "threads": args.threads, "allocator": args.allocator, "cpu": cpu(),
               "arms": results, "targets": targets(results)}
    text = json.dumps(summary, indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
