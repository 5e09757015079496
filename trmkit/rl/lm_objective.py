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
"""

from __future__ import annotations

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
        self.game = Game(GameSettings(rl), self.sandbox, self.rng, log)
        self.generator = torch.Generator().manual_seed(cfg.run.seed)
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
                "steps": self.steps, "seconds": self.seconds, "base": self.base}

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
        return policy_mod.build(self.base, self.dtype, rl.lora_rank, targets, rl.layer_list, log).to(device)

    def build_optimizers(self, model: policy_mod.LMPolicy) -> Optimizers:
        return Optimizers(dense=build_optimizer(model.trained().values(), self.cfg.train))

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
        ro, _ = until_it_fits(lambda size: rollout(
            policy.lm, policy.tokenizer, prompts, samples=samples, max_new_tokens=rl.max_response_tokens,
            max_prompt_tokens=rl.max_prompt_tokens, temperature=rl.temperature, micro_batch=size,
            generator=self.generator, greedy=greedy, chunk_tokens=rl.chunk_tokens), self.micro, "rollout: ")
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
                "seed/truncated": stats["truncated"], "perf/micro_batch": float(self.micro.size),
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
        """One optimizer step of token-mean cross-entropy over the targets, accumulated over micro-batches
        (rows sorted by length); an allocation failure halves the micro-batch and redoes the step."""
        prompts, targets, cut = self.encode_pairs(policy, pairs)
        order = sorted(range(len(pairs)), key=lambda i: len(prompts[i]) + len(targets[i]))
        tokens = sum(len(t) for t in targets)
        policy.train()
        loss, _ = until_it_fits(lambda size: sum(
            self.sft_micro(policy, [prompts[i] for i in part], [targets[i] for i in part], tokens)
            for part in _chunks(order, size)), self.micro, "seeding: ", lambda: optimizer.zero_grad(set_to_none=True))
        norm = step_optimizer(optimizer, self.rl.max_grad_norm)
        self.micro.clean_step()
        return {"loss": float(loss), "grad_norm": norm, "tokens": float(tokens), "truncated": float(cut)}

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


def _chunks(order: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(order), size):
        yield order[start:start + size]


class LMSelfPlayObjective(LMObjective):
    """Propose / solve / critique self-play of the LM policy with TR-RPG (the module docstring)."""

    name = "selfplay"

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
        with self.phase("round", peaks):
            scored = self.game.play_round(self.generate_fn(model, calls, peaks))
        roles = self.role_rows(scored, calls)
        settings = UpdateSettings(micro_batch=self.micro.size, chunk_tokens=self.rl.chunk_tokens,
                                  log_ratio_clip=self.rl.log_ratio_clip, kl_reference=self.kl_reference,
                                  max_grad_norm=self.rl.max_grad_norm)
        updates: list[dict] = []
        with self.phase("update", peaks):
            for _ in range(self.rl.update_epochs if roles else 0):
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
            advantages = torch.tensor(self.advantages(sc), dtype=torch.float32)
            rows.append(RoleRows(rollout=match_rollout(sc, calls), advantages=advantages, weight=weight,
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


class GameSettings:
    """The rl section as the game reads it: rl.seed_files and rl.limo_files as tuples of paths (the config
    holds them comma-separated), every other key the section's own."""

    def __init__(self, rl: Any):
        self._rl = rl
        self.seed_files, self.limo_files = tuple(rl.paths(rl.seed_files)), tuple(rl.paths(rl.limo_files))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rl, name)


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


def match_rollout(sc: Scored, calls: list[tuple[list[str], int, Rollout]]) -> Rollout:
    """The rows of the generate call that produced `sc`: its prompts are a run of that call's prompts (the game
    may score one call's prompts per kind), its texts the same rows' texts."""
    n = len(sc.prompts)
    for prompts, samples, ro in calls:
        if samples != sc.samples:
            continue
        for start in range(len(prompts) - n + 1):
            rows = slice(start * samples, (start + n) * samples)
            if prompts[start:start + n] == sc.prompts and ro.texts[rows] == list(sc.texts):
                return slice_rollout(ro, rows)
    raise ValueError(f"no generate call produced the {sc.role}/{sc.kind} texts the game scored: the game must "
                     "score the texts `generate` returned, prompt-major")


def slice_rollout(ro: Rollout, rows: slice) -> Rollout:
    """Rows of a rollout (every per-row tensor and text)."""
    def cut(t: Any) -> Any:
        return t[rows] if t is not None else None
    return Rollout(prompt_ids=cut(ro.prompt_ids), prompt_mask=cut(ro.prompt_mask), response_ids=cut(ro.response_ids),
                   response_mask=cut(ro.response_mask), old_logp=cut(ro.old_logp), texts=ro.texts[rows],
                   temperature=ro.temperature, sampled_logp=cut(ro.sampled_logp))
