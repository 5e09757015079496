"""`SeedObjective`: supervised trajectory seeding from executor traces.

Each step draws generated tasks, has the executor trace them (the list after every statement
is the think part, the result the answer), and minimises -log pi(trace | task) - alpha * log
pi(answer | task, trace). The proposer is seeded on generated tasks and the critique on right
and corrupted solver responses, so that self-play starts from well-formed outputs in every role.

rl.seed_pool = N (the scarce-label regime): every example, here and in self-play's anchor, is built
from one of N fixed generated tasks and its executor trace, the labelled pool; the critique's
corrupted answers are still judged by the executor (a verifier's verdict on a pool task).

rl.sft_label = canonical: the solver's (and the critique's right) abduction and induction targets are
the canonical answers of rl/canonical.py (the output itself where it is a valid input, else the
smallest valid input; the shortest consistent program) instead of the generator's, and the think
slots trace the program on that input (that program on the first input). Deduction is unchanged.
"""

from __future__ import annotations

import random
import time

import torch

from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.rl import heldout
from trmkit.rl import programs as P
from trmkit.rl.canonical import Labeler
from trmkit.rl.chunks import Group, chunked_backward
from trmkit.rl.objective import CodeObjective, Log
from trmkit.rl.policy import encode
from trmkit.train.step import Optimizers, StepContext, apply_updates, set_learning_rates


class SeedObjective(CodeObjective):
    """Supervised trajectory seeding from executor traces (see the module docstring)."""

    name = "seed"

    def __init__(self, cfg: Config, log: Log = print):
        super().__init__(cfg, log)
        self.searcher = heldout.Searcher()  # tags the pool's validation tasks; self-play's shortcut filter
        self.pool = self.make_pool(self.rl.seed_pool) if self.rl.seed_pool else []
        if self.rl.pool_val:
            self.pool, self.validation = self.split_pool(self.pool, self.rl.pool_val)
        self.pool_of = {k: [t for t in self.pool if t.kind == k] for k in P.TYPES}
        self.labeler = Labeler() if self.rl.sft_label == "canonical" else None
        if self.labeler is not None:
            log("rl: sft_label=canonical: abduction targets are the output where it is a valid input, else the "
                "smallest valid input; induction targets the shortest consistent program (rl/canonical.py)")

    def make_pool(self, n: int) -> list[P.CodeTask]:
        """n distinct generated tasks whose executor traces are the only labels any SFT term sees: the
        types drawn as `examples` draws them, from a random stream of run.seed's own (the seeding run and
        the self-play run from it share the pool)."""
        rng, pool, keys = random.Random(f"seed-pool/{self.cfg.run.seed}"), [], set()
        while len(pool) < n:
            task = self.fresh_task(P.TYPES[rng.randrange(len(P.TYPES))], rng=rng)
            if task.key() not in keys:
                keys.add(task.key())
                pool.append(task)
        spread = ", ".join(f"{sum(t.kind == k for t in pool)} {k}" for k in P.TYPES)
        self.log(f"rl: seed_pool={n}: seeding and the anchor use only these labelled traces ({spread}; "
                 f"run.seed={self.cfg.run.seed}'s pool)")
        return pool

    def split_pool(self, pool: list[P.CodeTask], m: int) -> tuple[list[P.CodeTask], list]:
        """The pool's last m tasks, tagged as the held-out set is, become the run's validation set (what its
        evaluations, the best checkpoint and early stopping score); no SFT term sees them."""
        val = [(t, self.searcher.tags(t)) for t in pool[-m:]]
        self.heldout_keys |= {t.key() for t, _ in val}  # never generated for self-play either
        spread = ", ".join(f"{sum(t.kind == k for t, _ in val)} {k}" for k in P.TYPES)
        self.log(f"rl: pool_val={m}: the run's evaluations (best checkpoint, early stopping) score the pool's last "
                 f"{m} tasks ({spread}), which no SFT term sees; `trmkit rl eval` scores the held-out set")
        return pool[:-m], val

    def _kind(self) -> str:
        """A task type as the generator spreads them (with a pool: as the pool does)."""
        if self.pool:
            return self.pool[self.rng.randrange(len(self.pool))].kind
        return P.TYPES[self.rng.randrange(len(P.TYPES))]

    def _task(self, kind: str) -> P.CodeTask:
        """A labelled task: from the pool when rl.seed_pool is set, else freshly generated."""
        if self.pool:
            return self.pool_of[kind][self.rng.randrange(len(self.pool_of[kind]))]
        return self.fresh_task(kind)

    def step(self, model: TRM, opts: Optimizers, cfg: TrainConfig, ctx: StepContext,
             on_oom=None) -> dict[str, float]:
        t0 = time.perf_counter()
        set_learning_rates(opts, self.steps, cfg)
        examples = self.examples(cfg.batch_size)
        groups = self.groups(examples, ctx.device)
        model.train()
        stats = chunked_backward(model, groups, ctx, self.rl.log_ratio_clip, on_oom)
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
        rl = self.rl
        shares = [rl.seed_share_solve, rl.seed_share_propose, rl.seed_share_critique]
        if sum(shares) <= 0:
            shares = [1.0, 0.0, 0.0]
        out = []
        for _ in range(n):
            role = self.rng.choices(("solve", "propose", "critique"), weights=shares)[0]
            kind = self._kind()
            out.append(getattr(self, f"_{role}_example")(kind))
        return out

    def _solution(self, task: P.CodeTask) -> tuple[list[int], tuple[int, ...] | tuple]:
        """The target response and its answer (`answer`); the think slots are the executor's trace of the
        program that answer implies, run on the input it implies."""
        answer = self.answer(task)
        program = answer if task.kind == "induction" else task.program
        start = answer if task.kind == "abduction" else task.inputs[0]
        trace = self.executor.traces([(program, start)])[0]
        return P.solve_tokens(list(trace), P.answer_tokens(task, answer)), answer

    def answer(self, task: P.CodeTask) -> tuple[int, ...]:
        """The SFT answer: deduction's output; for abduction the generator's input and for induction its
        program, or with rl.sft_label=canonical the canonical ones (rl/canonical.py)."""
        if self.labeler is not None:
            before = self.labeler.fallbacks
            answer = self.labeler.answer(task)
            if self.labeler.fallbacks > before:
                self.counts["canonical abduction label: search limit, the generator's input kept"] += 1
            return answer
        return task.program if task.kind == "induction" else (
            task.inputs[0] if task.kind == "abduction" else task.outputs[0])

    def _weights(self, response: list[int], role: str, kind: str) -> list[float]:
        lay = P.layout(role, kind)
        w = [1.0] * lay.response
        if role == "solve":
            start = response.index(P.TOKEN["<answer>"])
            end = response.index(P.TOKEN["</answer>"])
            for j in range(start + 1, end):
                w[j] += self.rl.seed_answer_weight
        return w

    def _solve_example(self, kind: str):
        task = self._task(kind)
        resp, _ = self._solution(task)
        return ("solve", kind, P.prompt("solve", kind, P.task_tokens(task)),
                P.check_response(resp, "solve", kind), self._weights(resp, "solve", kind))

    def _propose_example(self, kind: str):
        ref, task = self._task(kind), self._task(kind)
        resp = P.proposal_tokens(task)
        return ("propose", kind, P.prompt("propose", kind, P.task_tokens(ref)),
                P.check_response(resp, "propose", kind), self._weights(resp, "propose", kind))

    def _critique_example(self, kind: str):
        """A right solver response, or one with its answer corrupted; the verdict is the executor's,
        the score the task's number of statements (how much it asks of the solver)."""
        task = self._task(kind)
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
