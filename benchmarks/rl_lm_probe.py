"""Peak RSS and seconds of one TR-RPG update step of an LM policy: one arm per process.

    python benchmarks/rl_lm_probe.py --shape qwen2.5-0.5b --batch 8 --len 512 --dtype bfloat16 --arm efficient
    python benchmarks/rl_lm_probe.py --shape qwen2.5-0.5b --batch 8 --len 512 --dtype float32 --arm naive --cap 16GB

The step, on random weights of the shape and a synthetic batch (B rows of `--prompt-len` prompt + the rest response
tokens, random bytes; random advantages, since random weights answer nonsense):
reference log-probs (no gradients), policy log-probs with gradients, loss -A log pi + beta k3, backward, Adam step.

- efficient: LoRA (r 16, all projections) in `--dtype`, the reference the adapters-off base, every decoder layer
  checkpointed, log-probs in chunks of `--chunk` response tokens (trmkit/rl/lm).
- naive: full fine-tune, a separate reference copy, no checkpointing, the whole batch's (B, T, vocab) logits.

Each phase's peak RSS comes from trmkit's PeakMeter (VmHWM at a phase's record, sampled otherwise). With `--cap`
the arm reruns itself in a fresh memory cgroup with that hard limit (no swap): a kill by the limit is reported as
"did not fit", with the last phase it reached. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
from _capped import progress  # noqa: E402
BETA = 0.04  # the KL weight of the synthetic loss


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="qwen2.5-0.5b", help="a named shape of trmkit.rl.lm.shapes")
    p.add_argument("--batch", type=int, default=8, help="rows B")
    p.add_argument("--len", type=int, default=512, help="tokens per row, prompt + response")
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default: half of --len)")
    p.add_argument("--dtype", default="bfloat16", help="weights' dtype: float32 or bfloat16")
    p.add_argument("--arm", choices=("efficient", "naive"), default="efficient")
    p.add_argument("--chunk", type=int, default=1024, help="lm_head chunk in response tokens (efficient)")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank (efficient)")
    p.add_argument("--cap", default=None, help="hard memory limit such as 16GB (a fresh cgroup)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--allocator", choices=("default", "return"), default="default",
                   help="return: glibc unmaps every freed block of 1 MiB or more at once (trmkit.hardware.allocator)")
    return p.parse_args(argv)


def synthetic_batch(args: argparse.Namespace, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """ids (B, T) random bytes after a bos, all real (mask of ones), P, advantages (B,)."""
    gen = torch.Generator().manual_seed(seed)
    prompt_len = args.prompt_len or args.len // 2
    ids = torch.randint(3, 259, (args.batch, args.len), generator=gen)
    ids[:, 0] = 1
    advantages = torch.randn(args.batch, generator=gen)
    return ids, torch.ones_like(ids), prompt_len, advantages


def build(args: argparse.Namespace):
    """(policy, reference or None, trainable params) for the arm."""
    from trmkit.rl.lm.load import load_policy
    from trmkit.rl.lm.lora import LoraSettings, apply_lora, checkpoint_layers, decoder_layers, trainable_params

    model, _ = load_policy(model_shape=args.shape, dtype=args.dtype)
    if args.arm == "naive":
        reference = copy.deepcopy(model).requires_grad_(False)
        return model, reference, list(model.parameters())
    policy = apply_lora(model, LoraSettings(rank=args.rank))
    checkpoint_layers(policy, range(len(decoder_layers(policy))))
    return policy, None, trainable_params(policy)


def step(args, policy, reference, params, meter) -> dict:
    """One update: reference log-probs, policy log-probs, loss, backward, Adam; seconds per phase."""
    from trmkit.rl.lm.logprobs import k3_kl, response_logprobs, response_logprobs_unchunked
    from trmkit.rl.lm.lora import reference_logprobs

    ids, mask, prompt_len, advantages = synthetic_batch(args)
    seconds = {}
    for name in ("reference", "forward", "backward", "optimizer"):
        progress(name)
        t0 = time.perf_counter()
        with meter.phase(name):
            if name == "reference" and reference is not None:
                with torch.no_grad():
                    ref = response_logprobs_unchunked(reference, ids, mask, prompt_len)
            elif name == "reference":
                ref = reference_logprobs(policy, ids, mask, prompt_len, args.chunk)
            elif name == "forward" and reference is not None:
                logp = response_logprobs_unchunked(policy, ids, mask, prompt_len)
            elif name == "forward":
                logp = response_logprobs(policy, ids, mask, prompt_len, args.chunk)
            elif name == "backward":
                loss = (-advantages[:, None] * logp + BETA * k3_kl(logp, ref)).mean()
                loss.backward()
            else:
                optimizer = torch.optim.Adam(params, lr=1e-5)
                optimizer.step()
        seconds[name] = round(time.perf_counter() - t0, 2)
    tokens = int(ids.shape[0] * (ids.shape[1] - prompt_len))
    return {"seconds": seconds, "loss": round(loss.item(), 4), "tokens_updated": tokens}


def run_arm(args: argparse.Namespace) -> dict:
    from trmkit.hardware.memory import GiB, PeakMeter

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.allocator == "return":
        from trmkit.hardware.allocator import return_freed_memory
        return_freed_memory()
    meter = PeakMeter().start()
    t0 = time.perf_counter()
    progress("build")
    with meter.phase("build"):
        policy, reference, params = build(args)
    build_s = round(time.perf_counter() - t0, 2)
    result = step(args, policy, reference, params, meter)
    report = meter.report()
    meter.stop()
    return {
        "arm": args.arm, "shape": args.shape, "dtype": args.dtype, "batch": args.batch, "len": args.len,
        "prompt_len": args.prompt_len or args.len // 2, "chunk": args.chunk if args.arm == "efficient" else None,
        "fitted": True, "peak_rss_gb": report["process"]["peak_gb"],
        "ru_maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB, 3),
        "phase_peak_gb": {k: v["peak_gb"] for k, v in report.items() if k != "process"},
        "trainable_params": sum(p.numel() for p in params), "build_seconds": build_s,
        "step_seconds": round(sum(result["seconds"].values()), 2), **result,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "allocator": args.allocator,
    }


def run_capped(args: argparse.Namespace, argv: list[str]) -> dict:
    """This arm again in a fresh cgroup limited to --cap (benchmarks/_capped.py); a kill by the limit is a result."""
    from _capped import run_capped as capped

    from trmkit.config import parse_size

    child_argv = [a for i, a in enumerate(argv) if a != "--cap" and (i == 0 or argv[i - 1] != "--cap")]
    out = capped([sys.executable, __file__, *child_argv], parse_size(args.cap), f"lmprobe-{args.arm}", echo=False)
    return {"arm": args.arm, "shape": args.shape, "dtype": args.dtype, "batch": args.batch, "len": args.len, **out}


def main(argv: list[str]) -> None:
    args = parse(argv)
    result = run_capped(args, argv) if args.cap else run_arm(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
