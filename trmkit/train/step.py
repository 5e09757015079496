"""One training step and evaluation, separate from the loop.

A training step updates every slot of a persistent batch of `batch_size`
ACT slots once: slots whose sample halted at the previous step first take new
samples (in slot order, from the sample stream), then the slots are processed
in micro-batches whose gradients add up exactly to those of the whole batch:
the loss is divided by the global batch size, the exploration draws are made
for the whole batch before it is split, and the sparse puzzle-embedding
gradients are summed per row before their sign is taken.

With train.progressive_loss (Bansal et al., 2022, "End-to-end algorithm synthesis with recurrent
networks"), some new samples start from a deeper, detached carry (`progressive_start`). Departure
from the paper: there a batch runs n iterations without gradients and then k with them, and the
loss mixes that with the full-depth loss by a weight alpha; here deep supervision already trains
every step from the detached carry of the one before, so the option only chooses where a new sample
starts, with probability p, and the loss is TRM's own.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np
import torch

from trmkit.config import ModelConfig, TrainConfig
from trmkit.model.losses import IGNORE, act_loss
from trmkit.model.trm import TRM, Carry, halt_decision, input_dtype
from trmkit.train import depth
from trmkit.train.optim import EMA, SparseSignSGD, lr_at

if TYPE_CHECKING:
    from trmkit.train.halting import StableAnswer

Autocast = Callable[[], contextlib.AbstractContextManager]


class SampleSource(Protocol):
    def take(self, k: int): ...


@dataclass
class TrainState:
    """Everything that changes from step to step besides weights and optimizers."""

    carry: Carry
    inputs: torch.Tensor  # (B, L) token ids of each slot's current sample
    labels: torch.Tensor  # (B, L) int64 labels, IGNORE where unlabelled; (B, N_sup, L) with a trace (data.trace)
    puzzle_ids: torch.Tensor  # (B,) int64
    step: int = 0
    samples_started: int = 0  # samples taken from the stream so far


@dataclass
class Optimizers:
    dense: torch.optim.Optimizer
    sparse: SparseSignSGD | None = None
    ema: EMA | None = None


@dataclass
class StepContext:
    """Fixed settings of the step: chosen once by the planner."""

    micro_batch: int
    ignore_label_id: int
    device: torch.device
    autocast: Autocast = field(default=contextlib.nullcontext)
    label_weights: torch.Tensor | None = None  # (V,) per-label loss weights (train.class_weighting)
    given_tokens: torch.Tensor | None = None  # train.mask_given: input tokens whose cells carry no label
    # several processes (train/distributed.py): the DistributedDataParallel wrapper the forward goes
    # through, whether gradients are reduced after a micro-batch's backward, and this process's slots
    net: Callable | None = None
    reduce_after: Callable[[bool], contextlib.AbstractContextManager] | None = None
    rank: int = 0
    world: int = 1
    halting: StableAnswer | None = None  # evaluation only, `eval --steps auto`: stop when the answer is stable


def labels_to_tensor(labels: np.ndarray, ignore_label_id: int, device, inputs: np.ndarray | None = None,
                     given_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Labels as int64 with IGNORE for the store's ignore label and, with given_tokens, for every
    cell whose input is one of them (train.mask_given: the answer repeats the input there).
    labels (B, L), or (B, K, L): a trace's labels for each of K supervision steps (data.trace)."""
    t = torch.from_numpy(np.asarray(labels)).to(device=device, dtype=torch.int64)
    ignore = t == ignore_label_id
    if given_tokens is not None and inputs is not None:
        x = torch.from_numpy(np.asarray(inputs)).to(device=device)
        given = ~answer_cells(x[:, :t.shape[-1]], given_tokens)  # (B, L)
        ignore |= given.unsqueeze(1) if t.dim() == 3 else given
    return torch.where(ignore, torch.full_like(t, IGNORE), t)


def answer_cells(inputs: torch.Tensor, given_tokens: torch.Tensor | None) -> torch.Tensor:
    """(B, L) bool: the cells the model answers - all but those whose input is a given token
    (train.mask_given: a maze's walls, S and G carry no label, and nothing reads the model's argmax there)."""
    if given_tokens is None:
        return torch.ones_like(inputs, dtype=torch.bool)
    return ~torch.isin(inputs.long(), given_tokens.to(inputs.device))


