"""`SelfPlayObjective`: one self-play round per trainer step, top to bottom (docs/rl.md).

TR-RPG's structure for a policy that writes all its slots at once:

  1. propose: per task type, rl.proposals_per_type prompts (a reference task from the buffer),
     rl.propose_samples proposals each from one forward; the executor completes every valid one;
  2. solve: the fresh valid proposals (at most rl.proposer_share of the solver's tasks), then
     tasks from the generator at the curriculum's lengths, rl.tasks_per_type in all; k =
     rl.attempts answers per task drawn from one forward of the task, each checked by execution;
     the argmax of the same logits gives the greedy solve rate for free;
  3. critique: rl.critiques_per_type of the solver's answers, rl.critique_samples verdicts each,
     rewarded for agreeing with the executor (no self-graded score);
  4. advantages: per prompt, leave-one-out over its samples, divided by the round's std per
     (type, role) (rl/rewards.py; rl.baseline=running keeps the published running baseline);
  5. update: rl.update_epochs optimizer steps of  sum over roles  weight_role * mean TR-RPG loss
     (the solver over its answer slots only, the critique over its verdict, the proposer over its
     task) + rl.anchor_weight * the seeding loss on fresh executor traces (which also teaches the
     think slots); chunked in the micro-batch the planner and memory guard set (rl/chunks.py);
     log pi_old was kept from the rollout at rl.temperature, the same temperature as log pi_theta.

The curriculum (rl/curriculum.py): per type, the generator's program lengths move up when the solver
solves most of its tasks and down when it solves few, to keep rl.mixed_target of them of mixed outcome;
with rl.curriculum_step > 0 the shortest and longest lengths both move, and the proposer's share of the
solver's tasks grows with its 4 r (1 - r) reward.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.rl import programs as P
from trmkit.rl import rewards as R
from trmkit.rl.chunks import Group, chunked_backward
from trmkit.rl.curriculum import MAX_PROPOSER_SHARE, Curriculum
from trmkit.rl.objective import Log
from trmkit.rl.policy import Draw, draw, encode
from trmkit.rl.seed import SeedObjective
from trmkit.rl.stats import balanced_accuracy
from trmkit.train.step import Optimizers, StepContext, apply_updates, set_learning_rates


DROP_TRIES = 64  # rl.shortcut_tasks=drop: draws per solver task before one with a shortcut is kept (and counted)


@dataclass
class Part:
    """One (role, type) of a round: prompts, their k samples and rewards (N, k)."""

    rows: list[list[int]]
    draw: Draw
    rewards: list[list[float]]
    credit: torch.Tensor  # (R,) bool: the response positions the reward is decided at


@dataclass
class Rollout:
    parts: dict = field(default_factory=dict)  # (role, kind) -> Part
    metrics: dict = field(default_factory=dict)


def credit_mask(role: str, kind: str) -> torch.Tensor:
    """The solver's answer slots, the critique's verdict, the proposer's whole task."""
    n = P.layout(role, kind).response
    mask = torch.zeros(n, dtype=torch.bool)
    if role == "solve":
        start, end = P.answer_span(kind)
        mask[start:end] = True
    elif role == "critique":
        mask[0] = True
    else:
        mask[:] = True
    return mask


