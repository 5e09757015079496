"""Solving the new source's problems with the model's test-time compute, and keeping what the checker accepts.

A round's tries are train/select.py's trajectories: the task's symmetric variants and/or noise on the
initial carry. With `adapt.steps=K` each runs K supervision steps (`select.solve`); with `adapt.steps=auto`
each variant thinks until its answer is stable (train/halting.py `think_until_stable`: a larger problem
takes the steps it needs, a small one stops early), a noised one runs the trained N_sup, and the problem
itself thinking until stable is always one of the tries. No label is
read anywhere here: the checker (`Checking` from the task, tasks/base.py) sees the problem's inputs and each
try's answer tokens; among the accepted tries of one problem the checker's preference wins (a maze's
shortest path), then the largest final halting logit, then the earliest try. The chosen answer becomes a
label through the checker's `to_label` (a maze: the final path, without a trace).

The vote control (adapt.keep=vote, `vote`) keeps the plurality answer of the tries instead and never asks
the checker's verdict; the TR-RPG arm (adapt/trrpg.py) draws its own tries, whose probability it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from trmkit.config import ConfigError
from trmkit.data.stream import Batch
from trmkit.data.variants import Variants
from trmkit.train import halting
from trmkit.train import select as select_mod
from trmkit.train.session import Session
from trmkit.train.testtime import ema_eval_mode

Log = Callable[[str], None]


@dataclass(frozen=True)
class Solver:
    """How a round tries a problem: the trajectories, their K, the variants they solve, and the auto try."""

    trajectories: list[select_mod.Trajectory]
    k: int  # supervision steps of each trajectory
    variants: Variants | None
    auto: halting.StableAnswer | None  # adapt.steps=auto: the rule of the tries that think until stable
    batch: int  # problems per forward

    def stable(self) -> list[select_mod.Trajectory]:
        """The trajectories that think until stable (adapt.steps=auto, no noise); the rest run K steps."""
        return [t for t in self.trajectories if self.auto is not None and not t.noisy]

    def extra_auto(self) -> bool:
        """The problem itself until stable, as one more try: adapt.steps=auto and no variant-0 try of that kind."""
        return self.auto is not None and not any(t.variant == 0 for t in self.stable())

    def tries(self) -> int:
        return len(self.trajectories) + self.extra_auto()


def make_solver(n: int, source: str, steps: str, n_sup: int, variants: Variants | None, batch: int,
                log: Log) -> Solver:
    """The solver of adapt.trajectories=n, adapt.select_from=source, adapt.steps=steps; every choice said."""
    if source != "noise" and variants is None:
        log(f"adapt: select_from={source} -> noise (the task declares no symmetric variants)")
        source = "noise"
    if source == "variants" and len(variants) < n:
        log(f"adapt: {n} tries from variants -> {len(variants)} (the variants the task makes)")
        n = len(variants)
    select_mod.parse_select(n)
    trajectories = select_mod.plan(n, source, len(variants) if variants is not None else 1)
    cap = halting.parse_auto(steps)
    if cap is None:
        k = _steps(steps)
        auto = None
    else:
        k, (auto, why) = n_sup, halting.rule_for(cap, n_sup)
        log(f"adapt: steps={steps} -> the tries think until stable: {auto.describe()} (cap: {why})")
    solver = Solver(trajectories, k, variants, auto, max(1, batch))
    how = (f"at K={k}" if auto is None else
           "each variant until its answer is stable" + (f", each noised one at K={k}" if source != "variants" else ""))
    log(f"adapt: each unsolved problem gets {solver.tries()} tries from {source}, {how} "
        f"({select_mod.NOISE_STD} noise std where noised; train/select.py)"
        + (" + the problem itself until stable" if solver.extra_auto() else ""))
    return solver


def _steps(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError(f"adapt.steps={text!r}: give supervision steps K (e.g. 16), or auto, or auto:CAP")
    return k


def candidates(model, ctx, solver: Solver, inputs: np.ndarray, puzzle_ids: np.ndarray, rows: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Every try's answer (T, b, L) and final halting logit (T, b) for problems (b, L); rows seed the noise."""
    tries, qs = [], []
    stable = solver.stable()
    fixed = [t for t in solver.trajectories if t not in stable]
    if fixed:
        batch = Batch(inputs=inputs, labels=np.zeros((len(inputs), 0), np.int64), puzzle_ids=puzzle_ids, rows=rows)
        answers, q, _ = select_mod.solve(model, ctx, batch, fixed, solver.k, solver.variants)
        tries.append(answers)
        qs.append(q)
    for v in [t.variant for t in stable] + ([0] if solver.extra_auto() else []):
        answer, q = until_stable(model, ctx, solver, inputs, puzzle_ids, v)
        tries.append(answer[None])  # (1, b, L)
        qs.append(q[None])
    width = min(a.shape[2] for a in tries)
    return np.concatenate([a[:, :, :width] for a in tries]), np.concatenate(qs)


