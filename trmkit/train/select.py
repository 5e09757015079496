"""`trmkit eval RUN --select N`: N trajectories per example, the model's own halting head picks one.

No verifier and no label: the N trajectories differ by Gaussian noise added to the initial carry
(z_H, z_L) and/or by the task's symmetric variants (the ones `--vote` uses, data/variants.py);
each runs K supervision steps (`--steps K`, default the trained N_sup); the answer kept for an
example is that of the trajectory with the **largest final halting logit** q_halt (the Q head's
"this answer is right" logit after the last step; a tie keeps the earliest trajectory, so
trajectory 0 wins ties). Reported under `select/...` beside the one-shot figures.

Separately, and also without a verifier, a **plurality** over the N trajectories' answers (the
whole answer is one ballot; the answer with most ballots wins; a tie goes to the answer whose best
ballot has the larger halting logit), under `plurality/...`. A task's rule-checked vote stays
`--vote`, reported apart again.

- Trajectory 0 is the example itself, without noise: `--select 1` is the one-shot evaluation.
- Trajectory t >= 1 adds noise ~ N(0, NOISE_STD^2) to every element of z_H and of z_L (their
  initial vectors H_init, L_init are drawn with std 1, so 0.5 moves the start clearly but keeps it
  in the region the net was trained from). `--select-from variants`: trajectory t is variant t,
  without noise; `both`: variant t mod (the variants the task makes), with noise for t >= 1.
- The noise of example row r, trajectory t is drawn from its own generator seeded by
  (NOISE_SEED, r, t): the same for any batch size, with or without the other examples.
- N <= MAX_SELECT (16): each trajectory costs a full one-shot evaluation.
- NOISE_STD, NOISE_SEED and the rule are fixed choices, made before any measurement: nothing was
  tuned, on the evaluation sets or elsewhere. Measured in docs/results.md (the hardest 1,000
  17-clue Sudoku, K = 16: one-shot 0.821, 16 noised trajectories 0.936, 16 variants 0.987).

Departure from PTRM (Sghaier et al. 2026), which injects noise at every deep recursion step: here
only the start is perturbed (one draw per trajectory, the model code untouched); on the hardest
Sudoku that gave 4.2 distinct answers per puzzle among 16 (`select/distinct_answers_mean`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from trmkit.config import ConfigError
from trmkit.data.variants import Variants
from trmkit.train.session import Session
from trmkit.train.step import StepContext, answer_cells, labels_to_tensor
from trmkit.train.testtime import count_answers, ema_eval_mode, new_totals, rates, each_test_batch

if TYPE_CHECKING:
    from trmkit.data.store import Split

Log = Callable[[str], None]

MAX_SELECT = 16  # trajectories per example at most: each costs a one-shot evaluation
NOISE_STD = 0.5  # std of the Gaussian noise added to the initial z_H and z_L (their init vectors: std 1)
NOISE_SEED = 0  # with the example's row and the trajectory, seeds the noise
SOURCES = ("noise", "variants", "both")
RULE = "largest final halting logit q_halt (ties: the earliest trajectory)"


@dataclass(frozen=True)
class Trajectory:
    """One way to solve an example: its symmetric variant (0: itself) and whether the carry is noised."""

    variant: int = 0
    noisy: bool = False


def parse_select(n: int | str | None) -> int:
    """`--select N` -> N (0: not given); N must be 1..MAX_SELECT."""
    if n is None:
        return 0
    try:
        count = int(n)
    except ValueError:
        count = -1
    if not 1 <= count <= MAX_SELECT:
        raise ConfigError(f"--select {n}: give a number of trajectories from 1 to {MAX_SELECT} (each costs one "
                          f"one-shot evaluation), e.g. --select 8")
    return count


def plan(n: int, source: str, n_variants: int = 1) -> list[Trajectory]:
    """The n trajectories of `--select n --select-from source` (n_variants: those the task made)."""
    if source not in SOURCES:
        raise ConfigError(f"--select-from {source}: choose one of {', '.join(SOURCES)}")
    if source == "noise":
        return [Trajectory(0, t > 0) for t in range(n)]
    if source == "variants":
        if n_variants < n:
            raise ConfigError(f"--select {n} --select-from variants: the task made only {n_variants} variants")
        return [Trajectory(t, False) for t in range(n)]
    return [Trajectory(t % n_variants, t > 0) for t in range(n)]


def initial_noise(rows: np.ndarray, t: int, shape: tuple[int, int]) -> torch.Tensor:
    """(b, 2, S, D) float32: the noise of trajectory t for z_H ([:, 0]) and z_L ([:, 1]) of each row."""
    out = []
    for r in np.asarray(rows).tolist():
        seed = int(np.random.SeedSequence([NOISE_SEED, int(r), t]).generate_state(1)[0])
        out.append(torch.randn((2, *shape), generator=torch.Generator().manual_seed(seed)))
    return torch.stack(out) * NOISE_STD


@torch.no_grad()
def solve(model, ctx: StepContext, batch, trajectories: list[Trajectory], k: int,
          variants: Variants | None = None) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Each trajectory's answer after k supervision steps, in the example's own frame, (N, b, L); its
    final halting logit (N, b); its seconds. Reads the batch's inputs, puzzle ids and rows, never its labels."""
    inputs = np.asarray(batch.inputs)
    rows = batch.rows  # evaluation batches always name their rows: the noise is seeded by them
    pids = torch.from_numpy(np.asarray(batch.puzzle_ids)).to(ctx.device, torch.int64)
    answers, qs, seconds = [], [], []
    for t, traj in enumerate(trajectories):
        t0 = time.perf_counter()
        x = inputs if traj.variant == 0 else variants.apply(inputs, traj.variant)
        x = torch.from_numpy(np.ascontiguousarray(x)).to(ctx.device)
        carry = model.initial_carry(x.shape[0], ctx.device)
        z_H, z_L = carry.z_H, carry.z_L  # (b, S, D)
        if traj.noisy:
            noise = initial_noise(rows, t, tuple(z_H.shape[1:])).to(ctx.device)
            z_H, z_L = z_H + noise[:, 0].to(z_H.dtype), z_L + noise[:, 1].to(z_L.dtype)
        for _ in range(k):
            with ctx.autocast():
                z_H, z_L, logits, q = model(z_H, z_L, x, pids)
        logits = model.answer_logits(logits, x).float().cpu().numpy()  # (b, L, V): a trace folded into the answer
        if traj.variant != 0:
            logits = variants.undo(logits, traj.variant)
        answers.append(logits.argmax(-1))
        qs.append(q.float().cpu().numpy())
        seconds.append(time.perf_counter() - t0)
    return np.stack(answers), np.stack(qs), seconds


