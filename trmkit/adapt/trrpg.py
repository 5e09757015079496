"""`trmkit adapt --objective tr-rpg`: TR-RPG's policy gradient from the checker's reward, as an objective of the
one trainer (train/objective.py: the loop calls `step`; the rounds stay hooks, adapt/rounds.py).

One trainer step, top to bottom:

  1. rollout: adapt.rpg_problems problems of the adapt part, drawn by a generator seeded with the step; one
     forward of each at K supervision steps from the initial carry with the live weights; adapt.trajectories
     tries per problem, each cell drawn from the model's own distribution of the answer logits / adapt.rpg_temperature
     (`cell_logp`: stable-max for a model trained with it, model.loss; softmax otherwise);
  2. reward: the checker's verdict on each try, 1 or 0; advantages: rl/rewards.py `group_advantages`, the
     task-relative baseline of the problem's group (each try's reward minus the mean of its other tries),
     divided by the step's standard deviation; a problem whose tries all score alike gives no gradient;
  3. update: adapt.rpg_epochs optimizer steps, each of
         mean over tries      rl/loss.py trrpg_loss: w * (-A + rpg_beta * log w), w = pi_theta / pi_old, log w
                              clipped to rpg_clip (w = 1 at the first epoch; the later ones update on tries an
                              older policy made, which w corrects)
       + kl_coef    x mean over problems   rl/loss.py reference_kl: KL(pi_theta || pi_start) over the answer
                              cells, pi_start the starting run's weights in a frozen copy (0.5M parameters)
       + rpg_replay x mean over samples    rl/loss.py sft_loss: -log p(label) of adapt.rpg_problems samples of
                              the original training stream (its store, curriculum or generator), old skill kept
     A step with no term that could move the weights (every advantage 0, every weight 0) takes no optimizer
     step: weight decay alone would otherwise move them.

Why cells drawn from the predicted distribution, not train/select.py's noise trajectories: a policy gradient
weighs each try by log pi(try), and a try drawn cell by cell from the model's distribution has an exact probability (the
product of its cells', as rl/policy.py's TRM policy), while the argmax of a noised carry is a deterministic
function of the noise with no probability to weigh. One forward gives all G tries of a problem.

Departures from the supervised trainer and from rl/selfplay.py, and why:
- The policy is the K-th supervision step from the initial carry, the earlier K - 1 without gradients (as
  rl/policy.py), not the trainer's persistent ACT slots: pi_old must be the policy the tries came from.
- The halting head is not trained (no reward reaches it); the supervised replay term trains only the cells.
- The replay term is the cross-entropy of the K-th step from the initial carry (the policy's own likelihood, under
  the model's loss: stable-max or softmax), not the trainer's deep supervision over the ACT slots.
- The policy is the distribution the model was trained to give (`cell_logp`). A softmax over a stable-max model's
  logits (tens of units apart) is near one-hot and hypersensitive: on a Sudoku model one update at lr 6.7e-5 moved
  half the tries' log-probabilities by more than 1 and put 41 nats between the policy and the starting model.
- Under train.mask_given, cells the input gives are set to their argmax, not drawn (no credit is given there).
- An allocation failure halves the micro-batch (the memory guard's on_oom) as the trainer's step does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from trmkit import rundir
from trmkit.adapt.config import AdaptConfig
from trmkit.adapt.solve import verdicts
from trmkit.config import Config, ConfigError, TrainConfig
from trmkit.data.stream import eval_batches
from trmkit.model.losses import IGNORE, log_probs
from trmkit.model.trm import TRM
from trmkit.rl.loss import gather_logprobs, reference_kl, sft_loss, trrpg_loss
from trmkit.rl.rewards import group_advantages
from trmkit.train import halting
from trmkit.train.distributed import SINGLE
from trmkit.train.evaluate import evaluate
from trmkit.train.init import init_from
from trmkit.train.session import Data, open_splits, training_stream
from trmkit.train.step import (GradientUndo, Optimizers, StepContext, answer_cells, apply_updates,
                               labels_to_tensor, over_chunks, set_learning_rates)

Log = Callable[[str], None]
RPG = 2  # this objective's draws: default_rng([seed, RPG, step]), apart from the stream's (adapt/stream.py MIX)


@dataclasses.dataclass
class Tries:
    """One step's rollout: rpg_problems problems, G tries each."""

    inputs: torch.Tensor  # (P, L) token ids
    pids: torch.Tensor  # (P,)
    answers: torch.Tensor  # (P, G, L) int64, drawn cell by cell
    logp_old: torch.Tensor  # (P, G) log pi_old(try): the sum over the credited cells
    credit: torch.Tensor  # (P, L) bool: the cells drawn and credited (all, or those the input does not give)
    rewards: np.ndarray  # (P, G) the checker's verdicts, 1.0 / 0.0
    advantages: torch.Tensor  # (P, G)
    logp_start: torch.Tensor | None = None  # (P, L, V) log pi_start per cell (kl_coef > 0): once for all updates


