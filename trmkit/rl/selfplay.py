"""`SelfPlayObjective`: one self-play round per trainer step, top to bottom.

  1. propose: per task type, the proposer writes tasks (a reference task from the buffer in
     its prompt); the executor runs each twice (determinism) inside the sandbox;
  2. solve: k attempts at every fresh valid proposal, at rl.env_tasks_per_type tasks fresh from
     the generator, then at buffer tasks up to rl.tasks_per_type; each answer is checked by execution;
  3. critique: the critique judges some of the solver's answers (verdict + 0-5 score);
  4. rewards (rl/rewards.py), advantages = reward minus the running (type x role) baseline,
     divided by its running std (Welford);
  5. update: rl.update_epochs optimizer steps; each back-propagates the TR-RPG loss role by
     role in chunks of the micro-batch the planner and memory guard set (rl/chunks.py);
     log pi_old was kept from the rollout, so no second model is held.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np
import torch

from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.rl import programs as P
from trmkit.rl import rewards as R
from trmkit.rl.chunks import Group, chunked_backward
from trmkit.rl.objective import CodeObjective, Log
from trmkit.rl.policy import encode, sample
from trmkit.train.step import Optimizers, StepContext, apply_updates, set_learning_rates


@dataclass
class Rollout:
    """What one self-play round generated, per (role, type): rows, responses, pi_old, rewards."""

    rows: dict = field(default_factory=dict)  # (role, kind) -> list of prompt rows
    responses: dict = field(default_factory=dict)  # (role, kind) -> (N, R) int64
    logp: dict = field(default_factory=dict)  # (role, kind) -> (N,)
    entropy: dict = field(default_factory=dict)
    rewards: dict = field(default_factory=dict)  # (role, kind) -> list of floats
    metrics: dict = field(default_factory=dict)


class SelfPlayObjective(CodeObjective):
    """Propose / solve / critique self-play with TR-RPG (see the module docstring)."""

    name = "selfplay"

    def __init__(self, cfg: Config, log: Log = print):
        super().__init__(cfg, log)
        self.stats = R.RunningStats()
        self.buffer: dict[str, deque] = {k: deque(maxlen=cfg.rl.buffer_size) for k in P.TYPES}
        self.buffer_keys: set[str] = set()
        for kind in P.TYPES:  # the seed buffer: generated tasks, as AZR starts from a seed program
            for _ in range(min(256, cfg.rl.buffer_size)):
                self._remember(self.fresh_task(kind))

    def _remember(self, task: P.CodeTask) -> bool:
        if task.key() in self.buffer_keys:
            return False
        buf = self.buffer[task.kind]
        if len(buf) == buf.maxlen:
            self.buffer_keys.discard(buf[0].key())
        buf.append(task)
        self.buffer_keys.add(task.key())
        return True

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["baselines"] = self.stats.state_dict()
        state["buffer"] = {k: [[t.kind, list(t.program), [list(i) for i in t.inputs], [list(o) for o in t.outputs]]
                               for t in buf] for k, buf in self.buffer.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stats.load_state_dict(state["baselines"])
        self.buffer_keys = set()
        for kind, items in state["buffer"].items():
            self.buffer[kind].clear()
            for k, prog, ins, outs in items:
                self._remember(P.CodeTask(k, tuple(prog), tuple(map(tuple, ins)), tuple(map(tuple, outs))))

    # ---- one round ------------------------------------------------------------------------------

    def step(self, model: TRM, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        t = self.progress(cfg)
        set_learning_rates(opts, self.steps, dataclasses.replace(cfg, lr=self.cfg.rl.lr))
        model.eval()
        ro = Rollout()
        fresh = self.propose(model, ctx, ro, t)
        attempts = self.solve(model, ctx, ro, fresh, t)
        self.critique(model, ctx, ro, attempts, t)
        t1 = time.perf_counter()
        groups = self.advantage_groups(ro, ctx.device)
        model.train()
        norms = []
        for _ in range(self.cfg.rl.update_epochs):
            stats = chunked_backward(model, groups, ctx, self.cfg.rl.log_ratio_clip, on_oom)
            norms.append(self.clip_gradients(model))
            apply_updates(model, opts)
        t2 = time.perf_counter()
        self.steps += 1
        self.seconds += t2 - t0
        metrics = self.round_metrics(ro, groups, stats, t, (t1 - t0, t2 - t1), opts)
        metrics["train/grad_norm"] = float(np.mean(norms))
        return metrics

    def clip_gradients(self, model: TRM) -> float:
        """The gradient's global norm before clipping (clipped to rl.max_grad_norm when set)."""
        params = [p for p in model.parameters() if p.grad is not None]
        limit = self.cfg.rl.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(params, limit if limit > 0 else float("inf"))
        return float(norm)

    def _sample(self, model, ctx, role: str, kind: str, rows: list[list[int]], ro: Rollout) -> list[list[int]]:
        inputs = encode(rows, len(P.VOCAB), ctx.device)
        resp, logp, ent = sample(model, inputs, P.layout(role, kind).response, ctx.micro_batch, ctx.autocast)
        key = (role, kind)
        ro.rows[key] = ro.rows.get(key, []) + rows
        for name, value in (("responses", resp), ("logp", logp), ("entropy", ent)):
            d = getattr(ro, name)
            d[key] = torch.cat([d[key], value]) if key in d else value
        return resp.tolist()

    def propose(self, model, ctx, ro: Rollout, t: float) -> dict[str, list]:
        """Sample proposals; returns kind -> [(index in the propose group, completed task or None)]."""
        rl, fresh = self.cfg.rl, {}
        for kind in P.TYPES:
            refs = [self.buffer[kind][self.rng.randrange(len(self.buffer[kind]))] for _ in range(rl.proposals_per_type)]
            responses = self._sample(model, ctx, "propose", kind,
                                     [P.prompt("propose", kind, P.task_tokens(r)) for r in refs], ro)
            drafts: list = []
            for r in responses:
                try:
                    drafts.append(P.parse_proposal(r, kind))
                except P.Malformed as err:
                    self.counts[f"proposal malformed: {err}"[:60]] += 1
                    drafts.append(None)
            valid = [d for d in drafts if d is not None and d.key() not in self.heldout_keys]
            self.counts["proposal equal to a held-out task (not used)"] += sum(
                d is not None and d.key() in self.heldout_keys for d in drafts)
            done = dict(zip([id(d) for d in valid], self.executor.complete(valid)))
            fresh[kind] = []
            for d in drafts:
                task = done.get(id(d)) if d is not None else None
                if isinstance(task, str):
                    self.counts["proposal not a valid task (execution)"] += 1
                    task = None
                fresh[kind].append((d is not None, task))
        return fresh

    def solve(self, model, ctx, ro: Rollout, fresh: dict, t: float) -> dict[str, list]:
        """k attempts per task; rewards for the solver and (from the solve rates) the proposer."""
        rl, attempts = self.cfg.rl, {}
        for kind in P.TYPES:
            tasks = [task for _, task in fresh[kind] if task is not None]
            n_fresh = len(tasks)
            tasks += [self.fresh_task(kind) for _ in range(rl.env_tasks_per_type)]
            while len(tasks) < rl.tasks_per_type:
                tasks.append(self.buffer[kind][self.rng.randrange(len(self.buffer[kind]))])
            tries = [task for task in tasks for _ in range(rl.attempts)]
            responses = self._sample(model, ctx, "solve", kind,
                                     [P.prompt("solve", kind, P.task_tokens(x)) for x in tries], ro)
            correct, parsed = self._check_solutions(tries, responses)
            ro.rewards[("solve", kind)] = [
                R.solve_reward(c, p.think_tokens if p else 0, t, rl.t_max, p is not None, rl.format_penalty)
                for c, p in zip(correct, parsed)]
            rates = np.array(correct, dtype=float).reshape(len(tasks), rl.attempts).mean(1)
            ro.metrics[f"solve/train_solve_rate/{kind}"] = float(np.mean(correct))
            ro.metrics[f"solve/format_rate/{kind}"] = float(np.mean([p is not None for p in parsed]))
            ro.metrics[f"propose/difficulty/{kind}"] = float(rates[:n_fresh].mean()) if n_fresh else float("nan")
            ro.rewards[("propose", kind)] = self._propose_rewards(fresh[kind], rates[:n_fresh])
            for task in tasks[:n_fresh]:
                self._remember(task)
            attempts[kind] = list(zip(tries, responses, correct))
        return attempts

    def _propose_rewards(self, fresh: list, rates: np.ndarray) -> list[float]:
        rl, out, it = self.cfg.rl, [], iter(rates)
        for well_formed, task in fresh:
            rate = float(next(it)) if task is not None else None
            out.append(R.propose_reward(rate, well_formed, rl.format_penalty))
        return out

    def critique(self, model, ctx, ro: Rollout, attempts: dict, t: float) -> None:
        rl = self.cfg.rl
        for kind in P.TYPES:
            pool = attempts[kind]
            picks = [pool[self.rng.randrange(len(pool))] for _ in range(rl.critiques_per_type)]
            rows = [P.prompt("critique", kind, P.task_tokens(task) + resp) for task, resp, _ in picks]
            responses = self._sample(model, ctx, "critique", kind, rows, ro)
            rewards, agree = [], []
            for (task, _, correct), r in zip(picks, responses):
                try:
                    verdict, score = P.parse_critique(r)
                    agree.append(verdict == correct)
                    rewards.append(R.critique_reward(verdict == correct, score, t, True, rl.format_penalty))
                except P.Malformed:
                    agree.append(False)
                    rewards.append(R.critique_reward(False, None, t, False, rl.format_penalty))
            ro.rewards[("critique", kind)] = rewards
            ro.metrics[f"critique/agreement/{kind}"] = float(np.mean(agree))

    def advantage_groups(self, ro: Rollout, device) -> list[Group]:
        """Rewards -> advantages with the running (type x role) baselines; one Group per layout."""
        rl, groups = self.cfg.rl, []
        beta = {"propose": rl.beta_propose, "solve": rl.beta_solve, "critique": rl.beta_critique}
        totals = Counter()
        for (role, kind), rewards in ro.rewards.items():
            totals[role] += len(rewards)
        for role in P.ROLES:
            for kind in P.TYPES:
                rewards = ro.rewards.get((role, kind))
                if not rewards:
                    continue
                key = f"{kind}|{role}"
                self.stats.update(key, rewards)
                adv = self.stats.normalize(key, rewards)
                groups.append(Group(role, kind, encode(ro.rows[(role, kind)], len(P.VOCAB), device),
                                    ro.responses[(role, kind)], 1.0 / totals[role],
                                    logp_old=ro.logp[(role, kind)],
                                    advantages=torch.tensor(adv, dtype=torch.float32, device=device),
                                    beta=beta[role]))
        return groups

    def round_metrics(self, ro: Rollout, groups: list[Group], stats: dict, t: float, times, opts) -> dict:
        m: dict[str, float] = {k: v for k, v in ro.metrics.items() if v == v}  # NaN: no fresh proposal
        for role in P.ROLES:
            rs = [r for (ro_, _), v in ro.rewards.items() if ro_ == role for r in v]
            m[f"reward/{role}"] = float(np.mean(rs))
            ents = [ro.entropy[(role, k)] for k in P.TYPES if (role, k) in ro.entropy]
            m[f"entropy/{role}"] = float(torch.cat(ents).mean())
            kls = [s["kl"] for key, s in stats.items() if key.startswith(role + "/")]
            m[f"kl/{role}"] = float(torch.cat(kls).mean())
        m["solve/train_solve_rate"] = float(np.mean([m[f"solve/train_solve_rate/{k}"] for k in P.TYPES]))
        m["critique/agreement"] = float(np.mean([m[f"critique/agreement/{k}"] for k in P.TYPES]))
        diffs = [m[f"propose/difficulty/{k}"] for k in P.TYPES if f"propose/difficulty/{k}" in m]
        if diffs:
            m["propose/difficulty"] = float(np.mean(diffs))
        m["rl/alpha_s"], m["rl/alpha_c"], m["rl/t"] = R.alpha_s(t), R.alpha_c(t), t
        m["train/loss"] = float(torch.cat([s["loss"] for s in stats.values()]).mean())
        m["train/lr"] = float(opts.dense.param_groups[0]["lr"])
        tokens = sum(g.inputs.numel() for g in groups)
        m["perf/rollout_tokens_per_s"] = tokens / max(times[0], 1e-9)
        m["perf/update_tokens_per_s"] = tokens * self.cfg.rl.update_epochs / max(times[1], 1e-9)
        m["perf/samples"] = float(sum(g.inputs.shape[0] for g in groups))
        m["cache/hit_rate"] = self.executor.cache.hit_rate
        m["buffer/tasks"] = float(sum(len(b) for b in self.buffer.values()))
        sb = self.executor.sandbox.stats
        m["sandbox/rejected"] = float(sb.get("rejected", 0))
        m["sandbox/worker_restarts"] = float(sb.get("worker_restarts", 0))
        return m