def choose(answers: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's own choice: for each example the answer (b, L) of the trajectory with the largest
    halting logit (argmax keeps the first of equals), and that trajectory's index (b,)."""
    best = q.argmax(0)  # (b,)
    return answers[best, np.arange(answers.shape[1])], best


def plurality(answers: np.ndarray, q: np.ndarray, read: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The answer (b, L) given by most of the N trajectories (a tie: the larger best halting logit),
    and the number of distinct answers per example (b,). `read` (b, L): the cells two answers are
    compared on (default all; step.answer_cells leaves out cells the input gives under train.mask_given,
    whose argmax is free to differ)."""
    read = np.ones(answers.shape[1:], dtype=bool) if read is None else read
    out, distinct = answers[0].copy(), np.zeros(answers.shape[1], dtype=np.int64)
    for i in range(answers.shape[1]):
        ballots: dict[bytes, tuple[int, float, int]] = {}
        for t in range(answers.shape[0]):
            key = answers[t, i][read[i]].tobytes()
            count, best, first = ballots.get(key, (0, -np.inf, t))
            ballots[key] = (count + 1, max(best, float(q[t, i])), first)
        out[i] = answers[max(ballots.values(), key=lambda b: b[:2])[2], i]
        distinct[i] = len(ballots)
    return out, distinct


# --------------------------------------------------------------------------- a session's selection


def run_select(s: Session, trajectories: list[Trajectory], k: int, variants: Variants | None = None,
               limit: int | None = None, log: Log = print) -> dict:
    """`--select N` on the test split at k supervision steps, with the EMA weights in eval mode: the
    model's choice under "select/...", the plurality under "plurality/...", each with its seconds."""
    split = s.data.test
    if split is None:
        raise ConfigError(f"{s.cfg.data.path}: no test split to evaluate")
    tally = {name: _Score(s.ctx, s.scorer, split) for name in ("select", "plurality")}
    extra = dict(chose_first=0, distinct=0)
    with ema_eval_mode(s):
        for batch in each_test_batch(s, limit):
            _add_batch(s, batch, trajectories, k, variants, tally, extra)
    return _report(trajectories, k, tally, extra, log)


def _add_batch(s: Session, batch, trajectories, k, variants, tally: dict, extra: dict) -> None:
    answers, q, seconds = solve(s.model, s.ctx, batch, trajectories, k, variants)
    t0 = time.perf_counter()
    chosen, best = choose(answers, q)
    choosing = time.perf_counter() - t0
    t0 = time.perf_counter()
    given = s.ctx.given_tokens
    read = answer_cells(torch.from_numpy(np.asarray(batch.inputs)), None if given is None else given.cpu())
    read = read.numpy()[:, :answers.shape[2]]
    voted, distinct = plurality(answers, q, read)
    counting = time.perf_counter() - t0
    b = np.arange(len(best))
    tally["select"].add(batch, chosen, q[best, b], sum(seconds) + choosing)
    winner = ((answers == voted[None]) | ~read[None]).all(-1)  # (N, b): the trajectories that gave the voted answer
    tally["plurality"].add(batch, voted, np.where(winner, q, -np.inf).max(0), sum(seconds) + counting)
    extra["chose_first"] += int((best == 0).sum())
    extra["distinct"] += int(distinct.sum())


def _report(trajectories: list[Trajectory], k: int, tally: dict, extra: dict, log: Log) -> dict:
    n = len(trajectories)
    out = {"select/N": n, "select/steps": k, "select/rule": RULE, "select/noise_std": NOISE_STD,
           "select/noise_seed": NOISE_SEED, "select/variants": len({t.variant for t in trajectories})}
    for name, score in tally.items():
        out.update({f"{name}/{key}": v for key, v in score.result().items()})
    samples = max(1, out["select/samples"])
    out["select/chose_first"] = extra["chose_first"] / samples  # how often the noise-free trajectory 0 won
    out["select/distinct_answers_mean"] = extra["distinct"] / samples
    for name in tally:
        log(f"eval: --select {n} at K={k}, {name}: exact_accuracy {out[f'{name}/exact_accuracy']:.3f} "
            f"({out[f'{name}/seconds']:.0f} s; {out['select/distinct_answers_mean']:.2f} distinct answers "
            "per example)")
    return out


class _Score:
    """The generic accuracies of one way to answer, its task scorer's metrics and its seconds."""

    def __init__(self, ctx: StepContext, scorer, split: Split) -> None:
        self.ctx, self.blank_id = ctx, split.meta.blank_id
        self.t = new_totals()
        self.scorer = scorer(split) if scorer is not None else None

    def add(self, batch, answers: np.ndarray, q_halt: np.ndarray, seconds: float) -> None:
        ctx, t = self.ctx, self.t
        labels = labels_to_tensor(batch.labels, ctx.ignore_label_id, ctx.device, batch.inputs,
                                  ctx.given_tokens).cpu().numpy()[:, :answers.shape[1]]
        count_answers(t, answers, labels, np.asarray(batch.inputs), self.blank_id)
        t["seconds"] += seconds
        if self.scorer is not None:
            self.scorer.add(batch, answers, q_halt)

    def result(self) -> dict:
        return {**rates(self.t, self.blank_id), **(self.scorer.result() if self.scorer is not None else {})}