def policy_logits(model: TRM, x: torch.Tensor, pids: torch.Tensor, k: int, ctx: StepContext
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(answer logits (b, L, V) float32, the step's own logits) of the K-th supervision step from the initial
    carry; the K - 1 before it without gradients."""
    carry = model.initial_carry(x.shape[0], ctx.device)
    z_H, z_L = carry.z_H, carry.z_L  # (b, S, D)
    with torch.no_grad():
        for _ in range(k - 1):
            with ctx.autocast():
                z_H, z_L, _, _ = model(z_H, z_L, x, pids)
    with ctx.autocast():
        _, _, logits, _ = model(z_H, z_L, x, pids)
    return model.answer_logits(logits).float(), logits.float()


class TrRpg:
    """The TR-RPG arm of `trmkit adapt` (module docstring); also holds the rounds' kept answers (adapt/rounds.py
    reads and adds to them as it does to adapt/stream.py's MixedStream), so every checkpoint holds them."""

    name = "adapt-tr-rpg"

    def __init__(self, cfg: Config, acfg: AdaptConfig, source, sampler=None, scorer=None, log: Log = print):
        self.cfg, self.acfg, self.source, self.scorer, self.log = cfg, acfg, source, scorer, log
        if source.problems.meta.seq_len != cfg.model.seq_len:
            raise ConfigError(f"adapt.objective=tr-rpg: the new source's rows are {source.problems.meta.seq_len} "
                              f"tokens, the run's {cfg.model.seq_len}: the TR-RPG arm adapts at the run's own size "
                              "only (not written for another grid yet); use the default objective, pseudo")
        self.identity_ = json.loads(rundir.path(Path(acfg.base_run), rundir.DATA_META).read_text(encoding="utf-8"))
        cap = halting.parse_auto(acfg.steps)
        self.k = cfg.model.halt_max_steps if cap is not None else int(acfg.steps)
        generated = cfg.data.stream == "generate"
        self.data = Data()
        self.data.train, self.data.test = open_splits(cfg.data.path, need_train=not generated)
        meta = (self.data.train or self.data.test).meta
        self.ignore = meta.ignore_label_id
        self.given = (torch.tensor(meta.given_tokens, dtype=torch.int64)
                      if cfg.train.mask_given and meta.given_tokens else None)
        self.replay = training_stream(cfg, self.data, SINGLE, sampler, log) if acfg.rpg_replay > 0 else None
        self.reference: TRM | None = None
        self.kept: dict[int, np.ndarray] = {}
        self.steps, self.replayed, self.adapted = 0, 0, 0
        self.reward_sum, self.reward_count = 0.0, 0
        log(f"adapt: tr-rpg: each step {acfg.rpg_problems} problems x {acfg.trajectories} tries, cells drawn from "
            f"{cfg.model.loss}(logits / {acfg.rpg_temperature:g}) at K={self.k} (a try's probability is exact; noise "
            f"trajectories have none); reward = the checker's verdict; baseline = the problem's other tries; "
            f"{acfg.rpg_epochs} update(s) a step; KL to the starting model x{acfg.kl_coef:g}; supervised replay of "
            f"the original training set x{acfg.rpg_replay:g}; beta {acfg.rpg_beta:g}, log w clipped to "
            f"{acfg.rpg_clip:g} (adapt/trrpg.py)")

    # ---- what the rounds use (as adapt/stream.py MixedStream) ------------------------------------

    def keep(self, labels: Mapping[int, np.ndarray]) -> None:
        """Record accepted answers (problem -> label); counted and checkpointed, never trained on."""
        for p, y in labels.items():
            self.kept.setdefault(int(p), np.asarray(y, dtype=np.int64))

    def round_reward(self) -> float:
        """The mean reward of the tries since the last call (NaN: none)."""
        mean = self.reward_sum / self.reward_count if self.reward_count else float("nan")
        self.reward_sum, self.reward_count = 0.0, 0
        return mean

    def start(self, model: TRM, opts: Optimizers, log: Log) -> None:
        """A fresh run starts from the base run's evaluation weights (the trainer does this only for a store)."""
        init_from(model, opts.ema, self.cfg.train.init_from, list(self.identity_.get("vocab", [])), log)

    # ---- the Objective protocol --------------------------------------------------------------------

    def model_fields(self) -> dict[str, int]:
        m = self.cfg.model
        return {"vocab_size": m.vocab_size, "seq_len": m.seq_len, "num_puzzle_ids": m.num_puzzle_ids,
                "num_classes": m.num_classes}

    def identity(self) -> dict[str, Any]:
        return dict(self.identity_)  # the base run's store: `trmkit eval RUN2` scores its held-out split as RUN's

    def close(self) -> None:
        """Nothing held outside the process."""

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "replayed": self.replayed, "adapted": self.adapted,
                "reward": [self.reward_sum, self.reward_count],
                "kept": {str(p): self.kept[p].tolist() for p in sorted(self.kept)},
                "replay": self.replay.state_dict() if self.replay is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "adapted" not in state or "kept" not in state:
            raise ValueError("the checkpoint's position is not a tr-rpg adaptation's: resume it with the command "
                             "and objective that made it")
        self.steps, self.replayed, self.adapted = int(state["steps"]), int(state["replayed"]), int(state["adapted"])
        self.reward_sum, self.reward_count = float(state["reward"][0]), int(state["reward"][1])
        self.kept = {}
        self.keep({int(p): np.asarray(y, np.int64) for p, y in state["kept"].items()})
        if self.replay is not None and state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])

    @torch.no_grad()
    def evaluate(self, model: TRM, ctx: StepContext) -> dict[str, float]:
        """The base run's held-out split (data.path's test split), as `trmkit train` evaluates a run."""
        split = self.data.test
        if split is None:
            return {}
        ectx = dataclasses.replace(ctx, ignore_label_id=self.ignore,
                                   given_tokens=self.given.to(ctx.device) if self.given is not None else None)
        batches = eval_batches(split, max(1, self.cfg.train.batch_size), self.cfg.data.eval_limit or None)
        scorer = self.scorer(split) if self.scorer is not None else None
        return evaluate(model, batches, ectx, split.meta.blank_id, scorer)

    # ---- one step ----------------------------------------------------------------------------------

    def step(self, model: TRM, opts: Optimizers, cfg: TrainConfig, ctx: StepContext, on_oom=None
             ) -> dict[str, float]:
        set_learning_rates(opts, self.steps, cfg)
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence([self.cfg.run.seed, RPG, self.steps])
                                                .generate_state(1)[0]))
        tries = self.rollout(model, ctx, gen)
        replay = self._replay_batch(ctx)
        signal = bool((tries.advantages != 0).any()) or any(
            v > 0 for v in (self.acfg.rpg_beta, self.acfg.kl_coef)) or replay is not None
        model.train()
        stats: dict[str, list] = {}
        for _ in range(self.acfg.rpg_epochs if signal else 0):
            stats = self._backward(model, ctx, tries, replay, on_oom)
            apply_updates(model, opts)
        self.steps += 1
        self.adapted += tries.answers.shape[0] * tries.answers.shape[1]
        self.replayed += 0 if replay is None else replay[0].shape[0]
        self.reward_sum += float(tries.rewards.sum())
        self.reward_count += tries.rewards.size
        return self._metrics(tries, stats, replay, signal, opts)

    @torch.no_grad()
    def rollout(self, model: TRM, ctx: StepContext, gen: torch.Generator) -> Tries:
        """rpg_problems problems of the adapt part, G tries each, and their rewards and advantages."""
        a, src = self.acfg, self.source
        pick = np.random.default_rng([self.cfg.run.seed, RPG, self.steps]).choice(
            src.adapt, size=min(a.rpg_problems, len(src.adapt)), replace=False)
        x_np = src.problems.inputs[pick]
        x = torch.from_numpy(np.ascontiguousarray(x_np)).to(ctx.device)
        pids = torch.from_numpy(np.asarray(src.problems.puzzle_ids[pick])).to(ctx.device, torch.int64)
        model.eval()
        answers, logp, credits = [], [], []
        for sl in _slices(len(pick), ctx.micro_batch):
            logits, _ = policy_logits(model, x[sl], pids[sl], self.k, ctx)  # (b, L, V)
            credit = answer_cells(x[sl, :logits.shape[1]], self.given)  # (b, L)
            cells = cell_logp(logits, a.rpg_temperature, self.cfg.model.loss)  # (b, L, V)
            drawn = _draw(cells, a.trajectories, credit, gen)  # (b, G, L)
            answers.append(drawn)
            logp.append(_try_logp(cells, drawn, credit))
            credits.append(credit)
        answers_t = torch.cat(answers)
        rewards = verdicts(src.checking, x_np[:, :answers_t.shape[2]],
                           answers_t.transpose(0, 1).cpu().numpy()).T.astype(np.float64)  # (P, G)
        adv = torch.tensor(group_advantages(rewards.tolist()), dtype=torch.float32, device=ctx.device)
        start = (torch.cat([self._reference_logp(model, ctx, x[sl], pids[sl]) for sl in _slices(len(pick),
                                                                                               ctx.micro_batch)])
                 if a.kl_coef > 0 else None)
        return Tries(x, pids, answers_t, torch.cat(logp), torch.cat(credits), rewards, adv, start)

    def _replay_batch(self, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """rpg_problems samples of the original training stream: (inputs, labels with IGNORE, puzzle ids)."""
        if self.replay is None:
            return None
        b = self.replay.take(self.acfg.rpg_problems)
        labels = np.asarray(b.labels)
        labels = labels[:, -1] if labels.ndim == 3 else labels  # a trace's last row: the whole answer
        y = labels_to_tensor(labels, self.ignore, ctx.device, b.inputs, self.given)
        return (torch.from_numpy(np.asarray(b.inputs)).to(ctx.device), y,
                torch.from_numpy(np.asarray(b.puzzle_ids)).to(ctx.device, torch.int64))

    def _backward(self, model: TRM, ctx: StepContext, t: Tries, replay, on_oom) -> dict[str, list]:
        """Every term's gradient, chunk by chunk; the per-sample statistics."""
        a, (P, G) = self.acfg, t.advantages.shape
        stats: dict[str, list] = {"ratio": [], "clipped": [], "kl_start": [], "replay_loss": []}
        undo = GradientUndo(model) if on_oom is not None else None

        def policy(sl: slice) -> dict:
            logits, _ = policy_logits(model, t.inputs[sl], t.pids[sl], self.k, ctx)
            cells = cell_logp(logits, a.rpg_temperature, self.cfg.model.loss)  # (b, L, V), read by both terms
            new = _try_logp(cells, t.answers[sl], t.credit[sl])  # (b, G)
            per, st = trrpg_loss(new, t.logp_old[sl], t.advantages[sl], a.rpg_beta, a.rpg_clip)
            loss = per.sum() / (P * G)
            if a.kl_coef > 0:
                kl = reference_kl(cells, t.logp_start[sl], t.credit[sl])
                loss = loss + a.kl_coef * kl.sum() / P
                stats["kl_start"].append(kl.detach())
            loss.backward()
            stats["ratio"].append(st["ratio"].reshape(-1))
            stats["clipped"].append(st["clipped"].reshape(-1))
            return {}

        def supervised(sl: slice) -> dict:
            x, y, pids = (r[sl] for r in replay)
            _, raw = policy_logits(model, x, pids, self.k, ctx)  # the step's own logits, as training reads them
            logp = cell_logp(raw[:, :y.shape[1]], 1.0, self.cfg.model.loss)
            keep = y != IGNORE
            token = gather_logprobs(logp, y.clamp_min(0))  # (b, L)
            per = sft_loss(token, keep.to(token.dtype))
            (a.rpg_replay * per.sum() / replay[0].shape[0]).backward()
            stats["replay_loss"].append((per / keep.sum(-1).clamp_min(1)).detach())
            return {}

        over_chunks(P, ctx, policy, undo, on_oom, last=replay is None)
        if replay is not None:
            over_chunks(replay[0].shape[0], ctx, supervised, undo, on_oom)
        return stats

    @torch.no_grad()
    def _reference_logp(self, model: TRM, ctx: StepContext, x: torch.Tensor, pids: torch.Tensor) -> torch.Tensor:
        """log pi_start per cell (b, L, V): the base run's weights in a frozen copy, built on first use."""
        if self.reference is None:
            with torch.random.fork_rng(devices=[]):  # its random init must not move the run's random state
                self.reference = TRM(model.cfg, model.parts).to(ctx.device).eval()
            rundir.load_weights(self.reference, self.acfg.base_run, ctx.device)
            self.reference.requires_grad_(False)
        logits, _ = policy_logits(self.reference, x, pids, self.k, ctx)
        return cell_logp(logits, self.acfg.rpg_temperature, self.cfg.model.loss)

    def _metrics(self, t: Tries, stats: dict, replay, signal: bool, opts: Optimizers) -> dict[str, float]:
        solved = t.rewards.max(1)
        m = {"rpg/reward_mean": float(t.rewards.mean()), "rpg/problems_solved": float(solved.mean()),
             "rpg/mixed_share": float(((t.rewards.min(1) < 1) & (solved > 0)).mean()),
             "rpg/advantage_abs": float(t.advantages.abs().mean()), "rpg/updated": float(signal),
             "train/lr": float(opts.dense.param_groups[0]["lr"]),
             "perf/samples": float(t.rewards.size + (0 if replay is None else replay[0].shape[0]))}
        for key in ("ratio", "clipped", "kl_start", "replay_loss"):
            if stats.get(key):
                m[f"rpg/{key}"] = float(torch.cat(stats[key]).float().mean())
        return m


def _slices(n: int, size: int) -> list[slice]:
    return [slice(s, min(n, s + max(1, size))) for s in range(0, n, max(1, size))]


def cell_logp(logits: torch.Tensor, temperature: float, loss: str) -> torch.Tensor:
    """(b, L, V) float32 log-probabilities of each cell's id under the model's own distribution (model.loss;
    model/losses.py `log_probs`) of logits / temperature."""
    return log_probs(logits.float() / temperature, loss).float()


def _draw(cells: torch.Tensor, g: int, credit: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(b, G, L) tries: each credited cell drawn from its distribution (log-probabilities `cells`, (b, L, V)),
    the others the argmax."""
    b, L, V = cells.shape
    probs = cells.exp().reshape(b * L, V).cpu()
    drawn = torch.multinomial(probs, g, replacement=True, generator=gen).view(b, L, g).permute(0, 2, 1)
    drawn = drawn.to(cells.device)
    greedy = cells.argmax(-1).unsqueeze(1).expand(-1, g, -1)
    return torch.where(credit.unsqueeze(1), drawn, greedy).contiguous()


def _try_logp(logp: torch.Tensor, answers: torch.Tensor, credit: torch.Tensor) -> torch.Tensor:
    """(b, G) log pi(try) from the cells' log-probabilities (b, L, V) at the arm's temperature: the sum over the
    credited cells."""
    token = gather_logprobs(logp, answers)  # (b, G, L)
    return (token * credit.unsqueeze(1).to(token.dtype)).sum(-1)
