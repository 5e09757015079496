"""Evaluation: every sample runs all N_sup supervision steps (as in the paper).

Reported metrics (names shared by `train`'s summary and `eval`):
- loss: token stable-max cross-entropy at the last step, mean over samples;
- cell_accuracy: right cells / labelled cells (givens included, as the reference);
- blank_accuracy: the same over the cells that were blank in the input
  (only for tasks whose store names a blank token, e.g. Sudoku);
- exact_accuracy: samples whose every labelled cell is right;
- act_steps: mean number of steps at which the halting head would stop
  (the first step with q_halt > 0, else N_sup).

A task adds its own metrics through a `Scorer` (docs/tasks.md): it sees every
batch with the predicted tokens and the final halting logit, and its
`result()` is merged into the metrics. The trainer knows only this protocol,
never a task.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

import numpy as np
import torch

from trmkit.model.losses import act_loss
from trmkit.model.trm import TRM
from trmkit.train.step import StepContext, labels_to_tensor


class Scorer(Protocol):
    """A task's extra metrics, fed batch by batch during evaluation."""

    def add(self, batch, preds: np.ndarray, q_halt: np.ndarray) -> None:
        """batch: data.store.Batch (rows included); preds (b, L) token ids; q_halt (b,) final halt logits."""

    def result(self) -> dict[str, float]:
        """Metrics to merge into the evaluation's (names must not clash with the generic ones)."""

    # Optional: save(run_dir) -> Path writes the task's answers (ARC: submission.json) after evaluation.
    # Optional: needs_logits = True: add() also gets logits=(b, positions, classes) as float32 numpy
    # (a classifier's calibration needs its scores, not just the argmax).


@torch.no_grad()
def evaluate(model: TRM, batches: Iterable, ctx: StepContext, blank_id: int | None,
             scorer: Scorer | None = None, reduce: Callable[[dict], dict] | None = None) -> dict[str, float]:
    """Run every batch through all N_sup steps; returns averaged metrics (and the scorer's).

    reduce: with several processes (and no scorer), `batches` holds this process's share
    (data.store.eval_batches) and `reduce` sums the totals over the processes."""
    was_training = model.training
    model.eval()
    totals = dict(loss=0.0, right=0, valid=0, blank_right=0, blank=0, exact=0, steps=0.0, n=0)
    for batch in batches:
        part, preds, q_halt, logits = _eval_batch(model, batch, ctx, blank_id)
        _accumulate(totals, part)
        if scorer is not None:  # host copies only for a task that reads them
            extra = {"logits": logits.float().cpu().numpy()} if getattr(scorer, "needs_logits", False) else {}
            scorer.add(batch, preds.cpu().numpy(), q_halt.float().cpu().numpy(), **extra)
    model.train(was_training)
    if reduce is not None:
        totals = reduce(totals)
    n = max(1, totals["n"])
    generic = {
        "loss": totals["loss"] / n,
        "cell_accuracy": totals["right"] / max(1, totals["valid"]),
        "blank_accuracy": totals["blank_right"] / max(1, totals["blank"]),
        "exact_accuracy": totals["exact"] / n,
        "act_steps": totals["steps"] / n,
        "samples": totals["n"],
    }
    if blank_id is None:  # a task without blank cells (Maze, ARC): the metric would read 0, not "none"
        del generic["blank_accuracy"]
    return {**generic, **(scorer.result() if scorer is not None else {})}



def _eval_batch(model: TRM, batch, ctx: StepContext, blank_id: int | None
                ) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
    inputs = torch.from_numpy(np.asarray(batch.inputs)).to(ctx.device)
    labels = labels_to_tensor(batch.labels, ctx.ignore_label_id, ctx.device)
    pids = torch.from_numpy(np.asarray(batch.puzzle_ids)).to(ctx.device, torch.int64)
    carry = model.initial_carry(inputs.shape[0], ctx.device)
    z_H, z_L = carry.z_H, carry.z_L
    n_sup = model.cfg.halt_max_steps
    first_halt = torch.full((inputs.shape[0],), n_sup, dtype=torch.int32, device=ctx.device)
    for step in range(1, n_sup + 1):
        with ctx.autocast():
            z_H, z_L, logits, q = model(z_H, z_L, inputs, pids)
        newly = (q > 0) & (first_halt == n_sup) & (step < n_sup)
        first_halt = torch.where(newly, torch.full_like(first_halt, step), first_halt)
    loss, stats = act_loss(logits.float(), labels, q, model.cfg.halt_loss_weight)
    labels = labels[:, :logits.shape[1]]  # a classifier scores position 0 only
    pred = logits.argmax(-1)
    blank = (inputs == blank_id) & (labels >= 0) if blank_id is not None else torch.zeros_like(labels, dtype=torch.bool)
    part = {
        "loss": float(stats["token_loss"].sum()),
        "right": int(stats["right"].sum()),
        "valid": int(stats["valid"].sum()),
        "blank_right": int(((pred == labels) & blank).sum()),
        "blank": int(blank.sum()),
        "exact": int(stats["exact"].sum()),
        "steps": float(first_halt.float().sum()),
        "n": int(inputs.shape[0]),
    }
    return part, pred, q, logits


def _accumulate(totals: dict, part: dict) -> None:
    for k, v in part.items():
        totals[k] += v