def until_stable(model, ctx, solver: Solver, inputs: np.ndarray, puzzle_ids: np.ndarray, variant: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """One try of variant `variant` thinking until its answer is stable: (answer (b, L) in the problem's own
    frame, final halting logit (b,))."""
    x = inputs if variant == 0 else solver.variants.apply(inputs, variant)
    x = torch.from_numpy(np.ascontiguousarray(x)).to(ctx.device)
    pids = torch.from_numpy(np.asarray(puzzle_ids)).to(ctx.device, torch.int64)
    logits, q, _, _ = halting.think_until_stable(model, x, pids, ctx, solver.auto)
    logits = model.answer_logits(logits, x).float().cpu().numpy()  # (b, L, V): a trace folded into the answer
    if variant != 0:
        logits = solver.variants.undo(logits, variant)
    return logits.argmax(-1), q.float().cpu().numpy()


def verdicts(checking, inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """(T, b) bool: the checker's verdict on each try's answer (T, b, L)."""
    rows = []
    for a in answers:
        row = np.asarray(checking.check(inputs, a), dtype=bool).reshape(-1)
        if len(row) != answers.shape[1]:
            raise ConfigError(f"the checker ({checking.describe or 'of the task'}) gave {len(row)} verdicts for "
                              f"{answers.shape[1]} answers: it must return one bool per answer")
        rows.append(row)
    return np.stack(rows)


def pick(checking, inputs: np.ndarray, answers: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(accepted (b,) bool, the answer kept per problem (b, L)): among the accepted tries, the checker's
    preference first, then the larger halting logit, then the earlier try."""
    passed = verdicts(checking, inputs, answers)
    rank = (np.stack([np.asarray(checking.prefer(inputs, a), dtype=float) for a in answers])
            if checking.prefer is not None else np.zeros(passed.shape))
    kept = answers[0].copy()
    for i in np.flatnonzero(passed.any(0)):
        tries = np.flatnonzero(passed[:, i])
        kept[i] = answers[max(tries, key=lambda t: (rank[t, i], q[t, i])), i]  # max keeps the first of equals
    return passed.any(0), kept


def vote(answers: np.ndarray, q: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """The control without the checker (adapt.keep=vote): (kept (b,) bool, the plurality answer (b, L)); a
    problem is kept when at least `share` of its T tries give the plurality answer (train/select.py plurality)."""
    chosen, _ = select_mod.plurality(answers, q)
    agree = (answers == chosen[None]).all(-1).mean(0)  # (b,) the share of tries that gave it
    return agree >= share - 1e-9, chosen


def to_labels(checking, inputs: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """The training labels of accepted answers: the checker's to_label, or the answers themselves."""
    return np.asarray(checking.to_label(inputs, answers) if checking.to_label is not None else answers, np.int64)


def solve_round(s: Session, solver: Solver, checking, inputs: np.ndarray, puzzle_ids: np.ndarray,
                index: np.ndarray, round_no: int, total: int, vote_share: float = 0.0,
                progress: Callable[[int, int], None] | None = None) -> dict[int, np.ndarray]:
    """Try the problems `index` (rows of inputs); {problem: its label} for the accepted ones. The noise of a
    problem's tries differs from round to round (rows offset by round x total problems). vote_share > 0: the
    vote control (adapt.keep=vote) keeps the plurality answer instead, and the checker's verdict is never asked.
    progress(tried, accepted) is called after each batch of problems."""
    kept: dict[int, np.ndarray] = {}
    with ema_eval_mode(s):
        for start in range(0, len(index), solver.batch):
            part = index[start:start + solver.batch]
            x = inputs[part]
            answers, q = candidates(s.model, s.ctx, solver, x, puzzle_ids[part], part + round_no * total)
            accepted, chosen = vote(answers, q, vote_share) if vote_share > 0 else pick(checking, x, answers, q)
            if accepted.any():
                labels = to_labels(checking, x[accepted], chosen[accepted])
                kept.update({int(p): y for p, y in zip(part[accepted], labels)})
            if progress is not None:
                progress(start + len(part), len(kept))
    return kept


def one_shot(s: Session, solver: Solver, checking, inputs: np.ndarray, puzzle_ids: np.ndarray,
             index: np.ndarray) -> float:
    """The share of problems `index` whose one-shot answer the checker accepts: the problem itself, no noise,
    at K (or thinking until stable with adapt.steps=auto), the EMA weights."""
    one = Solver([select_mod.Trajectory(0, False)], solver.k, None, solver.auto, solver.batch)  # at K, or until stable
    right = 0
    with ema_eval_mode(s):
        for start in range(0, len(index), solver.batch):
            part = index[start:start + solver.batch]
            x = inputs[part]
            answers, _ = candidates(s.model, s.ctx, one, x, puzzle_ids[part], part)
            right += int(verdicts(checking, x, answers[-1:]).sum())
    return right / max(1, len(index))
