"""Seeding and self-play as objectives of the one trainer (train/objective.py): what they share.

`CodeObjective` holds what both need: the executor (sandboxed, cached), the fixed held-out
set, the random state, the Objective protocol (model fields, identity, state, progress) and
the evaluation. Both objectives evaluate the solver greedily on the held-out set, by
execution. The objectives themselves: seed.py (`SeedObjective`, supervised trajectory
seeding) and selfplay.py (`SelfPlayObjective`, one self-play round per trainer step).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable

import numpy as np
import torch

from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.rl import heldout
from trmkit.rl import programs as P
from trmkit.rl.config import rl_config
from trmkit.rl.executor import Executor
from trmkit.rl.policy import encode, sample
from trmkit.rl.sandbox import Limits
from trmkit.rl.stats import balanced_accuracy
from trmkit.train.step import StepContext

Log = Callable[[str], None]


class CodeObjective:
    """What seeding and self-play share: the executor, the held-out set, evaluation, state."""

    name = "code"

    def __init__(self, cfg: Config, log: Log = print):
        self.cfg, self.log = cfg, log
        self.rl = rl = rl_config(cfg)  # the rl section, typed and checked
        self.executor = Executor(Limits(cpu_seconds=rl.sandbox_cpu_seconds, wall_seconds=rl.sandbox_wall_seconds,
                                        memory_bytes=rl.sandbox_memory_mb * 2**20), rl.cache_mb * 2**20)
        items = heldout.for_config(rl.heldout_seed, rl.heldout_per_type, log)
        self.heldout = [t for t, _ in items]
        self.heldout_tags = [g for _, g in items]
        self.heldout_keys = {t.key() for t in self.heldout}
        self.eval_per_type = rl.eval_per_type  # evaluations use the first tasks of each type (`rl eval`: all)
        self.validation: list[tuple[P.CodeTask, heldout.Tags]] | None = None  # scored instead, when set (rl.pool_val)
        self.last_outcomes: list[bool] = []  # the latest evaluation's per-task results, in held-out order
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
        # "objective": which command continues the run (train/resume.py run_kind: rl seed or rl train)
        return {"task": "selfplay-code", "objective": self.name, "vocab": list(P.VOCAB),
                "seq_len": P.max_length(),
                "heldout_seed": self.rl.heldout_seed, "heldout_per_type": self.rl.heldout_per_type}

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
        """Greedy solver on the held-out tasks, its answer slots checked by execution: solve rates over all
        tasks, the non-shortcut ones (the headline) and each type and slice, with standard errors
        (rl/heldout.py); the share of well-formed answers; the critique's balanced accuracy on the
        solver's answers."""
        model.eval()
        items = self.validation or heldout.first(list(zip(self.heldout, self.heldout_tags)), self.eval_per_type)
        right, formed, verdicts = [False] * len(items), [False] * len(items), [None] * len(items)
        for kind in P.TYPES:  # one batch per type; outcomes go back to each task's own index (items may mix types)
            where = [i for i, (t, _) in enumerate(items) if t.kind == kind]
            tasks = [items[i][0] for i in where]
            resp = self._greedy(model, ctx, "solve", kind, [P.prompt("solve", kind, P.task_tokens(t)) for t in tasks])
            ok, parsed = self._check_solutions(tasks, resp)
            rows = [P.prompt("critique", kind, P.task_tokens(t) + r) for t, r in zip(tasks, resp)]
            said = self._greedy(model, ctx, "critique", kind, rows)
            for j, i in enumerate(where):
                right[i], formed[i] = ok[j], parsed[j] is not None
                verdicts[i] = {P.TOKEN["<yes>"]: True, P.TOKEN["<no>"]: False}.get(said[j][0])
        self.last_outcomes = right
        out = heldout.summarize(right, items)
        out["format_rate"] = float(np.mean(formed))
        for kind in ("",) + P.TYPES:
            sel = [i for i, (t, _) in enumerate(items) if kind in ("", t.kind)]
            acc = balanced_accuracy([verdicts[i] for i in sel], [right[i] for i in sel])
            if acc is not None:  # undefined when every answer is right, or every one wrong
                out["critique/balanced_accuracy" + (f"/{kind}" if kind else "")] = acc
        long = [r for r, (t, _) in zip(right, items) if len(t.program) > P.SEED_MAX_STATEMENTS]
        short = [r for r, (t, _) in zip(right, items) if len(t.program) <= P.SEED_MAX_STATEMENTS]
        out[f"solve_rate/len<={P.SEED_MAX_STATEMENTS}"] = float(np.mean(short)) if short else 0.0
        out[f"solve_rate/len>{P.SEED_MAX_STATEMENTS}"] = float(np.mean(long)) if long else 0.0
        return out

    def _greedy(self, model: TRM, ctx: StepContext, role: str, kind: str, rows: list[list[int]]) -> list[list[int]]:
        inputs = encode(rows, len(P.VOCAB), ctx.device)
        resp, _, _ = sample(model, inputs, P.layout(role, kind).response, max(ctx.micro_batch, 64),
                            ctx.autocast, greedy=True)
        return resp.tolist()

    def _check_solutions(self, tasks: list[P.CodeTask], responses: list[list[int]]
                         ) -> tuple[list[bool], list[tuple | None]]:
        """Each response's answer slots checked by execution (None: the answer did not parse)."""
        parsed: list[tuple | None] = []
        for t, r in zip(tasks, responses):
            try:
                parsed.append(P.parse_answer(r, t.kind))
            except P.Malformed:
                parsed.append(None)
        items = [(t, a) for t, a in zip(tasks, parsed) if a is not None]
        verdicts = iter(self.executor.check(items))
        return [next(verdicts) if a is not None else False for a in parsed], parsed

    def fresh_task(self, kind: str, max_len: int = P.SEED_MAX_STATEMENTS, min_len: int = 1,
                   rng: random.Random | None = None) -> P.CodeTask:
        """A generated task of min_len..max_len statements (never a held-out one), completed by execution."""
        while True:
            t = P.random_task(rng or self.rng, kind, min_len, max_len)
            if t.key() in self.heldout_keys:
                self.counts["generated task equal to a held-out one, drawn again"] += 1
                continue
            done = self.executor.complete([t])[0]
            if isinstance(done, P.CodeTask):
                return done
            self.counts[f"generated task invalid: {done[:40]}"] += 1
