"""Evaluation: every sample runs all N_sup supervision steps (as in the paper).

Reported metrics (names shared by `train`'s summary and `eval`):
- loss: token stable-max cross-entropy at the last step, mean over samples;
- cell_accuracy: right cells / labelled cells (givens included, as the reference);
- blank_accuracy: the same over the cells that were blank in the input
  (only for tasks whose store names a blank token, e.g. Sudoku);
- exact_accuracy: samples whose every labelled cell is right;
- act_steps: mean number of steps at which the halting head would stop
  (the first step with q_halt > 0, else N_sup).
- steps_used_mean, steps_used_max: with `eval --steps auto` only (ctx.halting, train/halting.py),
  the supervision steps each example took before its answer was stable.

A task adds its own metrics through a `Scorer` (docs/tasks.md): it sees every
batch with the predicted tokens and the final halting logit, and its
`result()` is merged into the metrics. The trainer knows only these protocols,
never a task: a scorer may also write the task's answers after evaluation (`SavesAnswers`)
and ask for the logits (`NeedsLogits`).

`run_eval` evaluates a session (train/session.py) with the EMA weights when EMA is on,
retrying at half the batch when an allocation fails; with several processes the batches or
the task's scoring are shared out (train/distributed.py).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np
import torch

from trmkit import hardware, rundir
from trmkit.config import ConfigError
from trmkit.data.stream import eval_batches
from trmkit.model.losses import act_loss
from trmkit.model.trm import TRM, resized
from trmkit.train import checkpoint
from trmkit.train import distributed as dist_mod
from trmkit.train.halting import think_until_stable
from trmkit.train.optim import ema_weights
from trmkit.train.scorer import NeedsLogits, SavesAnswers, Scorer
from trmkit.train.session import Session
from trmkit.train.state import restore_weights
from trmkit.train.step import StepContext, is_out_of_memory, labels_to_tensor

if TYPE_CHECKING:
    from trmkit.data.store import Split

Log = Callable[[str], None]


def new_eval_totals() -> dict:
    return dict(loss=0.0, right=0, valid=0, blank_right=0, blank=0, exact=0, steps=0.0, n=0)


@torch.no_grad()
def evaluate(model: TRM, batches: Iterable, ctx: StepContext, blank_id: int | None,
             scorer: Scorer | None = None, reduce: Callable[[dict], dict] | None = None) -> dict[str, float]:
    """Run every batch through all N_sup steps; returns averaged metrics (and the scorer's).

    reduce: with several processes (and no scorer), `batches` holds this process's share
    (data.stream.eval_batches) and `reduce` sums the totals over the processes."""
    was_training = model.training
    model.eval()
    totals = new_eval_totals()
    for batch in batches:
        part, preds, q_halt, logits = _eval_batch(model, batch, ctx, blank_id)
        _accumulate(totals, part)
        _score(scorer, batch, preds, q_halt, logits)
    model.train(was_training)
    if reduce is not None:
        totals = reduce(totals)
    return _metrics(totals, blank_id, scorer)


@torch.no_grad()
def evaluate_curve(model: TRM, batches: Iterable, ctx: StepContext, blank_id: int | None,
                   scorers: dict[int, Scorer | None]) -> dict[int, dict[str, float]]:
    """The metrics of `evaluate` at N_sup = K for every K in `scorers`, in one pass: each batch runs
    max(K) supervision steps and is read out at each K (think_readouts), so K = 8, 16, 32, 64 cost 64
    steps, not 120. Each K's "seconds": the time to reach and score its readout, summed over batches."""
    was_training = model.training
    model.eval()
    totals = {k: new_eval_totals() for k in scorers}
    seconds = dict.fromkeys(scorers, 0.0)
    for batch in batches:
        inputs, labels, pids = _batch_tensors(batch, ctx)
        t0 = time.perf_counter()
        for k, logits, q, first_halt in think_readouts(model, inputs, pids, ctx, list(scorers)):
            logits = model.answer_logits(logits, inputs)
            part, pred = _readout(model, inputs, labels, logits, q, first_halt, blank_id)
            _accumulate(totals[k], part)
            _score(scorers[k], batch, pred, q, logits)
            seconds[k] += time.perf_counter() - t0
    model.train(was_training)
    return {k: {**_metrics(totals[k], blank_id, scorers[k]), "seconds": round(seconds[k], 2)} for k in scorers}


def _score(scorer: Scorer | None, batch, preds: torch.Tensor, q_halt: torch.Tensor, logits: torch.Tensor) -> None:
    if scorer is not None:  # host copies only for a task that reads them
        wants = isinstance(scorer, NeedsLogits) and scorer.needs_logits
        extra = {"logits": logits.float().cpu().numpy()} if wants else {}
        scorer.add(batch, preds.cpu().numpy(), q_halt.float().cpu().numpy(), **extra)


def _metrics(totals: dict, blank_id: int | None, scorer: Scorer | None) -> dict[str, float]:
    n = max(1, totals["n"])
    generic = {
        "loss": totals["loss"] / n,
        "cell_accuracy": totals["right"] / max(1, totals["valid"]),
        "blank_accuracy": totals["blank_right"] / max(1, totals["blank"]),
        "exact_accuracy": totals["exact"] / n,
        "act_steps": totals["steps"] / n,
        "samples": totals["n"],
    }
    if "steps_used" in totals:  # `--steps auto`: the supervision steps each example took
        generic.update(steps_used_mean=totals["steps_used"] / n, steps_used_max=totals["steps_used_max"])
    if blank_id is None:  # a task without blank cells (Maze, ARC): the metric would read 0, not "none"
        del generic["blank_accuracy"]
    return {**generic, **(scorer.result() if scorer is not None else {})}


def _batch_tensors(batch, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    inputs = torch.from_numpy(np.asarray(batch.inputs)).to(ctx.device)
    labels = labels_to_tensor(batch.labels, ctx.ignore_label_id, ctx.device, batch.inputs, ctx.given_tokens)
    pids = torch.from_numpy(np.asarray(batch.puzzle_ids)).to(ctx.device, torch.int64)
    return inputs, labels, pids


def _eval_batch(model: TRM, batch, ctx: StepContext, blank_id: int | None
                ) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
    inputs, labels, pids = _batch_tensors(batch, ctx)
    used = None
    if ctx.halting is None:
        logits, q, first_halt = think(model, inputs, pids, ctx)
    else:  # `eval --steps auto` (train/halting.py)
        logits, q, first_halt, used = think_until_stable(model, inputs, pids, ctx, ctx.halting)
    logits = model.answer_logits(logits, inputs)  # a trace's tokens folded into the answer (data.trace)
    part, pred = _readout(model, inputs, labels, logits, q, first_halt, blank_id)
    if used is not None:
        part.update(steps_used=int(used.sum()), steps_used_max=int(used.max()))
    return part, pred, q, logits


def _readout(model: TRM, inputs: torch.Tensor, labels: torch.Tensor, logits: torch.Tensor, q: torch.Tensor,
             first_halt: torch.Tensor, blank_id: int | None) -> tuple[dict, torch.Tensor]:
    """One batch's totals (and predicted tokens) from the logits and halting logits of a supervision step."""
    loss, stats = act_loss(logits.float(), labels, q, model.cfg.halt_loss_weight, kind=model.cfg.loss)
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
    return part, pred


def think(model: TRM, inputs: torch.Tensor, pids: torch.Tensor, ctx: StepContext
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All N_sup supervision steps from a fresh carry: the last step's logits and halting logit, and
    the first step at which the halting head would stop (N_sup if never)."""
    *_, (_, logits, q, first_halt) = think_readouts(model, inputs, pids, ctx, [model.cfg.halt_max_steps])
    return logits, q, first_halt


def think_readouts(model: TRM, inputs: torch.Tensor, pids: torch.Tensor, ctx: StepContext, ks: list[int]
                   ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Supervision steps from a fresh carry up to max(ks), yielding at each K of ks (ascending) what
    `think` with N_sup = K returns: (K, that step's logits, its halting logit, the first step before K
    at which the halting head would stop, K if none). Evaluation's steps do not depend on N_sup, so
    each readout is exactly the evaluation at that K."""
    carry = model.initial_carry(inputs.shape[0], ctx.device)
    z_H, z_L = carry.z_H, carry.z_L
    wanted = sorted(set(ks))
    first_stop = torch.zeros((inputs.shape[0],), dtype=torch.int32, device=ctx.device)  # 0: not yet
    for step in range(1, wanted[-1] + 1):
        with ctx.autocast():
            z_H, z_L, logits, q = model(z_H, z_L, inputs, pids)
        if step in wanted:
            yield step, logits, q, torch.where(first_stop > 0, first_stop, torch.full_like(first_stop, step))
        first_stop = torch.where((q > 0) & (first_stop == 0), torch.full_like(first_stop, step), first_stop)


def _accumulate(totals: dict, part: dict) -> None:
    for k, v in part.items():
        totals[k] = max(totals.get(k, 0), v) if k.endswith("_max") else totals.get(k, 0) + v


# --------------------------------------------------------------------------- a session's evaluation


def run_eval(s: Session, limit: int | None = None, log: Log = print, split: Split | None = None
             ) -> dict[str, float]:
    """Evaluate on the test split (or `split`) with the EMA weights (when EMA is on). An allocation
    that fails halves the evaluation batch (kept for later evaluations) and evaluates again."""
    split = split or s.data.test
    if split is None and s.objective is not None:
        with ema_weights(s.model, s.opts.ema):
            return s.objective.evaluate(s.model, s.ctx)
    if split is None:
        return {}
    world = s.run.world
    share = (world.rank, world.size) if world.active and s.scorer is None else (0, 1)  # see _evaluate
    return _halving_on_failure(s, lambda size: _evaluate(s, _batches(s, split, size, limit, share), log, split), log)


def run_eval_curve(s: Session, steps: list[int], limit: int | None = None, log: Log = print
                   ) -> dict[int, dict[str, float]]:
    """run_eval at N_sup = K for each K of `steps` (the final weights, one process), in one pass
    (evaluate_curve): {K: metrics with "seconds"}. The task's answers, when it saves them, are those
    of the last K listed."""
    split = s.data.test
    if split is None:
        return {}

    def curve(size: int) -> dict[int, dict[str, float]]:
        scorers = {k: s.scorer(split) if s.scorer is not None else None for k in steps}
        with ema_weights(s.model, s.opts.ema):
            result = evaluate_curve(s.model, _batches(s, split, size, limit, (0, 1)), s.ctx, split.meta.blank_id,
                                    scorers)
        if isinstance(scorers[steps[-1]], SavesAnswers):
            log(f"eval: answers written to {scorers[steps[-1]].save(s.cfg.run.dir)}")
        return result
    return _halving_on_failure(s, curve, log)


def _batches(s: Session, split: Split, size: int, limit: int | None, share: tuple[int, int]):
    limit = limit if limit is not None else (s.cfg.data.eval_limit or None)
    return eval_batches(split, size, limit, *share)


def _halving_on_failure(s: Session, run: Callable[[int], dict], log: Log) -> dict:
    """run(batch size): an allocation that fails halves the evaluation batch (kept for later
    evaluations) and runs again; any other failure, or one in a multi-process run, is raised."""
    world = s.run.world
    while True:
        size = s.run.eval_batch or int(s.run.plan.eval_batch.value)
        try:
            return run(size)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err) or size <= 1 or world.active:  # the other processes would not retry
                raise
            s.run.eval_batch = size // 2
            hardware.trim_heap()
            log(f"memory: evaluation at {size} slots failed to allocate ({str(err).splitlines()[0][:100]}); "
                f"evaluating again at {s.run.eval_batch}")


def _evaluate(s: Session, batches, log: Log, split: Split) -> dict[str, float]:
    world = s.run.world
    with ema_weights(s.model, s.opts.ema):
        if world.active and s.scorer is not None:  # the task's metrics need every answer in one place
            result = _evaluate_here(s, batches, log, split) if world.main else None
            return dist_mod.share_object(result, world)  # the others wait (run.dist_timeout)
        if world.active:  # each process evaluates its share of the batches; the sums are added
            return evaluate(sized_for(s.model, split), batches, s.ctx, split.meta.blank_id, None,
                            reduce=dist_mod.sum_totals)
        return _evaluate_here(s, batches, log, split)


def _evaluate_here(s: Session, batches, log: Log, split: Split) -> dict[str, float]:
    scorer = s.scorer(split) if s.scorer is not None else None
    result = evaluate(sized_for(s.model, split), batches, s.ctx, split.meta.blank_id, scorer)
    if isinstance(scorer, SavesAnswers):  # the task's answers, e.g. an ARC Prize submission
        log(f"eval: answers written to {scorer.save(s.cfg.run.dir)}")
    return result


def sized_for(model: TRM, split: Split) -> TRM:
    """The model, or for a store of another grid (a conv model trained at one size evaluates another: trmkit
    adapt trains on the new source's grid and still scores the run's own held-out split) a model built for
    that grid holding the weights in hand (as `trmkit eval` and predict/engine.py read another size)."""
    cfg, shape = model.cfg, split.meta.grid_shape
    if cfg.mixer != "conv" or shape is None or split.meta.seq_len == cfg.seq_len:
        return model
    return resized(model, shape[0], shape[1])


def load_weights(s: Session, run_dir: str | os.PathLike[str], step: int | None = None) -> None:
    """Load a finished run's evaluation weights into the model, or with `step` those of the run's
    checkpoint of that step (its EMA weights when the run kept an EMA); EMA is dropped after (they
    already are EMA)."""
    if step is None:
        rundir.load_weights(s.model, run_dir, s.ctx.device)
    else:
        restore_weights(s.model, _checkpoint_tensors(run_dir, step), ema_as_weights=True)
    s.opts.ema = None


def _checkpoint_tensors(run_dir: str | os.PathLike[str], step: int) -> dict[str, torch.Tensor]:
    """The tensors of RUN_DIR's checkpoint of `step`, verified."""
    return checkpoint.load_checkpoint(checkpoint_path(run_dir, step)).tensors


def checkpoint_path(run_dir: str | os.PathLike[str], step: int) -> os.PathLike[str]:
    """RUN_DIR's checkpoint of `step`; an error that lists the kept steps (`trmkit eval --checkpoint`
    asks before the session and the model load, so a step not kept is refused at once)."""
    kept = {checkpoint.step_of(path): path for path in checkpoint.list_checkpoints(run_dir)}
    if step not in kept:
        raise ConfigError(f"{run_dir}: no checkpoint of step {step} (kept: {', '.join(map(str, kept)) or 'none'}); "
                          "train.checkpoint_every and train.keep_checkpoints decide which are kept")
    return kept[step]


GENERIC_EVAL = ("cell_accuracy", "blank_accuracy", "exact_accuracy", "loss", "act_steps", "samples")


def format_eval(evals: dict) -> str:
    """One line of an evaluation's metrics: the generic ones, then the task's own."""
    if not evals:
        return "no test split to evaluate"
    shown = [f"{k} {evals[k]:.3f}" for k in GENERIC_EVAL[:4] if k in evals]
    shown += [f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in evals.items()
              if k not in GENERIC_EVAL and "/" not in k]  # the task's own (per-class ones in the summary)
    steps = f", act_steps {evals['act_steps']:.2f}" if "act_steps" in evals else ""
    return ", ".join(shown) + steps + f" (n={evals.get('samples', '?')})"