class SelfPlayObjective(SeedObjective):
    """Propose / solve / critique self-play with TR-RPG and a seeding anchor (module docstring)."""

    name = "selfplay"

    def __init__(self, cfg: Config, log: Log = print):
        super().__init__(cfg, log)
        self.stats = R.RunningStats()
        self.buffer: dict[str, deque] = {k: deque(maxlen=self.rl.buffer_size) for k in P.TYPES}
        self.buffer_keys: set[str] = set()
        self.curriculum = Curriculum(self.rl.curriculum_step, self.rl.mixed_target, self.rl.proposer_share)
        if self.curriculum.moving:
            log(f"rl: curriculum_step={self.rl.curriculum_step}: the generator's min and max statements move by it "
                f"while fewer than {self.rl.mixed_target:.0%} of a type's tasks have mixed outcomes; the proposer's "
                f"share grows from {self.rl.proposer_share} to {MAX_PROPOSER_SHARE} with its reward (rl/curriculum.py)")
        self.reference_path: str | None = None  # the seed run whose policy "KL to the seed" compares with
        self.reference: TRM | None = None
        if self.rl.shortcut_tasks == "drop":
            log("rl: shortcut_tasks=drop: the solver's generated tasks never have a shortcut (empty, constant or "
                "copied output, copy-the-output input, one-statement program), as the headline leaves them out")
        for kind in P.TYPES:  # the seed buffer: generated tasks, as AZR starts from a seed program
            for _ in range(min(256, self.rl.buffer_size)):
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
        state["curriculum"] = self.curriculum.state_dict()
        state["reference"] = self.reference_path
        state["buffer"] = {k: [[t.kind, list(t.program), [list(i) for i in t.inputs], [list(o) for o in t.outputs]]
                               for t in buf] for k, buf in self.buffer.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.stats.load_state_dict(state["baselines"])
        if "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        for kind, hi in state.get("max_len", {}).items():  # a checkpoint from before rl/curriculum.py
            self.curriculum.window[kind] = [1.0, float(hi)]
        self.reference_path, self.reference = state.get("reference"), None
        self.buffer_keys = set()
        for kind, items in state["buffer"].items():
            self.buffer[kind].clear()
            for k, prog, ins, outs in items:
                self._remember(P.CodeTask(k, tuple(prog), tuple(map(tuple, ins)), tuple(map(tuple, outs))))

    # ---- one round ------------------------------------------------------------------------------

    def step(self, model: TRM, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        set_learning_rates(opts, self.steps, dataclasses.replace(cfg, lr=self.rl.lr))
        model.eval()
        ro = Rollout()
        fresh = self.propose(model, ctx, ro)
        attempts = self.solve(model, ctx, ro, fresh)
        self.critique(model, ctx, ro, attempts)
        self.adapt_curriculum(ro)
        t1 = time.perf_counter()
        groups = self.policy_groups(ro, ctx.device) + self.anchor_groups(ctx.device)
        model.train()
        norms = []
        for _ in range(self.rl.update_epochs):
            stats = chunked_backward(model, groups, ctx, self.rl.log_ratio_clip, on_oom)
            norms.append(self.clip_gradients(model))
            apply_updates(model, opts)
        t2 = time.perf_counter()
        self.steps += 1
        self.seconds += t2 - t0
        metrics = self.round_metrics(ro, groups, stats, (t1 - t0, t2 - t1), opts)
        metrics["train/grad_norm"] = float(np.mean(norms))
        kl = self.kl_to_reference(model, ctx)
        if kl is not None:
            metrics["kl/seed"] = kl
        return metrics

    def set_reference(self, run_dir: str) -> None:
        """The run the policy started from (--init): "kl/seed" measures how far the policy moved."""
        self.reference_path, self.reference = str(run_dir), None

    @torch.no_grad()
    def kl_to_reference(self, model: TRM, ctx: StepContext, per_type: int = 16) -> float | None:
        """KL(pi_theta || pi_seed) over the solver's answer slots at rl.temperature, on the first
        held-out tasks of each type (a fixed probe: the policy is never trained on them)."""
        from trmkit import rundir
        from trmkit.rl.policy import response_logits

        if self.reference_path is None:
            return None
        if self.reference is None:
            with torch.random.fork_rng(devices=[]):  # its random init must not move the run's random state
                self.reference = TRM(model.cfg, model.parts).to(ctx.device).eval()
            rundir.load_weights(self.reference, self.reference_path, ctx.device)
        model.eval()
        kls = []
        for kind in P.TYPES:
            tasks = [t for t in self.heldout if t.kind == kind][:per_type]
            inputs = encode([P.prompt("solve", kind, P.task_tokens(t)) for t in tasks], len(P.VOCAB), ctx.device)
            n, (a, b) = P.layout("solve", kind).response, P.answer_span(kind)
            with ctx.autocast():
                new, old = (response_logits(m, inputs, n)[:, a:b] / self.rl.temperature
                            for m in (model, self.reference))
            logp, logq = new.log_softmax(-1), old.log_softmax(-1)
            kls.append((logp.exp() * (logp - logq)).sum(-1).mean())
        return float(torch.stack(kls).mean())

    def clip_gradients(self, model: TRM) -> float:
        """The gradient's global norm before clipping (clipped to rl.max_grad_norm when set)."""
        params = [p for p in model.parameters() if p.grad is not None]
        limit = self.rl.max_grad_norm
        return float(torch.nn.utils.clip_grad_norm_(params, limit if limit > 0 else float("inf")))

    def _draw(self, model, ctx, role: str, kind: str, rows: list[list[int]], k: int) -> Draw:
        inputs = encode(rows, len(P.VOCAB), ctx.device)
        return draw(model, inputs, P.layout(role, kind).response, k, ctx.micro_batch, ctx.autocast,
                    self.rl.temperature)

    def propose(self, model, ctx, ro: Rollout) -> dict[str, list]:
        """Proposals; returns kind -> [(well formed, completed task or None)], one per sample."""
        rl, fresh = self.rl, {}
        for kind in P.TYPES:
            n = rl.proposals_per_type  # the moving curriculum: enough prompts for the proposer's share
            if self.curriculum.moving:
                n = max(n, -(-self.curriculum.slots(kind, rl.tasks_per_type) // rl.propose_samples))
            refs = [self.buffer[kind][self.rng.randrange(len(self.buffer[kind]))] for _ in range(n)]
            rows = [P.prompt("propose", kind, P.task_tokens(r)) for r in refs]
            d = self._draw(model, ctx, "propose", kind, rows, rl.propose_samples)
            drafts = [self._parse_proposal(r, kind) for r in d.responses.reshape(-1, d.responses.shape[-1]).tolist()]
            valid = [x for x in drafts if x is not None]
            done = dict(zip([id(x) for x in valid], self.executor.complete(valid)))
            fresh[kind] = []
            for x in drafts:
                task = done.get(id(x)) if x is not None else None
                if isinstance(task, str):
                    self.counts["proposal not a valid task (execution)"] += 1
                    task = None
                fresh[kind].append((x is not None, task))
            ro.parts[("propose", kind)] = Part(rows, d, [], credit_mask("propose", kind))
        return fresh

    def _parse_proposal(self, response: list[int], kind: str) -> P.CodeTask | None:
        try:
            task = P.parse_proposal(response, kind)
        except P.Malformed as err:
            self.counts[f"proposal malformed: {err}"[:60]] += 1
            return None
        if task.key() in self.heldout_keys:
            self.counts["proposal equal to a held-out task (not used)"] += 1
            return None
        return task

    def solve(self, model, ctx, ro: Rollout, fresh: dict) -> dict[str, list]:
        """k answers per task from one forward; rewards for the solver and, from the solve rates, the proposer."""
        rl, attempts = self.rl, {}
        for kind in P.TYPES:
            valid = [task for _, task in fresh[kind] if task is not None]
            proposed = valid[:self.curriculum.slots(kind, rl.tasks_per_type)]
            lo, hi = self.curriculum.lengths(kind)
            tasks = proposed + [self.generated_task(kind, hi, lo) for _ in range(rl.tasks_per_type - len(proposed))]
            outside = self.curriculum.outside(kind, valid)
            if outside is not None:
                ro.metrics[f"propose/outside_support/{kind}"] = outside
            rows = [P.prompt("solve", kind, P.task_tokens(x)) for x in tasks]
            d = self._draw(model, ctx, "solve", kind, rows, rl.attempts)
            k = rl.attempts
            tries = [x for x in tasks for _ in range(k)]
            correct, parsed = self._check_solutions(tries, d.responses.reshape(len(tries), -1).tolist())
            rewards = [R.solve_reward(c, a is not None, rl.format_penalty) for c, a in zip(correct, parsed)]
            greedy, _ = self._check_solutions(tasks, d.greedy.tolist())
            rates = np.array(correct, dtype=float).reshape(len(tasks), k).mean(1)
            ro.parts[("solve", kind)] = Part(rows, d, np.array(rewards).reshape(len(tasks), k).tolist(),
                                             credit_mask("solve", kind))
            ro.metrics.update({f"solve/train_solve_rate/{kind}": float(np.mean(correct)),
                               f"solve/greedy_solve_rate/{kind}": float(np.mean(greedy)),
                               f"solve/format_rate/{kind}": float(np.mean([a is not None for a in parsed])),
                               f"solve/mixed_share/{kind}": float(np.mean((rates > 0) & (rates < 1)))})
            self._propose_rewards(ro, kind, fresh[kind], dict(zip(map(id, proposed), rates)))
            for task in proposed:
                self._remember(task)
            attempts[kind] = list(zip(tries, d.responses.reshape(len(tries), -1).tolist(), correct))
        return attempts

    def generated_task(self, kind: str, max_len: int, min_len: int) -> P.CodeTask:
        """A generated solver task; with rl.shortcut_tasks=drop, one no shortcut solves (rl/heldout.py's test, at
        most DROP_TRIES draws). The test reads the executed output, as the reward does; no loss takes it as a
        target, and the solver still sees only the task."""
        if self.rl.shortcut_tasks == "keep":
            return self.fresh_task(kind, max_len, min_len)
        if kind == "induction":  # a one-statement program is always the one-statement shortcut
            min_len, max_len = max(min_len, 2), max(max_len, 2)
        for _ in range(DROP_TRIES):
            task = self.fresh_task(kind, max_len, min_len)
            cut = self.searcher.shortcut(task)
            if not cut:
                return task
            self.counts[f"generated {kind} task with the {cut} shortcut, drawn again (rl.shortcut_tasks=drop)"] += 1
        self.counts[f"no {kind} task without a shortcut in {DROP_TRIES} draws: kept one (rl.shortcut_tasks=drop)"] += 1
        return task

    def _propose_rewards(self, ro: Rollout, kind: str, fresh: list, rate_of: dict) -> None:
        rl, part = self.rl, ro.parts[("propose", kind)]
        flat = [R.propose_reward(rate_of.get(id(task)) if task is not None else None, formed, rl.format_penalty)
                for formed, task in fresh]
        part.rewards = np.array(flat).reshape(len(part.rows), rl.propose_samples).tolist()
        used = [rate_of[id(task)] for _, task in fresh if task is not None and id(task) in rate_of]
        ro.metrics[f"propose/difficulty/{kind}"] = float(np.mean(used)) if used else float("nan")

    def critique(self, model, ctx, ro: Rollout, attempts: dict) -> None:
        rl = self.rl
        for kind in P.TYPES:
            pool = attempts[kind]
            picks = [pool[self.rng.randrange(len(pool))] for _ in range(rl.critiques_per_type)]
            rows = [P.prompt("critique", kind, P.task_tokens(task) + resp) for task, resp, _ in picks]
            d = self._draw(model, ctx, "critique", kind, rows, rl.critique_samples)
            rewards, verdicts, truth = [], [], []
            for (_, _, correct), samples in zip(picks, d.responses.tolist()):
                row = []
                for r in samples:
                    verdict = {P.TOKEN["<yes>"]: True, P.TOKEN["<no>"]: False}.get(r[0])
                    verdicts.append(verdict)
                    truth.append(correct)
                    row.append(R.critique_reward(verdict == correct, verdict is not None, rl.format_penalty))
                rewards.append(row)
            ro.parts[("critique", kind)] = Part(rows, d, rewards, credit_mask("critique", kind))
            ro.metrics[f"critique/agreement/{kind}"] = float(np.mean([v == t for v, t in zip(verdicts, truth)]))
            balanced = balanced_accuracy(verdicts, truth)  # always <no> scores 0.5 here, 1 - solve rate above
            if balanced is not None:  # undefined when every judged answer was right, or every one wrong
                ro.metrics[f"critique/balanced_accuracy/{kind}"] = balanced

    def adapt_curriculum(self, ro: Rollout) -> None:
        """Longer generated programs where the solver solves most tasks, shorter where it solves few; with
        rl.curriculum_step > 0 the proposer's share follows its reward (rl/curriculum.py)."""
        for kind in P.TYPES:
            rewards = [r for row in ro.parts[("propose", kind)].rewards for r in row]
            self.curriculum.update(kind, ro.metrics[f"solve/train_solve_rate/{kind}"],
                                   ro.metrics[f"solve/mixed_share/{kind}"], rewards)
            ro.metrics.update(self.curriculum.metrics(kind))

    # ---- the update -----------------------------------------------------------------------------

    def advantages(self, role: str, kind: str, rewards: list[list[float]]) -> list[list[float]]:
        if self.rl.baseline == "group":
            return R.group_advantages(rewards)
        if self.rl.baseline == "expert":
            return R.expert_advantages(rewards)
        key, flat = f"{kind}|{role}", [r for row in rewards for r in row]
        self.stats.update(key, flat)
        norm = iter(self.stats.normalize(key, flat))
        return [[next(norm) for _ in row] for row in rewards]

    def policy_groups(self, ro: Rollout, device) -> list[Group]:
        """One Group per (role, type); each role's samples share its weight (rl.weight_*)."""
        rl = self.rl
        beta = {"propose": rl.beta_propose, "solve": rl.beta_solve, "critique": rl.beta_critique}
        weight = {"propose": rl.weight_propose, "solve": rl.weight_solve, "critique": rl.weight_critique}
        samples = {role: sum(p.draw.responses.shape[0] * p.draw.responses.shape[1]
                             for (r, _), p in ro.parts.items() if r == role) for role in P.ROLES}
        groups = []
        for (role, kind), part in ro.parts.items():
            adv = self.advantages(role, kind, part.rewards)
            ro.metrics[f"advantage/mean/{role}/{kind}"] = float(np.mean(adv))
            groups.append(Group(role, kind, encode(part.rows, len(P.VOCAB), device), part.draw.responses,
                                weight[role] / samples[role], logp_old=part.draw.token_logp,
                                advantages=torch.tensor(adv, dtype=torch.float32, device=device),
                                beta=beta[role], credit=part.credit.to(device), temperature=rl.temperature))
        return groups

    def anchor_groups(self, device) -> list[Group]:
        """The seeding loss on fresh executor traces, weighted rl.anchor_weight: it ties the policy to
        well-formed outputs and teaches the think slots, which the policy gradient leaves alone."""
        rl = self.rl
        if rl.anchor_weight <= 0:
            return []
        examples = self.examples(rl.anchor_examples)
        groups = self.groups(examples, device)
        for g in groups:
            g.scale *= rl.anchor_weight
            g.role = f"anchor-{g.role}"
        return groups

    def round_metrics(self, ro: Rollout, groups: list[Group], stats: dict, times, opts) -> dict:
        m: dict[str, float] = {k: v for k, v in ro.metrics.items() if v == v}  # NaN: no fresh proposal
        for role in P.ROLES:
            parts = [p for (r, _), p in ro.parts.items() if r == role]
            m[f"reward/{role}"] = float(np.mean([x for p in parts for row in p.rewards for x in row]))
            m[f"entropy/{role}"] = float(torch.cat([p.draw.entropy for p in parts]).mean())
            kls = [s["kl"] for key, s in stats.items() if key.startswith(role + "/")]
            m[f"kl/{role}"] = float(torch.cat(kls).mean())
            m[f"advantage/mean/{role}"] = float(np.mean([m.pop(f"advantage/mean/{role}/{k}") for k in P.TYPES]))
        for name in ("train_solve_rate", "greedy_solve_rate", "format_rate", "mixed_share"):
            m[f"solve/{name}"] = float(np.mean([m[f"solve/{name}/{k}"] for k in P.TYPES]))
        m["critique/agreement"] = float(np.mean([m[f"critique/agreement/{k}"] for k in P.TYPES]))
        balanced = [m[f"critique/balanced_accuracy/{k}"] for k in P.TYPES if f"critique/balanced_accuracy/{k}" in m]
        if balanced:
            m["critique/balanced_accuracy"] = float(np.mean(balanced))
        for name in ("propose/difficulty", "propose/outside_support"):
            per_type = [m[f"{name}/{k}"] for k in P.TYPES if f"{name}/{k}" in m]
            if per_type:
                m[name] = float(np.mean(per_type))
        anchor = [s["loss"] for key, s in stats.items() if key.startswith("anchor-")]
        if anchor:
            m["anchor/loss"] = float(torch.cat(anchor).mean())
        m["train/loss"] = float(torch.cat([s["loss"] for s in stats.values()]).mean())
        m["train/lr"] = float(opts.dense.param_groups[0]["lr"])
        forward_rows = sum(g.inputs.shape[0] for g in groups)  # one forward per prompt, however many samples
        m["perf/rollout_rows_per_s"] = forward_rows / max(times[0], 1e-9)
        m["perf/rollout_tokens_per_s"] = sum(g.inputs.numel() for g in groups) / max(times[0], 1e-9)
        m["perf/update_tokens_per_s"] = sum(g.inputs.numel() for g in groups) * self.rl.update_epochs / max(
            times[1], 1e-9)
        m["perf/samples"] = float(sum(g.samples for g in groups))
        m["cache/hit_rate"] = self.executor.cache.hit_rate
        m["buffer/tasks"] = float(sum(len(b) for b in self.buffer.values()))
        sb = self.executor.sandbox.stats
        m["sandbox/rejected"] = float(sb.get("rejected", 0))
        m["sandbox/worker_restarts"] = float(sb.get("worker_restarts", 0))
        return m
