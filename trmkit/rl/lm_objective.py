"""A causal language model as the self-play policy (rl.policy=lm), as objectives of the one trainer.

`LMSeedObjective` (`trmkit rl seed`): supervised seeding on the game's examples (azr/game.py `Game.sft_examples`:
a prompt and the text to answer it with), cross-entropy on the target's tokens and its eos, in micro-batches.
`LMSelfPlayObjective` (`trmkit rl train`): one round per trainer step: `Game.play_round` proposes, solves and
critiques through a `generate` callback that samples with rl/lm/generate.py and keeps each call's Rollout; each
scored role is matched to its rows, advantages are task-relative per (kind, role) (rl/rewards.py: leave-one-out
over a prompt's samples, divided by the round's std), and rl/lm/update.py takes rl.update_epochs TR-RPG steps.

Both build their own model (train/objective.py `Policy`): the base from rl.model_path or rl.model_shape in the
dtype the plan allows, LoRA adapters (rl.lora_rank), checkpointed decoder layers, and the micro-batch the memory
model fits into the run's budget; the trainer's own memory guard is off (the update halves its micro-batch on an
allocation failure and redoes the step). Evaluation is the game's greedy solve rate per kind and source.
Self-play on several processes (`trmkit rl train --nproc N`): the policy sharded by FSDP2, rows shared (rl/lm/fsdp.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from trmkit.config import Config, TrainConfig
from trmkit.hardware.memory import GiB, PeakMeter
from trmkit.rl import rewards as R
from trmkit.rl.azr.game import Game, Scored
from trmkit.rl.azr.policy import AZR
from trmkit.rl.config import rl_config
from trmkit.rl.lm import fsdp
from trmkit.rl.lm import policy as policy_mod
from trmkit.rl.lm.generate import Rollout, encode_prompts, left_pad, rollout
from trmkit.rl.lm.logprobs import response_logprobs
from trmkit.rl.lm.lora import ALL_PROJECTIONS
from trmkit.rl.lm.update import MicroBatch, RoleRows, UpdateSettings, step_optimizer, until_it_fits, update
from trmkit.rl.sandbox import Limits, Sandbox
from trmkit.train.optim import build_optimizer
from trmkit.train.step import Optimizers, StepContext, set_learning_rates

Log = Callable[[str], None]
ROLES = ("propose", "solve", "critique")


class LMObjective:
    """What seeding and self-play of an LM policy share: the base, the game and its sandbox, the random
    state, the model and optimizers (train/objective.py `Policy`), evaluation and exact resume."""

    name = "lm"
    distributed = False  # whether several processes may run it (train/session.py): self-play's rounds only

    def __init__(self, cfg: Config, log: Log = print):
        self.cfg, self.log = cfg, log
        self.rl = rl = rl_config(cfg)
        self.base = policy_mod.base_identity(rl.model_path, rl.model_shape, cfg.run.seed)
        self.arch = policy_mod.architecture(rl.model_path, rl.model_shape)
        self.kl_reference = rl.kl_reference
        if rl.lora_rank == 0 and rl.kl_reference > 0:
            log(f"rl: lora_rank=0 (full fine-tune) -> kl_reference={rl.kl_reference} off: the reference is the "
                "adapters-off base, and a full fine-tune keeps no second copy of the weights")
            self.kl_reference = 0.0
        self.sandbox = Sandbox(Limits(cpu_seconds=rl.sandbox_cpu_seconds, wall_seconds=rl.sandbox_wall_seconds,
                                      memory_bytes=rl.sandbox_memory_mb * 2**20), policy=AZR)
        self.rng = random.Random(cfg.run.seed)
        self.game = Game(rl, self.sandbox, self.rng, log)
        self.generator = torch.Generator().manual_seed(cfg.run.seed)
        self.sampling_seed = cfg.run.seed  # several processes: each its own (build_model), recorded in checkpoints
        self.dtype = "float32" if rl.lm_dtype == "auto" else rl.lm_dtype  # the plan decides "auto"
        self.micro: MicroBatch | None = None  # the first step starts it at the plan's (a resumed run: its own)
        self.steps, self.seconds = 0, 0.0
        self.eval_which = "eval"
        # one sampling meter per phase (a round holds its rollouts), so a transient peak inside a phase is seen
        self.meters = {name: PeakMeter().start() for name in ("round", "rollout", "update")}

    # ---- the Objective protocol -------------------------------------------------------------

    def model_fields(self) -> dict[str, int]:
        """The policy's vocabulary and longest sequence (the TRM fields the planner reads)."""
        return {"vocab_size": int(self.arch["vocab_size"]), "num_puzzle_ids": 1, "num_classes": 0,
                "seq_len": self.rl.max_prompt_tokens + self.rl.max_response_tokens}

    def identity(self) -> dict:
        return {"task": "selfplay-code", "objective": self.name, "policy": "lm", "base": self.base,
                "heldout_seed": self.rl.heldout_seed, "heldout_per_type": self.rl.heldout_per_type}

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "generator": self.generator.get_state().tolist(),
                "game": self.game.state_dict(), "micro": self.micro.state_dict() if self.micro else None,
                "steps": self.steps, "seconds": self.seconds, "base": self.base, "sampling_seed": self.sampling_seed}

    def load_state_dict(self, state: dict) -> None:
        policy_mod.check_base(state.get("base"), self.base, f"the checkpoint of {self.cfg.run.dir}")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self.game.load_state_dict(state["game"])
        if state.get("micro"):
            self.micro = MicroBatch(int(state["micro"]["size"]), log=self.log)
            self.micro.load_state_dict(state["micro"])
        self.steps, self.seconds = int(state["steps"]), float(state["seconds"])

    def close(self) -> None:
        if getattr(self.game, "counts", None):
            self.log("rl: counted and skipped: " + "; ".join(f"{k} x{v}" for k, v in self.game.counts.most_common()))
        self.game.close()
        self.sandbox.close()
        for meter in self.meters.values():
            meter.stop()

    # ---- the Policy protocol ----------------------------------------------------------------

    def memory_plan(self, dtype: str, dtype_reason: str, budget: int, log: Log) -> tuple[int, str]:
        rl = self.rl
        if rl.lm_dtype == "auto":
            self.dtype = "bfloat16" if dtype == "bfloat16" else "float32"
            log(f"rl: lm_dtype=auto -> {self.dtype} (the planner's dtype choice: {dtype_reason})")
        if rl.micro_batch:
            return rl.micro_batch, f"rl.micro_batch={rl.micro_batch}, as set"
        layers = len(rl.layer_list(int(self.arch["num_hidden_layers"])))
        return policy_mod.memory_plan(self.arch, self.round_rows(), rl.max_prompt_tokens, rl.max_response_tokens,
                                      self.dtype, rl.lora_rank, self.targets(), layers, rl.chunk_tokens, budget)

    def targets(self) -> tuple[str, ...]:
        return self.rl.target_list(ALL_PROJECTIONS)

    def round_rows(self) -> int:
        """The most sequences one forward of a step could hold (a generate call, a seeding batch)."""
        return self.cfg.train.batch_size

    def build_model(self, device: torch.device, log: Log) -> policy_mod.LMPolicy:
        rl = self.rl
        targets = None if rl.lora_targets.strip() == "all" else self.targets()
        policy = policy_mod.build(self.base, self.dtype, rl.lora_rank, targets, rl.layer_list, log).to(device)
        rank, size = fsdp.process_group()
        if size > 1:  # several processes (`--nproc`, torchrun): FSDP2, each its own sampling seed
            seeds = [fsdp.sampling_seed(self.cfg.run.seed, r) for r in range(size)]
            self.sampling_seed = seeds[rank]
            self.generator.manual_seed(self.sampling_seed)
            log(f"rl: {size} processes roll out their share of every call's rows with sampling seeds {seeds} "
                "(run.seed on rank 0; recorded in each checkpoint as sampling_seed)")
            policy.sharding = fsdp.shard(policy.lm, rank, size, bool(rl.lora_rank), log)
        return policy

    def build_optimizers(self, model: policy_mod.LMPolicy) -> Optimizers:
        inner = build_optimizer(model.trained().values(), self.cfg.train)
        return Optimizers(dense=fsdp.ShardedOptimizer(inner, model.sharding) if model.sharding else inner)

    def continue_from(self, states: list[dict], saved_world: int, rank: int, log: Log) -> None:
        """Resume a checkpoint of `saved_world` processes at another number: the game, baselines and micro-batch
        were the same on every process (rank 0's are taken); each process samples on from the generator of the
        old process of its rank, or from its own seed's start."""
        self.load_state_dict(states[0])
        if rank < len(states):
            self.generator.set_state(torch.tensor(states[rank]["generator"], dtype=torch.uint8))
        else:
            self.generator.manual_seed(self.sampling_seed)
        log(f"resume: the checkpoint was written by {saved_world} process(es): the weights, optimizer, game state "
            "and baselines continue exactly; the rows each process samples differ from an uninterrupted run's "
            f"(not bit-identical; resume with {saved_world} process(es) for that)")

    def gathered(self, policy: policy_mod.LMPolicy):
        """Several processes: the whole policy gathered for a round or an evaluation (fsdp.py)."""
        return policy.sharding.gathered() if policy.sharding is not None else contextlib.nullcontext()

    # ---- rollouts and evaluation ------------------------------------------------------------

    @contextmanager
    def phase(self, name: str, peaks: dict[str, float]) -> Iterator[None]:
        """Time and peak RSS of a phase, the largest of the step's kept in `peaks`."""
        t0 = time.perf_counter()
        with self.meters[name].phase(name):
            yield
        peaks[f"peak/{name}_gb"] = max(peaks.get(f"peak/{name}_gb", 0.0), self.meters[name].last / GiB)
        peaks[f"time/{name}_s"] = peaks.get(f"time/{name}_s", 0.0) + time.perf_counter() - t0

    def generate_fn(self, policy: policy_mod.LMPolicy, calls: list | None, peaks: dict[str, float]):
        """The game's `generate(prompts, samples, greedy) -> texts`; each call's Rollout kept in `calls`."""
        def generate(prompts: list[str], samples: int, greedy: bool) -> list[str]:
            with self.phase("rollout", peaks):
                ro = self.sample(policy, prompts, samples, greedy)
            if ro.truncated:  # counted: a prompt past rl.max_prompt_tokens keeps its last tokens
                peaks["rollout/prompts_truncated"] = peaks.get("rollout/prompts_truncated", 0) + ro.truncated
            if calls is not None:
                calls.append((list(prompts), samples, ro))
            return ro.texts
        return generate

    def sample(self, policy: policy_mod.LMPolicy, prompts: list[str], samples: int, greedy: bool) -> Rollout:
        """rollout() in the current micro-batch, halved and redone on an allocation failure."""
        rl = self.rl

        def run(texts: list[str], repeat: int, size: int) -> Rollout:
            return rollout(policy.lm, policy.tokenizer, texts, samples=repeat, max_new_tokens=rl.max_response_tokens,
                           max_prompt_tokens=rl.max_prompt_tokens, temperature=rl.temperature, micro_batch=size,
                           generator=self.generator, greedy=greedy, chunk_tokens=rl.chunk_tokens)
        if policy.sharding is not None:  # this process's rows; no retry (the others would not retry with it)
            return fsdp.sharded_rollout(policy.sharding, lambda rows: run(rows, 1, self.micro.size), prompts, samples)
        ro, _ = until_it_fits(lambda size: run(prompts, samples, size), self.micro, "rollout: ")
        return ro

    def start_micro(self, ctx: StepContext) -> None:
        if self.micro is None:
            self.micro = MicroBatch(max(1, ctx.micro_batch), log=self.log)

    @torch.no_grad()
    def evaluate(self, model: policy_mod.LMPolicy, ctx: StepContext) -> dict[str, float]:
        """The game's held-out sets, greedy: solve rate per kind and source (the first rl.eval_per_type tasks
        per kind during a run; `trmkit rl eval` sets `eval_which` to "all")."""
        self.start_micro(ctx)
        model.eval()
        with self.gathered(model):
            return dict(self.game.evaluate(self.generate_fn(model, None, {}), self.eval_which))