def new_state(model: TRM, batch_size: int, seq_len: int, device) -> TrainState:
    """All slots start halted, so the first step fills each one. With a trace (model.trace_answers)
    each slot holds its sample's labels for every supervision step, (N_sup, L)."""
    steps = (model.cfg.halt_max_steps,) if model.cfg.trace_ids else ()
    return TrainState(
        carry=model.initial_carry(batch_size, device),
        inputs=torch.zeros(batch_size, seq_len, dtype=input_dtype(model.cfg.vocab_size), device=device),
        labels=torch.full((batch_size, *steps, seq_len), IGNORE, dtype=torch.int64, device=device),
        puzzle_ids=torch.zeros(batch_size, dtype=torch.int64, device=device),
    )


def refill(model: TRM, state: TrainState, stream: SampleSource, ctx: StepContext) -> int:
    """Give every halted slot a new sample and reset its recurrent state."""
    slots = torch.nonzero(state.carry.halted).flatten()
    if len(slots):
        batch = stream.take(len(slots))
        dev = ctx.device
        state.inputs[slots] = torch.from_numpy(np.asarray(batch.inputs)).to(dev, state.inputs.dtype)
        state.labels[slots] = labels_to_tensor(batch.labels, ctx.ignore_label_id, dev, batch.inputs, ctx.given_tokens)
        state.puzzle_ids[slots] = torch.from_numpy(np.asarray(batch.puzzle_ids)).to(dev, torch.int64)
        state.samples_started += len(slots)
    model.reset_(state.carry)
    return len(slots)


