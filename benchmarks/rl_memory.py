"""Peak RSS and time of one TR-RPG update: the naive path against trmkit's, at the same batch.

naive:     each of a prompt's k samples is its own row (k copies of the prompt through the model),
           a frozen reference copy of the model recomputes log pi_old; every role's rows go through
           the model at once with gradients (the whole batch's graph alive), one backward.
efficient: one forward per prompt, its k samples read from the same logits; log pi_old is the one
           kept from the rollout (no second model); roles one after another; the loss is
           back-propagated chunk by chunk (`rl.chunks.chunked_backward`).

Each path runs in its own fresh process (peak RSS as the kernel counts it, ru_maxrss), on the
same synthetic rollout batch (random prompts, responses sampled from the policy, random
advantages), and writes its gradients; the parent compares them.

    python benchmarks/rl_memory.py [configs/selfplay-laptop.yaml] [--scale 4] [--micro 32]

--scale multiplies the preset's per-round counts (the batch of one self-play round).
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def build(config: str, scale: int, seed: int = 0):
    from trmkit import config as C
    from trmkit.model.trm import TRM
    from trmkit.rl import programs as P
    from trmkit.rl.chunks import Group
    from trmkit.rl.config import APPS, rl_config
    from trmkit.rl.policy import draw
    from trmkit.rl.selfplay import credit_mask

    cfg = C.load(config, apps=APPS)
    cfg = C.replace(cfg, "model", vocab_size=len(P.VOCAB), seq_len=P.max_length(), num_puzzle_ids=1,
                    puzzle_emb_len=0)
    torch.manual_seed(seed)
    model = TRM(cfg.model)
    rl = rl_config(cfg)
    prompts = {"propose": (rl.proposals_per_type, rl.propose_samples), "solve": (rl.tasks_per_type, rl.attempts),
               "critique": (rl.critiques_per_type, rl.critique_samples)}
    beta = {"propose": rl.beta_propose, "solve": rl.beta_solve, "critique": rl.beta_critique}
    gen = torch.Generator().manual_seed(seed)
    groups = []
    for role in P.ROLES:
        for kind in P.TYPES:
            (n, k), lay = prompts[role], P.layout(role, kind)
            n *= scale
            prompt = torch.randint(0, len(P.VOCAB), (n, lay.prompt), generator=gen)
            inputs = torch.cat([prompt, torch.full((n, lay.response), P.BLANK)], 1).to(torch.uint8)
            d = draw(model, inputs, lay.response, k, 64, torch.no_grad, rl.temperature, generator=gen)
            adv = torch.randn(n, k, generator=gen)
            groups.append(Group(role, kind, inputs, d.responses, 1.0 / (3 * n * k), logp_old=d.token_logp,
                                advantages=adv, beta=beta[role], credit=credit_mask(role, kind),
                                temperature=rl.temperature))
    return cfg, model, groups


def naive(model, groups, clip: float) -> None:
    from trmkit.rl.loss import trrpg_loss
    from trmkit.rl.policy import response_logits, token_logprobs

    reference = copy.deepcopy(model).requires_grad_(False)  # pi_old recomputed by a frozen copy
    total = 0.0
    for g in groups:  # every group's graph stays alive until the single backward
        n, k, R = g.responses.shape
        inputs = g.inputs.repeat_interleave(k, 0)  # k copies of each prompt, one row per sample
        responses, mask = g.responses.reshape(n * k, R), g.credit.float()
        with torch.no_grad():
            old = (token_logprobs(response_logits(reference, inputs, R), responses, g.temperature) * mask).sum(-1)
        new = (token_logprobs(response_logits(model, inputs, R), responses, g.temperature) * mask).sum(-1)
        loss, _ = trrpg_loss(new, old, g.advantages.reshape(-1), g.beta, clip)
        total = total + loss.sum() * g.scale
    total.backward()


def efficient(model, groups, clip: float, micro: int) -> None:
    from trmkit.rl.chunks import chunked_backward
    from trmkit.train.step import StepContext

    ctx = StepContext(micro_batch=micro, ignore_label_id=-100, device=torch.device("cpu"))
    chunked_backward(model, groups, ctx, clip)


def child(args) -> None:
    torch.set_num_threads(args.threads)
    cfg, model, groups = build(args.config, args.scale)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if args.mode == "naive":
        naive(model, groups, cfg.sections["rl"].log_ratio_clip)
    else:
        efficient(model, groups, cfg.sections["rl"].log_ratio_clip, args.micro)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.save({n: p.grad for n, p in model.named_parameters() if p.grad is not None}, args.out)
    print(json.dumps({"mode": args.mode, "peak_rss_bytes": peak, "before_update_bytes": before,
                      "seconds": seconds, "samples": sum(g.samples for g in groups),
                      "rows": sum(g.inputs.shape[0] for g in groups),
                      "tokens": sum(g.inputs.numel() for g in groups)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default="configs/selfplay-laptop.yaml")
    p.add_argument("--scale", type=int, default=1, help="multiply the preset's per-round batch")
    p.add_argument("--micro", type=int, default=16, help="rows per chunk on the efficient path")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=("naive", "efficient"), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode:
        return child(args)
    results, grads = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("naive", "efficient"):
            out = Path(tmp) / f"{mode}.pt"
            cmd = [sys.executable, __file__, args.config, "--scale", str(args.scale), "--micro", str(args.micro),
                   "--threads", str(args.threads), "--mode", mode, "--out", str(out)]
            results[mode] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            grads[mode] = torch.load(out)
    diff = max(float((grads["naive"][n] - grads["efficient"][n]).abs().max()) for n in grads["naive"])
    scale = max(float(g.abs().max()) for g in grads["naive"].values())
    n, e = results["naive"]["peak_rss_bytes"], results["efficient"]["peak_rss_bytes"]
    print(f"batch: {results['naive']['samples']} samples of {results['naive']['rows']} prompts, "
          f"{results['naive']['tokens']} prompt tokens (scale {args.scale}); efficient chunks of {args.micro} prompts")
    for name, peak in (("naive    ", n), ("efficient", e)):
        r = results[name.strip()]
        print(f"peak RSS {name} {peak / 2**30:.3f} GiB  (before the update {r['before_update_bytes'] / 2**30:.3f}), "
              f"update {r['seconds']:.2f} s")
    print(f"ratio naive / efficient: {n / e:.2f}x memory, "
          f"{results['naive']['seconds'] / results['efficient']['seconds']:.2f}x time")
    print(f"gradients: max |naive - efficient| = {diff:.2e} (largest gradient entry {scale:.2e})")
    print(json.dumps({"naive": results["naive"], "efficient": results["efficient"], "ratio": n / e,
                      "max_grad_diff": diff, "max_grad": scale}))


if __name__ == "__main__":
    main()