class LMSeedObjective(LMObjective):
    """Supervised seeding of the LM policy on the game's (prompt, target) examples."""

    name = "seed"

    def step(self, model: policy_mod.LMPolicy, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        self.start_micro(ctx)
        set_learning_rates(opts, self.steps, cfg)
        pairs = self.game.sft_examples(cfg.batch_size)
        peaks: dict[str, float] = {}
        with self.phase("update", peaks):
            stats = self.sft_update(model, opts.dense, pairs)
        self.steps += 1
        self.seconds += time.perf_counter() - t0
        return {"train/loss": stats["loss"], "train/lr": float(opts.dense.param_groups[0]["lr"]),
                "train/grad_norm": stats["grad_norm"], "seed/target_tokens": stats["tokens"],
                "seed/truncated": stats["truncated"], "seed/padding": stats["padding"],
                "perf/micro_batch": float(self.micro.size),
                "perf/samples": float(len(pairs)), **peaks}

    def encode_pairs(self, policy: policy_mod.LMPolicy, pairs: list[tuple[str, str]]
                     ) -> tuple[list[list[int]], list[list[int]], int]:
        """Prompt ids (the last rl.max_prompt_tokens), target ids + eos (the first rl.max_response_tokens),
        and how many targets were cut."""
        tok, limit = policy.tokenizer, self.rl.max_response_tokens
        prompts = encode_prompts(tok, [p for p, _ in pairs], self.rl.max_prompt_tokens)
        targets = [tok.encode(t, add_bos=False) + [tok.eos_token_id] for _, t in pairs]
        cut = sum(len(t) > limit for t in targets)
        return prompts, [t[:limit] for t in targets], cut

    def sft_update(self, policy: policy_mod.LMPolicy, optimizer: torch.optim.Optimizer,
                   pairs: list[tuple[str, str]]) -> dict[str, float]:
        """One optimizer step of token-mean cross-entropy over the targets, accumulated over micro-batches of
        rows of similar length (`length_groups`); an allocation failure halves the micro-batch and redoes the
        step."""
        prompts, targets, cut = self.encode_pairs(policy, pairs)
        lengths = [len(p) + len(t) for p, t in zip(prompts, targets)]
        tokens = sum(len(t) for t in targets)
        policy.train()
        loss, _ = until_it_fits(lambda size: sum(
            self.sft_micro(policy, [prompts[i] for i in part], [targets[i] for i in part], tokens)
            for part in length_groups(lengths, size)), self.micro, "seeding: ",
            lambda: optimizer.zero_grad(set_to_none=True))
        norm = step_optimizer(optimizer, self.rl.max_grad_norm)
        padded = sum(len(part) * (max(len(prompts[i]) for i in part) + max(len(targets[i]) for i in part))
                     for part in length_groups(lengths, self.micro.size))
        self.micro.clean_step()
        return {"loss": float(loss), "grad_norm": norm, "tokens": float(tokens), "truncated": float(cut),
                "padding": padded / sum(lengths)}

    def sft_micro(self, policy: policy_mod.LMPolicy, prompts: list[list[int]], targets: list[list[int]],
                  total_tokens: int) -> float:
        """Backward of one micro-batch's share of the step's loss: -sum log p(target) / total_tokens."""
        tok = policy.tokenizer
        device = next(policy.parameters()).device
        ids, mask = left_pad(prompts, tok.pad_token_id)
        width = max(len(t) for t in targets)
        resp = torch.full((len(targets), width), tok.pad_token_id, dtype=torch.long)
        keep = torch.zeros((len(targets), width), dtype=torch.long)
        for i, t in enumerate(targets):
            resp[i, :len(t)] = torch.tensor(t, dtype=torch.long)
            keep[i, :len(t)] = 1
        logp = response_logprobs(policy.lm, torch.cat([ids, resp], 1).to(device),
                                 torch.cat([mask, keep], 1).to(device), ids.shape[1], self.rl.chunk_tokens)
        loss = -(logp * keep.to(device)).sum() / max(1, total_tokens)
        loss.backward()
        return float(loss.detach())


PAD_SLACK = 1.25  # a seeding micro-batch's padded tokens stay within this factor of its real ones


def length_groups(lengths: list[int], size: int, slack: float | None = None) -> Iterator[list[int]]:
    """Row indices in micro-batches of at most `size` rows, shortest rows first, a new micro-batch started
    wherever padding to the next row's length would take its padded tokens past `slack` x its real tokens.
    Seeding mixes 400-byte solve prompts with 2,000-byte propose examples: padding a whole batch to its
    longest row made a step cost ~3x its real tokens (in the attention, ~9x)."""
    slack = PAD_SLACK if slack is None else slack
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    group: list[int] = []
    real = 0
    for i in order:
        n = lengths[i]
        if group and (len(group) >= size or (len(group) + 1) * n > slack * (real + n)):
            yield group
            group, real = [], 0
        group.append(i)
        real += n
    if group:
        yield group


class LMSelfPlayObjective(LMObjective):
    """Propose / solve / critique self-play of the LM policy with TR-RPG (the module docstring)."""

    name = "selfplay"
    distributed = True

    def __init__(self, cfg: Config, log: Log = print):
        super().__init__(cfg, log)
        self.stats = R.RunningStats()  # rl.baseline=running, and roles sampled once per prompt

    def round_rows(self) -> int:
        rl = self.rl
        per_call = max(rl.tasks_per_type * rl.attempts, rl.proposals_per_type * rl.propose_samples,
                       rl.critiques_per_type * rl.critique_samples)
        return 3 * per_call  # a call may hold every kind's prompts

    def state_dict(self) -> dict:
        return {**super().state_dict(), "baselines": self.stats.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stats.load_state_dict(state["baselines"])

    def step(self, model: policy_mod.LMPolicy, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        self.start_micro(ctx)
        set_learning_rates(opts, self.steps, _with_lr(cfg, self.rl.lr))
        model.eval()
        calls: list = []
        peaks: dict[str, float] = {}
        with self.phase("round", peaks), self.gathered(model):
            scored = self.game.play_round(self.generate_fn(model, calls, peaks))
        roles = self.role_rows(scored, calls)
        settings = UpdateSettings(micro_batch=self.micro.size, chunk_tokens=self.rl.chunk_tokens,
                                  log_ratio_clip=self.rl.log_ratio_clip, kl_reference=self.kl_reference,
                                  max_grad_norm=self.rl.max_grad_norm, sharding=model.sharding)
        updates: list[dict] = []
        # several processes: every one steps when any holds rows (the same scored roles everywhere)
        scored_any = any(sc.texts and float(getattr(self.rl, f"weight_{sc.role}")) > 0 for sc in scored)
        with self.phase("update", peaks):
            for _ in range(self.rl.update_epochs if (roles or (scored_any and model.sharding)) else 0):
                updates.append(update(model.lm, opts.dense, roles, settings, self.micro, log=self.log))
        self.steps += 1
        self.seconds += time.perf_counter() - t0
        metrics = self.round_metrics(scored, updates, peaks)
        metrics.update({"time/scoring_s": peaks.get("time/round_s", 0.0) - peaks.get("time/rollout_s", 0.0),
                        "train/lr": float(opts.dense.param_groups[0]["lr"]),
                        "perf/samples": float(sum(len(s.texts) for s in scored))})
        metrics.update(throughput(calls, updates, peaks))
        return metrics

    def role_rows(self, scored: list[Scored], calls: list) -> list[RoleRows]:
        """Each scored (role, kind) with its rollout rows, task-relative advantages, weight and beta."""
        rows = []
        for sc in scored:
            weight = float(getattr(self.rl, f"weight_{sc.role}"))
            if not sc.texts or weight <= 0:
                continue
            advantages = torch.tensor(self.advantages(sc), dtype=torch.float32)  # every row's, on every process
            call, span = find_rows(sc, calls)
            total = 0
            if isinstance(call, fsdp.ShardedRollout):  # several processes: the rows this one generated
                local, keep = call.held(span)
                if local is None:
                    continue
                ro, advantages, total = slice_rollout(call.local, local), advantages[keep], len(sc.texts)
            else:
                ro = slice_rollout(call, span)
            rows.append(RoleRows(rollout=ro, advantages=advantages, weight=weight, total_rows=total,
                                 beta=float(getattr(self.rl, f"beta_{sc.role}")), name=f"{sc.role}/{sc.kind}"))
        return rows

    def advantages(self, sc: Scored) -> list[float]:
        """Per row: leave-one-out over the prompt's samples / the round's std of this (kind, role)
        (rl.baseline=group), the reward where positive (expert), else the running (kind, role) baseline."""
        by_prompt: list[list[float]] = [[] for _ in sc.prompts]
        for g, r in zip(sc.group, sc.rewards):
            by_prompt[g].append(float(r))
        if self.rl.baseline == "expert":
            return [a for row in R.expert_advantages(by_prompt) for a in row]
        if self.rl.baseline == "group" and min(len(row) for row in by_prompt) >= 2:
            return [a for row in R.group_advantages(by_prompt) for a in row]
        key = (sc.kind, sc.role)
        self.stats.update(key, sc.rewards)
        return self.stats.normalize(key, sc.rewards)

    def round_metrics(self, scored: list[Scored], updates: list[dict], peaks: dict[str, float]) -> dict:
        out = {**peaks, **{f"game/{k}": float(v) for k, v in self.game.metrics.items()}}
        for sc in scored:
            if sc.rewards:
                out[f"reward/{sc.role}/{sc.kind}"] = sum(sc.rewards) / len(sc.rewards)
        if updates:
            last = updates[-1]
            out["train/loss"] = sum(u["loss"] for u in updates) / len(updates)
            out.update({f"update/{k}": float(v) for k, v in last.items() if k != "loss"})
        return out


def throughput(calls: list, updates: list[dict], peaks: dict[str, float]) -> dict[str, float]:
    """Rollout tokens per second (generated, every role) and update tokens per second (scored with gradients,
    every epoch), the keys `trmkit bench --rl` reads for either policy."""
    generated = sum(float(ro.response_mask.sum()) for _, _, ro in calls)
    updated = sum(float(u.get("tokens_updated", 0.0)) for u in updates)
    update_s = sum(float(u.get("seconds", 0.0)) for u in updates)
    return {"perf/rollout_tokens_per_s": generated / max(peaks.get("time/rollout_s", 0.0), 1e-9),
            "perf/update_tokens_per_s": updated / update_s if update_s > 0 else 0.0}


def _with_lr(cfg: TrainConfig, lr: float) -> TrainConfig:
    return dataclasses.replace(cfg, lr=lr)


def find_rows(sc: Scored, calls: list) -> tuple[Any, slice]:
    """The generate call that produced `sc` (a Rollout; several processes: an fsdp.ShardedRollout) and its rows:
    `sc`'s prompts are a run of that call's prompts (the game may score one call's prompts per kind), its texts
    the same rows' texts."""
    n = len(sc.prompts)
    for prompts, samples, ro in calls:
        if samples != sc.samples:
            continue
        for start in range(len(prompts) - n + 1):
            rows = slice(start * samples, (start + n) * samples)
            if prompts[start:start + n] == sc.prompts and ro.texts[rows] == list(sc.texts):
                return ro, rows
    raise ValueError(f"no generate call produced the {sc.role}/{sc.kind} texts the game scored: the game must "
                     "score the texts `generate` returned, prompt-major")


def slice_rollout(ro: Rollout, rows: slice) -> Rollout:
    """Rows of a rollout (every per-row tensor and text)."""
    def cut(t: Any) -> Any:
        return t[rows] if t is not None else None
    return Rollout(prompt_ids=cut(ro.prompt_ids), prompt_mask=cut(ro.prompt_mask), response_ids=cut(ro.response_ids),
                   response_mask=cut(ro.response_mask), old_logp=cut(ro.old_logp), texts=ro.texts[rows],
                   temperature=ro.temperature, sampled_logp=cut(ro.sampled_logp))
