"""Seeding and self-play as objectives of the one trainer (train/objective.py).

`SeedObjective`: supervised trajectory seeding. Each step draws generated tasks, has the
executor trace them (the list after every statement is the think part, the result the
answer), and minimises -log pi(trace | task) - alpha * log pi(answer | task, trace).
The proposer is seeded on generated tasks and the critique on right and corrupted
solver responses, so that self-play starts from well-formed outputs in every role.

`SelfPlayObjective`: one self-play round per trainer step, top to bottom:
  1. propose: per task type, the proposer writes tasks (a reference task from the buffer in
     its prompt); the executor runs each twice (determinism) inside the sandbox;
  2. solve: k attempts at every fresh valid proposal, at rl.env_tasks_per_type tasks fresh from
     the generator, then at buffer tasks up to rl.tasks_per_type; each answer is checked by execution;
  3. critique: the critique judges some of the solver's answers (verdict + 0-5 score);
  4. rewards (rl/rewards.py), advantages = reward minus the running (type x role) baseline,
     divided by its running std (Welford);
  5. update: rl.update_epochs optimizer steps; each back-propagates the TR-RPG loss role by
     role in chunks of the micro-batch the planner and memory guard set; log pi_old was kept
     from the rollout, so no second model is held.
Both objectives evaluate the solver greedily on a fixed held-out set, by execution.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.rl import programs as P
from trmkit.rl import rewards as R
from trmkit.rl.executor import Executor
from trmkit.rl.loss import sft_loss, trrpg_loss
from trmkit.rl.policy import encode, response_logits, sample, token_logprobs
from trmkit.rl.sandbox import Limits
from trmkit.train.step import GradientUndo, Optimizers, StepContext, apply_updates, over_chunks, \
    set_learning_rates

Log = Callable[[str], None]


@dataclass
class Group:
    """Rows of one (role, type) layout, ready for the chunked backward."""

    role: str
    kind: str
    inputs: torch.Tensor  # (N, L) prompt + <blank> response positions
    responses: torch.Tensor  # (N, R) int64: sampled (self-play) or target (seeding) tokens
    scale: float  # each row's loss is multiplied by this (1 / rows of the role)
    logp_old: torch.Tensor | None = None  # (N,) self-play
    advantages: torch.Tensor | None = None  # (N,) self-play
    beta: float = 0.0
    weights: torch.Tensor | None = None  # (N, R) seeding: per-position weights

    @property
    def response_len(self) -> int:
        return self.responses.shape[1]


def group_loss(model: TRM, g: Group, rows: slice, ctx: StepContext, clip: float) -> tuple[torch.Tensor, dict]:
    """Summed loss of some rows of a group (scaled), and statistics."""
    with ctx.autocast():
        logits = response_logits(model, g.inputs[rows], g.response_len)
    tok = token_logprobs(logits, g.responses[rows])
    if g.weights is not None:
        per = sft_loss(tok, g.weights[rows])
        return per.sum() * g.scale, {"loss": per.detach()}
    per, stats = trrpg_loss(tok.sum(-1), g.logp_old[rows], g.advantages[rows], g.beta, clip)
    stats["loss"] = per.detach()
    return per.sum() * g.scale, stats


def chunked_backward(model: TRM, groups: list[Group], ctx: StepContext, clip: float,
                     on_oom: Callable[[BaseException], int] | None = None) -> dict[str, dict]:
    """Back-propagate every group's loss chunk by chunk (roles one after another); gradients
    accumulate in .grad and equal the full batch's. An allocation failure undoes the failed
    chunk, takes the smaller micro-batch from `on_oom` (the memory guard) and goes on."""
    undo = GradientUndo(model) if on_oom is not None else None
    stats: dict[str, dict] = {}
    for i, g in enumerate(groups):
        def work(rows: slice, g: Group = g) -> dict:
            loss, st = group_loss(model, g, rows, ctx, clip)
            loss.backward()
            return st
        parts = over_chunks(g.inputs.shape[0], ctx, work, undo, on_oom, last=i == len(groups) - 1)
        stats[f"{g.role}/{g.kind}"] = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return stats


def make_heldout(cfg: Config, executor: Executor) -> list[P.CodeTask]:
    """rl.heldout_per_type tasks per type from rl.heldout_seed, programs of 1..MAX_STATEMENTS statements
    (longer than the seeding set's SEED_MAX_STATEMENTS), each completed by execution."""
    rng = random.Random(cfg.rl.heldout_seed)
    out = []
    for kind in P.TYPES:
        tasks, keys = [], set()
        while len(tasks) < cfg.rl.heldout_per_type:
            draft = [P.random_task(rng, kind, 1, P.MAX_STATEMENTS) for _ in range(cfg.rl.heldout_per_type)]
            for t in executor.complete(draft):
                if isinstance(t, P.CodeTask) and t.key() not in keys and len(tasks) < cfg.rl.heldout_per_type:
                    keys.add(t.key())
                    tasks.append(t)
        out += tasks
    return out


class CodeObjective:
    """What seeding and self-play share: the executor, the held-out set, evaluation, state."""

    name = "code"

    def __init__(self, cfg: Config, log: Log = print):
        self.cfg, self.log = cfg, log
        rl = cfg.rl
        self.executor = Executor(Limits(cpu_seconds=rl.sandbox_cpu_seconds, wall_seconds=rl.sandbox_wall_seconds,
                                        memory_bytes=rl.sandbox_memory_mb * 2**20), rl.cache_mb * 2**20)
        self.heldout = make_heldout(cfg, self.executor)
        self.heldout_keys = {t.key() for t in self.heldout}
        self.rng = random.Random(cfg.run.seed)
        self.steps, self.seconds = 0, 0.0
        self.counts: Counter[str] = Counter()

    def close(self) -> None:
        """Stop the sandbox's worker, and report what was counted and skipped along the way."""
        if self.counts:
            self.log("rl: counted and skipped: " + "; ".join(f"{k} x{v}" for k, v in self.counts.most_common()))
        self.executor.close()

    # ---- the Objective protocol ---------------------------------------------------------------

    def model_fields(self) -> dict[str, int]:
        return {"vocab_size": len(P.VOCAB), "seq_len": P.max_length(), "num_puzzle_ids": 1, "num_classes": 0}

    def identity(self) -> dict:
        return {"task": "selfplay-code", "vocab": list(P.VOCAB), "seq_len": P.max_length(),
                "heldout_seed": self.cfg.rl.heldout_seed, "heldout_per_type": self.cfg.rl.heldout_per_type}

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "steps": self.steps, "seconds": self.seconds,
                "counts": dict(self.counts)}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.steps, self.seconds = int(state["steps"]), float(state["seconds"])
        self.counts = Counter(state.get("counts", {}))

    def progress(self, cfg: TrainConfig) -> float:
        """t in [0, 1]: trained time over train.max_minutes when set, else steps over train.max_steps
        (kept in the checkpoint, so a resumed run continues its schedules where they were)."""
        if cfg.max_minutes > 0:
            return min(1.0, self.seconds / (60 * cfg.max_minutes))
        return min(1.0, self.steps / max(1, cfg.max_steps))

    @torch.no_grad()
    def evaluate(self, model: TRM, ctx: StepContext) -> dict[str, float]:
        """Greedy solver on the held-out tasks, checked by execution: solve rate per type and length."""
        model.eval()
        right, formed = [], []
        for kind in P.TYPES:
            tasks = [t for t in self.heldout if t.kind == kind]
            rows = [P.prompt("solve", kind, P.task_tokens(t)) for t in tasks]
            inputs = encode(rows, len(P.VOCAB), ctx.device)
            resp, _, _ = sample(model, inputs, P.layout("solve", kind).response, max(ctx.micro_batch, 64),
                                ctx.autocast, greedy=True)
            ok, parsed = self._check_solutions(tasks, resp.tolist())
            right += ok
            formed += [p is not None for p in parsed]
        out = {"solve_rate": float(np.mean(right)), "format_rate": float(np.mean(formed)),
               "samples": len(self.heldout)}
        for kind in P.TYPES:
            sel = [r for r, t in zip(right, self.heldout) if t.kind == kind]
            out[f"solve_rate/{kind}"] = float(np.mean(sel))
        long = [r for r, t in zip(right, self.heldout) if len(t.program) > P.SEED_MAX_STATEMENTS]
        short = [r for r, t in zip(right, self.heldout) if len(t.program) <= P.SEED_MAX_STATEMENTS]
        out[f"solve_rate/len<={P.SEED_MAX_STATEMENTS}"] = float(np.mean(short)) if short else 0.0
        out[f"solve_rate/len>{P.SEED_MAX_STATEMENTS}"] = float(np.mean(long)) if long else 0.0
        return out

    def _check_solutions(self, tasks: list[P.CodeTask], responses: list[list[int]]
                         ) -> tuple[list[bool], list[P.SolveAnswer | None]]:
        parsed: list[P.SolveAnswer | None] = []
        for t, r in zip(tasks, responses):
            try:
                parsed.append(P.parse_solve(r, t.kind))
            except P.Malformed:
                parsed.append(None)
        items = [(t, p.answer) for t, p in zip(tasks, parsed) if p is not None]
        verdicts = iter(self.executor.check(items))
        return [next(verdicts) if p is not None else False for p in parsed], parsed

    def fresh_task(self, kind: str, max_len: int = P.SEED_MAX_STATEMENTS) -> P.CodeTask:
        """A generated task (never a held-out one), completed by execution."""
        while True:
            t = P.random_task(self.rng, kind, 1, max_len)
            if t.key() in self.heldout_keys:
                self.counts["generated task equal to a held-out one, drawn again"] += 1
                continue
            done = self.executor.complete([t])[0]
            if isinstance(done, P.CodeTask):
                return done
            self.counts[f"generated task invalid: {done[:40]}"] += 1


