"""Test-time compute, reported apart from the model's one-shot accuracy (`trmkit eval`).

- Thinking until the answer is stable: `--steps auto[:CAP]` (train/halting.py), each example's own K,
  reported as steps_used_mean and steps_used_max beside the accuracies.
- More thinking: `--steps 8,16,32,64` evaluates with K supervision steps per example instead of the
  trained N_sup (the weights do not depend on it); a curve is kept in RUN_DIR/eval_steps.json per
  evaluated store, for `trmkit report`.
- Pooling: `--steps 16,32,64 --vote 8 --pool` also votes once over every variant's answer at every K
  (8 x 3 ballots, one pass per variant to the largest K): the answers a longer think loses are kept;
  `--pool every` takes the answers after every K from the smallest to the largest (same passes).
- Voting: `--vote 1,2,4,8` solves n symmetric variants of each example (the task's `Variants`,
  data/variants.py), undoes each symmetry on the predicted probabilities and votes; a ballot that
  breaks the task's rules is not counted. The n variants of a curve are the first n of the largest
  count, so one pass gives the whole curve; each point's seconds are the forward passes of its own
  n variants plus its vote. A voted answer has no loss (it is not one forward's logits): only the
  accuracies and the task's own metrics are reported.
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch

from trmkit import files, rundir
from trmkit.config import ConfigError
from trmkit.data.stream import eval_batches
from trmkit.data.variants import Variants, vote
from trmkit.model.losses import log_stablemax
from trmkit.model.trm import TRM
from trmkit.train import halting
from trmkit.train.evaluate import run_eval, run_eval_curve
from trmkit.train.optim import ema_weights
from trmkit.train.session import Session
from trmkit.train.step import StepContext, labels_to_tensor

if TYPE_CHECKING:
    from trmkit.data.store import Split

Log = Callable[[str], None]


def parse_steps(text: str | None) -> list[int]:
    """`--steps 8,16,32` -> [8, 16, 32] ([] when not given: the run's own N_sup)."""
    if not text:
        return []
    try:
        steps = [int(k) for k in str(text).split(",")]
    except ValueError:
        steps = [0]
    if any(k < 1 for k in steps):
        raise ConfigError(f"--steps {text}: give supervision steps as positive integers, e.g. --steps 8,16,32,64")
    return steps


def parse_counts(text: str | None) -> list[int]:
    """`--vote 1,2,4,8` -> [1, 2, 4, 8] ([] when not given: no vote)."""
    if not text:
        return []
    try:
        counts = sorted({int(k) for k in str(text).split(",")})
    except ValueError:
        counts = [0]
    if counts[0] < 1:
        raise ConfigError(f"--vote {text}: give numbers of variants as positive integers, e.g. --vote 1,2,4,8")
    return counts


def check_pool(mode: str | list[int] | None, counts: list[int], steps: list[int]) -> None:
    """`--pool` (a mode, or pool_steps' K; None: no pool) needs a vote (--vote N) at several K
    (--steps K1,K2,...): refused otherwise, before the session and the model load."""
    if mode is not None and not (counts and len(steps) > 1):
        raise ConfigError("--pool votes over the answers at several K: give --steps K1,K2,... and --vote N")


def pool_steps(mode: str | None, steps: list[int]) -> list[int] | None:
    """The K whose answers `--pool` puts to one vote: "listed" -> the --steps given; "every" -> every K
    from the smallest to the largest of them (one pass to the largest K reads them all); None -> no pool."""
    if mode is None:
        return None
    return list(range(min(steps), max(steps) + 1)) if mode == "every" and steps else sorted(steps)


def eval_at_steps(s: Session, steps: list[int], limit: int | None = None, log: Log = print,
                  variants: Variants | None = None, counts: list[int] | None = None, keep: bool = True,
                  pool: list[int] | None = None) -> dict:
    """The evaluation with N_sup = K supervision steps per example, and with `counts` the vote over
    that many variants at each K (under "vote": {n: metrics}). One K -> its metrics (and "steps": K);
    several -> {"steps": {K: metrics with "seconds"}}, also kept in RUN_DIR/eval_steps.json for the
    report when `keep` (the final weights' curve; not a checkpoint's). `pool` (pool_steps): also one vote
    over the largest count's variants at each of those K ("pooled_vote"). Several K in one process are
    one pass (run_eval_curve: 8,16,32,64 cost 64 steps per example, not 120), each K's "seconds" the time
    to reach it."""
    check_pool(pool, counts or [], steps)
    trained, curve = s.model.cfg, {}
    one_pass = run_eval_curve(s, steps, limit, log) if len(steps) > 1 and not s.run.world.active else {}
    try:
        for k in steps or [trained.halt_max_steps]:
            s.model.cfg = dataclasses.replace(trained, halt_max_steps=k)
            t0 = time.perf_counter()
            curve[k] = one_pass.get(k) or {**run_eval(s, limit, log=log), "seconds": round(time.perf_counter() - t0, 2)}
            log(f"eval: K={k} supervision steps: exact_accuracy {curve[k].get('exact_accuracy', 0):.3f} "
                f"({curve[k]['seconds']:.0f} s)")
            if counts:
                curve[k]["vote"] = run_vote(s, variants, counts, limit, log)
    finally:
        s.model.cfg = trained
    if len(steps) <= 1:
        only = next(iter(curve.values()))
        return {**only, "steps": steps[0]} if steps else only
    pooled = {"pooled_vote": run_pooled_vote(s, variants, max(counts), pool, limit, log)} if pool else {}
    if keep:
        path = rundir.path(s.cfg.run.dir, rundir.EVAL_STEPS)
        kept = json.loads(path.read_text()) if path.is_file() else {}
        kept[str(s.cfg.data.path)] = {str(k): v for k, v in curve.items()}
        files.write_json(path, kept)
    return {"steps": curve, "trained_steps": trained.halt_max_steps, **pooled}


def eval_auto(s: Session, cap: int, limit: int | None = None, log: Log = print) -> dict:
    """The evaluation with `--steps auto[:cap]` (cap 0: the default): each example stops once its answer
    is stable (train/halting.py); its metrics with "steps": "auto", the cap, the patience, and the steps
    used per example (mean, max)."""
    rule, why = halting.rule_for(cap, s.model.cfg.halt_max_steps)
    log(f"eval: --steps auto: {rule.describe()} (cap: {why}; patience {rule.patience}: train/halting.py)")
    trained_ctx, t0 = s.ctx, time.perf_counter()
    s.ctx = dataclasses.replace(trained_ctx, halting=rule)
    try:
        result = run_eval(s, limit, log=log)
    finally:
        s.ctx = trained_ctx
    if not result:
        return {}
    seconds = round(time.perf_counter() - t0, 2)
    log(f"eval: --steps auto: exact_accuracy {result.get('exact_accuracy', 0):.3f}, steps used mean "
        f"{result['steps_used_mean']:.2f}, max {result['steps_used_max']} ({seconds:.0f} s)")
    return {**result, "steps": "auto", "steps_cap": rule.cap, "stable_steps": rule.patience,
            "trained_steps": s.model.cfg.halt_max_steps, "seconds": seconds}


# --------------------------------------------------------------------------- voting


def run_vote(s: Session, variants: Variants | None, counts: list[int], limit: int | None = None,
             log: Log = print) -> dict[int, dict]:
    """Vote over the first n variants for each n in counts, on the test split: {n: metrics}."""
    split = s.data.test
    if split is None:
        raise ConfigError(f"{s.cfg.data.path}: no test split to evaluate")
    if variants is None:
        raise ConfigError(f"{s.cfg.data.path}: the store's task declares no symmetries to vote over "
                          "(Task.variants, docs/tasks.md); evaluate without --vote")
    if len(variants) < max(counts):
        raise ConfigError(f"--vote {max(counts)}: only {len(variants)} variants were made")
    solve = lambda batch: _solve_variants(s.model, s.ctx, batch, variants, max(counts))  # noqa: E731
    result = _tally_split(s, counts, solve, variants, limit)
    for n, r in result.items():
        log(f"eval: vote over {n} variant(s) at K={s.model.cfg.halt_max_steps}: exact_accuracy "
            f"{r['exact_accuracy']:.3f} ({r['seconds']:.0f} s)")
    return result


def run_pooled_vote(s: Session, variants: Variants | None, n: int, steps: list[int], limit: int | None = None,
                    log: Log = print) -> dict:
    """One vote over n variants x len(steps) ballots: each variant's answer after each K of steps."""
    split = s.data.test
    if variants is None or split is None or len(variants) < n:
        raise ConfigError(f"{s.cfg.data.path}: --pool needs a test split and {n} variants of its task")
    ballots = n * len(steps)
    solve = lambda batch: _solve_variants_at(s.model, s.ctx, batch, variants, n, steps)  # noqa: E731
    result = {**_tally_split(s, [ballots], solve, variants, limit)[ballots], "variants": n, "steps": list(steps)}
    listed = ','.join(map(str, steps)) if len(steps) <= 4 else f"{steps[0]},{steps[1]},...,{steps[-1]}"
    log(f"eval: vote over {n} variant(s) x K={listed} ({ballots} ballots): exact_accuracy "
        f"{result['exact_accuracy']:.3f} ({result['seconds']:.0f} s)")
    return result


def _tally_split(s: Session, counts: list[int], solve: Callable, variants: Variants, limit: int | None
                 ) -> dict[int, dict]:
    """The votes over the first n ballots for each n in counts, on the test split, with EMA weights in
    eval mode; solve(batch) -> (ballots' probabilities, halting logits, seconds per ballot)."""
    tally = _Tally(counts, s.ctx, s.scorer, s.data.test)
    with ema_eval_mode(s):
        for batch in each_test_batch(s, limit):
            tally.add(batch, *solve(batch), variants)
    return tally.result()


@contextmanager
def ema_eval_mode(s: Session) -> Iterator[None]:
    """The model with its EMA weights, in eval mode; both as they were after."""
    with ema_weights(s.model, s.opts.ema):
        was_training = s.model.training
        s.model.eval()
        try:
            yield
        finally:
            s.model.train(was_training)


def each_test_batch(s: Session, limit: int | None) -> Iterator:
    """The test split's evaluation batches: its first `limit` examples (default data.eval_limit, 0 = all)."""
    limit = limit if limit is not None else (s.cfg.data.eval_limit or None)
    return eval_batches(s.data.test, s.run.eval_batch or int(s.run.plan.eval_batch.value), limit)


@torch.no_grad()
def _solve_variants_at(model: TRM, ctx: StepContext, batch, variants: Variants, n: int, steps: list[int]
                       ) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
    """As _solve_variants, with each variant's probabilities after every K of steps (one pass per
    variant to the largest K); a variant's seconds go to its first ballot."""
    inputs = np.asarray(batch.inputs)
    pids = torch.from_numpy(np.asarray(batch.puzzle_ids)).to(ctx.device, torch.int64)
    probs, seconds, q_first = [], [], None
    for v in range(n):
        t0 = time.perf_counter()
        x = torch.from_numpy(variants.apply(inputs, v)).to(ctx.device)
        carry = model.initial_carry(x.shape[0], ctx.device)
        z_H, z_L = carry.z_H, carry.z_L
        for k in range(1, max(steps) + 1):
            with ctx.autocast():
                z_H, z_L, logits, q = model(z_H, z_L, x, pids)
            if k in steps:
                answer = model.answer_logits(logits, x).float()  # a trace folded into the answer (data.trace)
                probs.append(variants.undo(log_stablemax(answer).exp().cpu().numpy(), v))
                seconds.append(0.0)
        q_first = q.float().cpu().numpy() if q_first is None else q_first
        seconds[-len(steps)] = time.perf_counter() - t0
    return probs, q_first, seconds


def _solve_variants(model: TRM, ctx: StepContext, batch, variants: Variants, n: int
                    ) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
    """Each variant's probabilities (b, L, V) after the model's N_sup steps, turned back to the example's
    frame; the halting logits of the example itself; the seconds each variant took."""
    return _solve_variants_at(model, ctx, batch, variants, n, [model.cfg.halt_max_steps])


class _Tally:
    """The generic accuracies and the task's scorer, one set per number of variants."""

    def __init__(self, counts: list[int], ctx: StepContext, scorer, split: Split) -> None:
        self.counts, self.ctx, self.blank_id = counts, ctx, split.meta.blank_id
        self.totals = {n: new_totals() for n in counts}
        self.scorers = {n: scorer(split) if scorer is not None else None for n in counts}

    def add(self, batch, probs: list[np.ndarray], q_halt: np.ndarray, seconds: list[float],
            variants: Variants) -> None:
        inputs = np.asarray(batch.inputs)
        labels = self.labels(batch)
        t0 = time.perf_counter()  # each variant's answer is checked once, whatever the counts
        passed = np.stack([variants.check(inputs, p.argmax(-1)) for p in probs]) if variants.check else None
        checking = time.perf_counter() - t0
        for n in self.counts:
            t0 = time.perf_counter()
            answers = vote(inputs, probs[:n], variants.check, None if passed is None else passed[:n],
                           variants.prefer)  # (b, L)
            t = self.totals[n]
            t["seconds"] += sum(seconds[:n]) + checking * n / len(probs) + time.perf_counter() - t0
            count_answers(t, answers[:, :labels.shape[1]], labels, inputs, self.blank_id)
            if self.scorers[n] is not None:
                self.scorers[n].add(batch, answers, q_halt)

    def labels(self, batch) -> np.ndarray:
        """(b, L) int64, negative where a cell is not scored (the store's ignore label, train.mask_given)."""
        ctx = self.ctx
        return labels_to_tensor(batch.labels, ctx.ignore_label_id, ctx.device, batch.inputs,
                                ctx.given_tokens).cpu().numpy()

    def result(self) -> dict[int, dict]:
        out = {}
        for n, t in self.totals.items():
            r = rates(t, self.blank_id)
            if self.scorers[n] is not None:
                r.update(self.scorers[n].result())
            out[n] = r
        return out


def new_totals() -> dict:
    """The counts one way of answering adds up over an evaluation (count_answers, rates)."""
    return dict(right=0, valid=0, blank_right=0, blank=0, exact=0, n=0, seconds=0.0)


def count_answers(t: dict, answers: np.ndarray, labels: np.ndarray, inputs: np.ndarray, blank_id: int | None
                  ) -> None:
    """Add one batch to the totals t: answers and labels (b, L), a label < 0 not scored; blank cells
    (inputs == blank_id) counted apart."""
    scored = labels >= 0
    right = (answers == labels) & scored
    t["right"] += int(right.sum())
    t["valid"] += int(scored.sum())
    t["exact"] += int((right | ~scored).all(1).sum())
    t["n"] += len(answers)
    if blank_id is not None:
        blank = (inputs[:, :labels.shape[1]] == blank_id) & scored
        t["blank_right"] += int((right & blank).sum())
        t["blank"] += int(blank.sum())


def rates(t: dict, blank_id: int | None) -> dict:
    """exact / cell (/ blank) accuracy, samples and seconds of the totals t."""
    r = {"exact_accuracy": t["exact"] / max(1, t["n"]), "cell_accuracy": t["right"] / max(1, t["valid"])}
    if blank_id is not None:
        r["blank_accuracy"] = t["blank_right"] / max(1, t["blank"])
    r["samples"] = t["n"]
    r["seconds"] = round(t["seconds"], 2)
    return r