def step_labels(labels: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(this step's labels (B, L), the halting target's labels or None) of slots whose step counts (B,)
    include this step: the labels themselves for (B, L); for a trace (B, K, L), row steps - 1 and the
    last row, the whole trace, which the halting head learns to recognise (losses.act_loss)."""
    if labels.dim() == 2:
        return labels, None
    row = (steps.long() - 1).clamp(0, labels.shape[1] - 1)
    rows = torch.arange(labels.shape[0], device=labels.device)
    return labels[rows, row], labels[rows, labelled_steps(labels) - 1]


def labelled_steps(labels: torch.Tensor) -> torch.Tensor:
    """(B,) for a trace's labels (B, K, L): how many supervision steps a sample has, up to its last row with a
    label (K where every row has one). A sample whose later rows hold none (`trmkit adapt`'s replayed
    samples, labelled for RUN's own N_sup: adapt/stream.py RunSteps) halts after that many steps, and its
    whole trace, which the halting head learns to recognise, is that row."""
    has = (labels != IGNORE).any(-1)  # (B, K)
    return labels.shape[1] - has.flip(-1).to(torch.int8).argmax(-1)


def exploration_draws(batch: int, cfg: ModelConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniforms and random minimum step counts for the whole batch, drawn once."""
    u = torch.rand(batch)
    min_steps = torch.randint(2, max(2, cfg.halt_max_steps) + 1, (batch,), dtype=torch.int32)  # N_sup=1: unused
    return u.to(device), min_steps.to(device)


def rank_draws(slots: int, cfg: ModelConfig, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's part of the global batch's draws: every process draws the whole batch's from
    the same generator state, so the draws of global slot i do not depend on the number of processes."""
    u, min_steps = exploration_draws(slots * ctx.world, cfg, ctx.device)
    part = slice(ctx.rank * slots, (ctx.rank + 1) * slots)
    return u[part], min_steps[part]


def is_out_of_memory(err: BaseException) -> bool:
    """Allocation failures of the CPU allocator, CUDA, or Python itself."""
    if isinstance(err, MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate" in text
                                               or "failed to allocate" in text)


def train_step(model: TRM, state: TrainState, stream: SampleSource, opts: Optimizers,
               cfg: TrainConfig, ctx: StepContext,
               on_oom: Callable[[BaseException], int] | None = None) -> dict[str, float]:
    """One optimizer step over all slots; returns the step's metrics.

    If an allocation fails and `on_oom` is given, the failed micro-batch's
    partial gradients are undone, on_oom returns a smaller micro-batch, and
    the step goes on from that micro-batch (the ones before it are done: their
    gradients and carry are kept; the refill and exploration draws are not
    repeated).
    """
    set_learning_rates(opts, state.step, cfg)
    ends = set_depth(model, state.step, cfg)
    new_samples = refill(model, state, stream, ctx)
    u, min_steps = rank_draws(state.carry.steps.shape[0], model.cfg, ctx)
    model.train()
    progressive = progressive_start(model, state, cfg, ctx)
    stats = forward_backward(model, state, ctx, u, min_steps, on_oom)
    if state.labels.dim() == 3:  # a sample whose later steps hold no label ends here (labelled_steps)
        state.carry.halted |= state.carry.steps >= labelled_steps(state.labels)
    if cfg.stagger_start:
        stagger(state.carry, state.step + 1, model.cfg.halt_max_steps, ctx)
    apply_updates(model, opts)
    state.step += 1
    metrics = step_metrics(stats, state.carry.steps, state.carry.halted, new_samples, opts)
    if cfg.progressive_loss:
        metrics["train/progressive_steps"] = float(progressive)
    if ends:
        metrics["train/depth_cost"] = depth.relative_cost(model.cycles(), model.cfg)
    return metrics


def set_depth(model: TRM, step: int, cfg: TrainConfig) -> tuple[float, ...]:
    """The training depth (T, n) of this step under train.depth_curriculum (train/depth.py); returns its
    stage ends (empty: off, the config's depth)."""
    ends = depth.stage_ends(cfg.depth_curriculum)
    model.train_cycles = depth.cycles_at(step, cfg.max_steps, model.cfg, ends) if ends else None
    return ends


@torch.no_grad()
def progressive_start(model: TRM, state: TrainState, cfg: TrainConfig, ctx: StepContext) -> int:
    """train.progressive_loss = p (the progressive loss of Bansal et al., 2022): each slot that has just
    taken a new sample starts, with probability p, from the carry of n ~ U{1..N_sup} supervision steps
    taken by the current weights without gradients; the carry is detached, so no gradient reaches
    those steps. Its step count stays 0: the sample still gets its N_sup supervised steps, from a state
    up to N_sup steps deeper than the fresh one, so the net learns to improve any state, not only those
    its first N_sup steps reach. The draws are made for the whole global batch (as rank_draws); p = 0
    draws nothing and runs nothing. Returns the steps taken without gradients."""
    if not cfg.progressive_loss:
        return 0
    carry, slots = state.carry, state.carry.steps.shape[0]
    part = slice(ctx.rank * slots, (ctx.rank + 1) * slots)
    u = torch.rand(slots * ctx.world)[part].to(ctx.device)
    depth = torch.randint(1, model.cfg.halt_max_steps + 1, (slots * ctx.world,))[part].to(ctx.device)
    depth = torch.where(carry.halted & (u < cfg.progressive_loss), depth, torch.zeros_like(depth))  # (B,)
    rows = torch.nonzero(depth).flatten()
    for k in range(1, int(depth.max()) + 1):
        rows = rows[depth[rows] >= k]  # the slots that still take a k-th step
        for chunk in rows.split(max(1, ctx.micro_batch)):
            with ctx.autocast():
                zh, zl, _, _ = model(carry.z_H[chunk], carry.z_L[chunk], state.inputs[chunk], state.puzzle_ids[chunk])
            carry.z_H[chunk], carry.z_L[chunk] = zh.to(carry.z_H.dtype), zl.to(carry.z_L.dtype)
    return int(depth.sum())


def stagger(carry: Carry, step: int, n_sup: int, ctx: StepContext) -> None:
    """train.stagger_start: at training step `step` (1, 2, ...), the slot i of B (over all ranks) whose first
    sample is still in it (its step count is `step`) halts once `step` reaches ceil((i + 1) N_sup / B). The
    first fill starts every slot at once, and where nothing halts a sample before N_sup (a long trace whose
    halting head waits for the whole trace: `trmkit adapt` on a larger maze, N_sup 128, batch 8), they would
    stay in lockstep: every batch holds one phase of the trace (the wave, the traceback, then 70 steps of the
    finished trace), and Adam follows each phase in turn. Staggered, a batch holds B phases N_sup / B apart."""
    if step > n_sup:
        return
    slots = carry.steps.shape[0]
    first = torch.arange(ctx.rank * slots, (ctx.rank + 1) * slots, device=carry.steps.device)
    ends = torch.div((first + 1) * n_sup + slots * ctx.world - 1, slots * ctx.world, rounding_mode="floor")
    carry.halted |= (carry.steps == step) & (ends == step)


def forward_backward(model: TRM, state: TrainState, ctx: StepContext, u, min_steps,
                     on_oom: Callable[[BaseException], int] | None = None) -> dict[str, torch.Tensor]:
    """All micro-batches of one step; gradients accumulate in .grad, and each micro-batch's new
    z_H, z_L overwrite its slots of the carry in place once its backward is done (one copy of the
    carry, not two). Returns the per-slot stats."""
    carry, B = state.carry, state.carry.steps.shape[0]
    carry.steps += 1
    undo = GradientUndo(model) if on_oom is not None else None
    parts = over_chunks(B, ctx, lambda sl: micro_step(model, state, ctx, sl, u, min_steps), undo, on_oom)
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def over_chunks(n: int, ctx: StepContext, work: Callable[[slice], dict], undo: "GradientUndo | None",
                on_oom: Callable[[BaseException], int] | None, last: bool = True) -> list[dict]:
    """`work` (a forward and backward) on consecutive slices of ctx.micro_batch rows out of n.

    An allocation failure undoes the failed slice's partial gradients, takes a smaller
    micro-batch from on_oom and goes on from that slice. last=False: more work follows that a
    later failure may undo, so the gradients are saved after this call's last slice too."""
    parts, start = [], 0
    while start < n:
        sl = slice(start, min(n, start + max(1, ctx.micro_batch)))
        try:
            parts.append(work(sl))
        except (RuntimeError, MemoryError) as err:
            if undo is None or not is_out_of_memory(err):
                raise
            undo.restore()
            ctx.micro_batch = on_oom(err)
            continue
        start = sl.stop
        if undo is not None and (start < n or not last):  # after the very last slice nothing is retried
            undo.save()
    return parts


def micro_step(model: TRM, state: TrainState, ctx: StepContext, sl: slice, u, min_steps) -> dict:
    """Forward and backward of the slots `sl`; then their carry is replaced in place."""
    carry, B = state.carry, state.carry.steps.shape[0]
    net = ctx.net or model
    sync = ctx.reduce_after(sl.stop == B) if ctx.reduce_after is not None else contextlib.nullcontext()
    with sync:  # several processes: the gradients are averaged during the last micro-batch's backward
        with ctx.autocast():
            zh, zl, logits, q = net(carry.z_H[sl], carry.z_L[sl], state.inputs[sl], state.puzzle_ids[sl])
        labels, done = step_labels(state.labels[sl], carry.steps[sl])
        loss, stats = act_loss(logits, labels, q, model.cfg.halt_loss_weight, ctx.label_weights, model.cfg.loss,
                               done_labels=done, fold=model.cfg.trace_ids)
        (loss / B).backward()
    carry.z_H[sl], carry.z_L[sl] = zh.to(carry.z_H.dtype), zl.to(carry.z_L.dtype)
    carry.halted[sl] = halt_decision(carry.steps[sl], q, model.cfg, True, u[sl], min_steps[sl])
    return stats


class GradientUndo:
    """The gradients as they were after the last finished micro-batch, to undo a failed one.

    An allocation can fail in the middle of a backward, after some parameters already received
    their share: restoring the saved sums keeps the retried step exact. Costs one copy of the
    gradients (4 bytes per parameter) and a copy per micro-batch."""

    def __init__(self, model: TRM) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.saved: list[torch.Tensor | None] = [None] * len(self.params)
        self.emb = model.puzzle_emb
        self.pending = len(self.emb.pending) if self.emb is not None else 0

    def save(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                self.saved[i] = None
            elif self.saved[i] is None:
                self.saved[i] = p.grad.detach().clone()
            else:
                self.saved[i].copy_(p.grad)
        self.pending = len(self.emb.pending) if self.emb is not None else 0

    def restore(self) -> None:
        for p, saved in zip(self.params, self.saved):
            if saved is None:
                p.grad = None
            elif p.grad is not None:
                p.grad.copy_(saved)
            else:
                p.grad = saved.clone()
        if self.emb is not None:
            del self.emb.pending[self.pending:]
        gc.collect()


def set_learning_rates(opts: Optimizers, step: int, cfg: TrainConfig) -> None:
    lr = lr_at(step, cfg, cfg.lr)
    for group in opts.dense.param_groups:
        group["lr"] = lr
    if opts.sparse is not None:
        opts.sparse.lr = lr_at(step, cfg, cfg.puzzle_emb_lr)


def apply_updates(model: TRM, opts: Optimizers) -> None:
    opts.dense.step()
    opts.dense.zero_grad(set_to_none=True)
    if opts.sparse is not None:
        opts.sparse.step()
    elif model.puzzle_emb is not None:
        model.puzzle_emb.take_pending()
    if opts.ema is not None:
        opts.ema.update(model)


def step_metrics(stats, steps, halted, new_samples: int, opts: Optimizers) -> dict[str, float]:
    """Loss over all slots; accuracy of the samples that halted at this step."""
    right, valid = stats["right"].float(), stats["valid"].float().clamp_min(1)
    h = halted
    metrics = {
        "train/loss": float(stats["token_loss"].mean() + 0.0),
        "train/halt_loss": float(stats["halt_loss"].mean()),
        "train/accuracy_all_slots": float((right / valid).mean()),
        "train/halted": float(h.sum()),
        "train/new_samples": float(new_samples),
        "train/lr": float(opts.dense.param_groups[0]["lr"]),
    }
    if h.any():
        metrics["train/accuracy"] = float((right[h] / valid[h]).mean())
        metrics["train/exact_accuracy"] = float(stats["exact"][h].float().mean())
        metrics["train/steps"] = float(steps[h].float().mean())
    return metrics