class SeedObjective(CodeObjective):
    """Supervised trajectory seeding from executor traces (see the module docstring)."""

    name = "seed"

    def step(self, model: TRM, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        set_learning_rates(opts, self.steps, cfg)
        examples = self.examples(cfg.batch_size)
        groups = self.groups(examples, ctx.device)
        model.train()
        stats = chunked_backward(model, groups, ctx, self.cfg.rl.log_ratio_clip, on_oom)
        apply_updates(model, opts)
        self.steps += 1
        dt = time.perf_counter() - t0
        self.seconds += dt
        metrics = {"train/loss": float(torch.cat([s["loss"] for s in stats.values()]).mean()),
                   "train/lr": float(opts.dense.param_groups[0]["lr"]), "perf/samples": float(len(examples))}
        for key, s in stats.items():
            metrics[f"seed/loss/{key}"] = float(s["loss"].mean())
        metrics["perf/update_tokens_per_s"] = sum(g.inputs.numel() for g in groups) / dt
        metrics["cache/hit_rate"] = self.executor.cache.hit_rate
        return metrics

    def examples(self, n: int) -> list[tuple[str, str, list[int], list[int], list[float]]]:
        """(role, kind, prompt row, target response, weights) for n generated examples."""
        rl = self.cfg.rl
        shares = [rl.seed_share_solve, rl.seed_share_propose, rl.seed_share_critique]
        if sum(shares) <= 0:
            shares = [1.0, 0.0, 0.0]
        out = []
        for _ in range(n):
            role = self.rng.choices(("solve", "propose", "critique"), weights=shares)[0]
            kind = P.TYPES[self.rng.randrange(len(P.TYPES))]
            out.append(getattr(self, f"_{role}_example")(kind))
        return out

    def _solution(self, task: P.CodeTask) -> tuple[list[int], tuple[int, ...] | tuple]:
        """The executor's trace and the answer: for abduction the input that gave the output, for
        induction the program; the trace is the program run on the (first) input."""
        trace = self.executor.traces([(task.program, task.inputs[0])])[0]
        answer = task.program if task.kind == "induction" else (
            task.inputs[0] if task.kind == "abduction" else task.outputs[0])
        return P.solve_tokens(list(trace), P.answer_tokens(task, answer)), answer

    def _weights(self, response: list[int], role: str, kind: str) -> list[float]:
        lay = P.layout(role, kind)
        w = [1.0] * lay.response
        if role == "solve":
            start = response.index(P.TOKEN["<answer>"])
            end = response.index(P.TOKEN["</answer>"])
            for j in range(start + 1, end):
                w[j] += self.cfg.rl.seed_answer_weight
        return w

    def _solve_example(self, kind: str):
        task = self.fresh_task(kind)
        resp, _ = self._solution(task)
        return ("solve", kind, P.prompt("solve", kind, P.task_tokens(task)),
                P.check_response(resp, "solve", kind), self._weights(resp, "solve", kind))

    def _propose_example(self, kind: str):
        ref, task = self.fresh_task(kind), self.fresh_task(kind)
        resp = P.proposal_tokens(task)
        return ("propose", kind, P.prompt("propose", kind, P.task_tokens(ref)),
                P.check_response(resp, "propose", kind), self._weights(resp, "propose", kind))

    def _critique_example(self, kind: str):
        """A right solver response, or one with its answer corrupted; the verdict is the executor's,
        the score the task's number of statements (how much it asks of the solver)."""
        task = self.fresh_task(kind)
        resp, answer = self._solution(task)
        if self.rng.random() < 0.5:
            answer = self._corrupt(task, answer)
            trace = P.parse_solve(resp, task.kind).trace[:len(task.program)]
            resp = P.solve_tokens(list(trace), P.answer_tokens(task, answer))
        verdict = self.executor.check([(task, answer)])[0]
        target = P.critique_tokens(verdict, min(P.MAX_SCORE, len(task.program)))
        row = P.prompt("critique", kind, P.task_tokens(task) + resp)
        return ("critique", kind, row, P.check_response(target, "critique", kind),
                self._weights(target, "critique", kind))

    def _corrupt(self, task: P.CodeTask, answer):
        values = list(answer)
        i = self.rng.randrange(len(values)) if values else 0
        if task.kind == "induction":
            values[i] = self.rng.randrange(len(P.STATEMENTS))
        elif values:
            values[i] = (values[i] + self.rng.randint(1, 9)) % 10
        else:
            values = [self.rng.randrange(10)]
        return tuple(values)

    def groups(self, examples, device) -> list[Group]:
        out = []
        for role in P.ROLES:
            for kind in P.TYPES:
                sel = [e for e in examples if e[0] == role and e[1] == kind]
                if not sel:
                    continue
                out.append(Group(role, kind, encode([e[2] for e in sel], len(P.VOCAB), device),
                                 torch.tensor([e[3] for e in sel], dtype=torch.int64, device=device),
                                 scale=1.0 / len(examples),
                                 weights=torch.tensor([e[4] for e in sel], dtype=torch.float32, device=device)))
        return out


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
