"""One full TR-RPG round of an LM policy in this process, for benchmarks/rl_lm_memory.py's arms (not TRL's).

The round: rollouts of the three roles one after another (propose, solve, critique; `group` samples per prompt,
KV-cache generation by trmkit.rl.lm.generate), each role's texts parsed and executed in the sandbox (proposals
validated, solver answers scored by AzrScorer, verdicts read; random weights write nonsense, so most are unparsable
and counted), then the update of all roles. Random weights answer nonsense and every real advantage would be 0, so
the update uses synthetic advantages (standard normal, seeded): every row contributes a full backward.

Arms (switches): naive = full fine-tune, float32, whole-batch logits, a separate reference copy, no checkpointing;
lora / checkpoint / chunked / bf16 = naive with that one switch on; efficient = all of them, through
trmkit.rl.lm.update (micro-batches sorted by length, dynamic padding, out-of-memory halving).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass

import torch

from _capped import progress

SEED_FILES = ("azr_7b_seed_io.jsonl", "azr_7b_code_f_seed_io.jsonl")
TEMPERATURE, CLIP, BETA, KL_REFERENCE, LR, LORA_RANK = 1.0, 0.2, 0.04, 0.04, 1e-5, 16


@dataclass(frozen=True)
class Switches:
    lora: bool = False
    checkpoint: bool = False
    chunked: bool = False
    bf16: bool = False


ARMS = {"naive": Switches(), "lora": Switches(lora=True), "checkpoint": Switches(checkpoint=True),
        "chunked": Switches(chunked=True), "bf16": Switches(bf16=True),
        "efficient": Switches(lora=True, checkpoint=True, chunked=True, bf16=True)}


def arm_dtype(arm: str, args: argparse.Namespace) -> str:
    """efficient uses --dtype; the bf16 arm bfloat16; every other arm float32."""
    if arm == "efficient":
        return args.dtype
    return "bfloat16" if ARMS[arm].bf16 else "float32"


def load_tasks(seed_dir: str, per_kind: int = 64) -> dict[str, list]:
    """AZR seed programs as tasks of each kind (the first `per_kind` of each)."""
    from pathlib import Path

    from trmkit.rl.azr.seeds import Skips, program_source, read_code_f_seeds, read_io_seeds
    from trmkit.rl.azr.tasks import AzrTask, induction_task

    folder, skips = Path(seed_dir), Skips()
    out: dict[str, list] = {"deduction": [], "abduction": [], "induction": []}
    for seed in itertools.islice(read_io_seeds(folder / SEED_FILES[0], skips), per_kind):
        program = program_source(seed.snippet, seed.imports)
        for kind in ("deduction", "abduction"):
            out[kind].append(AzrTask(kind, program, (seed.input,), (seed.output,)))
    for seed in itertools.islice(read_code_f_seeds(folder / SEED_FILES[1], skips), per_kind * 2):
        if len(seed.inputs) >= 2 and seed.message and len(out["induction"]) < per_kind:
            out["induction"].append(induction_task(program_source(seed.snippet, seed.imports), seed.inputs,
                                                   seed.outputs, seed.message))
    return out


def build(args: argparse.Namespace, arm: str):
    """(policy, separate reference or None, trainable parameters, tokenizer)."""
    from trmkit.rl.lm.load import load_policy
    from trmkit.rl.lm.lora import LoraSettings, apply_lora, checkpoint_layers, decoder_layers, trainable_params

    sw = ARMS[arm]
    model, tok = load_policy(model_shape=args.shape, dtype=arm_dtype(arm, args))
    reference = None if sw.lora else copy.deepcopy(model).requires_grad_(False)
    if sw.lora:
        model = apply_lora(model, LoraSettings(rank=LORA_RANK))
    if sw.checkpoint:
        checkpoint_layers(model, range(len(decoder_layers(model))))
    return model, reference, trainable_params(model), tok


class Round:
    """The three roles' prompts, rollouts, parsing and execution; what was parsed and run is counted."""

    def __init__(self, args: argparse.Namespace, model, tok, micro: int, meter):
        from trmkit.rl.azr.policy import AZR
        from trmkit.rl.azr.tasks import AzrScorer
        from trmkit.rl.azr.validate import Validator
        from trmkit.rl.sandbox import Sandbox

        self.args, self.model, self.tok, self.micro, self.meter = args, model, tok, micro, meter
        self.tasks = load_tasks(args.seed_dir)
        self.rng = random.Random(0)
        self.gen = torch.Generator().manual_seed(0)
        self.scorer, self.validator = AzrScorer(Sandbox(policy=AZR)), Validator(hash_checks=1)
        self.counts = {role: Counter() for role in ("propose", "solve", "critique")}
        self.children_peak = 0

    def close(self) -> None:
        self.scorer.sandbox.close()
        self.validator.close()

    def sample_children(self) -> None:
        import psutil

        rss = sum(p.memory_info().rss for p in psutil.Process().children(recursive=True))
        self.children_peak = max(self.children_peak, rss)

    def generate(self, role: str, prompts: list[str]):
        from trmkit.rl.lm.generate import rollout

        progress(f"rollout_{role}")
        with self.meter.phase(f"rollout_{role}"):
            return rollout(self.model, self.tok, prompts, samples=self.args.group,
                           max_new_tokens=self.args.response_len, max_prompt_tokens=self.args.prompt_len,
                           temperature=TEMPERATURE, micro_batch=self.micro, generator=self.gen,
                           chunk_tokens=self.args.chunk)

    def kinds(self) -> list[str]:
        return [("deduction", "abduction", "induction")[i % 3] for i in range(self.args.batch // self.args.group)]

    def propose(self):
        from trmkit.rl.azr.roles import parse_proposal, propose_prompt
        from trmkit.rl.azr.validate import Program

        kinds = self.kinds()
        ro = self.generate("propose", [propose_prompt(k, self.rng.sample(self.tasks[k], 3)) for k in kinds])
        progress("score_propose")
        with self.meter.phase("score_propose"):
            parsed = [parse_proposal(text, kinds[i // self.args.group]) for i, text in enumerate(ro.texts)]
            programs = [Program(p.program, p.inputs) for p in parsed if not isinstance(p, str)]
            self.counts["propose"].update(unparsable=len(parsed) - len(programs))
            if programs:
                self.counts["propose"].update(self.validator.validate(programs).counts)
            self.sample_children()
        return ro

    def solve(self):
        from trmkit.rl.azr.tasks import prompt

        self.solved = [self.rng.choice(self.tasks[k]) for k in self.kinds()]
        ro = self.generate("solve", [prompt(t) for t in self.solved])
        progress("score_solve")
        with self.meter.phase("score_solve"):
            items = [(self.solved[i // self.args.group], text) for i, text in enumerate(ro.texts)]
            self.verdicts = self.scorer.score(items)
            self.counts["solve"].update(v.status for v in self.verdicts)
            self.sample_children()
        return ro

    def critique(self, solve_texts: list[str]):
        from trmkit.rl.azr.roles import critique_prompt, parse_verdict

        picks = [i * self.args.group for i in range(len(self.solved))]  # the first answer to each task
        ro = self.generate("critique", [critique_prompt(self.solved[i // self.args.group], solve_texts[i])
                                        for i in picks])
        verdicts = [parse_verdict(text) for text in ro.texts]
        self.counts["critique"].update("unparsable" if v is None else "read" for v in verdicts)
        return ro


def plain_update(model, reference, optimizer, roles, sw: Switches, chunk: int) -> dict:
    """The switch arms' update: each role's whole batch at once (no micro-batches), loss as trmkit's update."""
    from trmkit.rl.lm.logprobs import k3_kl, response_logprobs, response_logprobs_unchunked
    from trmkit.rl.loss import trrpg_loss

    def score(net, ids, mask, prompt_len, grad):
        with torch.set_grad_enabled(grad):
            if sw.chunked:
                return response_logprobs(net, ids, mask, prompt_len, chunk, use_checkpoint=grad,
                                         temperature=TEMPERATURE)
            return response_logprobs_unchunked(net, ids, mask, prompt_len, TEMPERATURE)

    model.train()
    tokens = sum(float(r.rollout.response_mask.sum()) for r in roles)
    for role in roles:
        ro = role.rollout
        ids = torch.cat([ro.prompt_ids, ro.response_ids], 1)
        mask, m = torch.cat([ro.prompt_mask, torch.ones_like(ro.response_ids)], 1), ro.response_mask.float()
        if reference is not None:
            ref = score(reference, ids, mask, ro.prompt_ids.shape[1], grad=False)
        else:
            with model.disable_adapter():
                ref = score(model, ids, mask, ro.prompt_ids.shape[1], grad=False)
        logp = score(model, ids, mask, ro.prompt_ids.shape[1], grad=True) * m
        loss, _ = trrpg_loss(logp.sum(1), (ro.old_logp * m).sum(1), role.advantages, role.beta, CLIP)
        total = loss.sum() * role.weight / ro.rows + KL_REFERENCE * (k3_kl(logp, ref) * m).sum() / tokens
        total.backward()
        del loss, total, logp, ref
    torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"tokens_updated": tokens}


def plan_micro(args: argparse.Namespace, arm: str) -> tuple[int, str, float]:
    """The efficient arm's micro-batch (the planner's under --memory-budget, else --micro-batch or all rows)
    and the memory model's estimated peak (GiB) for this arm at that micro-batch."""
    from trmkit.config import parse_size
    from trmkit.rl.lm.memory import MemorySwitches, RoundShape, estimate, pick_micro_batch
    from trmkit.rl.lm.shapes import shape_config

    sw, shape = ARMS[arm], shape_config(args.shape)
    switches = MemorySwitches(dtype=arm_dtype(arm, args), lora_rank=LORA_RANK if sw.lora else None,
                              checkpointed_layers=-1 if sw.checkpoint else 0,
                              chunk_tokens=args.chunk if sw.chunked else None, reference_copy=not sw.lora)
    rows = RoundShape(args.batch, args.prompt_len, args.response_len)
    if arm == "efficient" and args.memory_budget:
        micro, est, reason = pick_micro_batch(shape, rows, switches, parse_size(args.memory_budget))
        micro = max(1, micro)
    else:
        micro = min(args.micro_batch or args.batch, args.batch) if arm == "efficient" else args.batch
        reason = f"micro_batch={micro} (" + ("--micro-batch" if arm == "efficient" and args.micro_batch
                                            else "the whole batch") + ")"
        est = estimate(shape, RoundShape(micro, args.prompt_len, args.response_len), switches)
    print(f"{arm}: {reason}", flush=True)
    return micro, reason, round(est.peak / 2**30, 2)


def update_roles(args, arm, model, reference, params, micro, rollouts) -> dict:
    from trmkit.rl.lm.update import MicroBatch, RoleRows, UpdateSettings, update

    gen = torch.Generator().manual_seed(1)
    roles = [RoleRows(ro, torch.randn(ro.rows, generator=gen), 1.0, BETA, name) for name, ro in rollouts.items()]
    optimizer = torch.optim.Adam(params, lr=LR)
    if arm != "efficient":
        return plain_update(model, reference, optimizer, roles, ARMS[arm], args.chunk)
    settings = UpdateSettings(micro_batch=micro, chunk_tokens=args.chunk, log_ratio_clip=CLIP,
                              kl_reference=KL_REFERENCE, max_grad_norm=1.0)
    metrics = update(model, optimizer, roles, settings, MicroBatch(micro))
    return {k: metrics[k] for k in ("tokens_updated", "micro_batch", "retries", "loss", "ratio")}


def run_round(args: argparse.Namespace, arm: str) -> dict:
    """Build, the three roles' rollouts and execution, the update; peaks per phase, seconds, counts."""
    from trmkit.hardware.memory import GiB, PeakMeter

    meter = PeakMeter().start()
    micro, reason, estimated = plan_micro(args, arm)
    t0 = time.perf_counter()
    progress("build")
    with meter.phase("build"):
        model, reference, params, tok = build(args, arm)
    t1 = time.perf_counter()
    game = Round(args, model, tok, micro, meter)
    try:
        rollouts = {"propose": game.propose(), "solve": game.solve()}
        rollouts["critique"] = game.critique(rollouts["solve"].texts)
        progress("update")
        with meter.phase("update"):
            updated = update_roles(args, arm, model, reference, params, micro, rollouts)
    finally:
        game.close()
    t2 = time.perf_counter()
    report = meter.report()
    meter.stop()
    return {"arm": arm, "fitted": True, "peak_rss_gb": report["process"]["peak_gb"],
            "seconds": round(t2 - t1, 1), "build_seconds": round(t1 - t0, 1),
            "tokens_updated": int(updated.pop("tokens_updated")),
            "tokens_generated": int(sum(r.response_mask.sum() for r in rollouts.values())),
            "rows_per_role": args.batch, "micro_batch": micro, "micro_batch_reason": reason,
            "estimated_peak_gb": estimated, "dtype": arm_dtype(arm, args), "switches": asdict(ARMS[arm]),
            "chunk_tokens": args.chunk if ARMS[arm].chunked else None,
            "phase_peak_gb": {k: v["peak_gb"] for k, v in report.items() if k != "process"},
            "sandbox_children_peak_gb": round(game.children_peak / GiB, 3),
            "counts": {role: dict(c) for role, c in game.counts.items()},
            "trainable_params": sum(p.numel() for p in params), "update": updated,
            "threads": torch.get_num_threads()}
