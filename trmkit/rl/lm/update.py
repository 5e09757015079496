"""One TR-RPG optimizer step of a causal-LM policy over the rows of every role, within a memory budget.

The loss of a step, for roles r with rows i (N_r rows, role weight lambda_r and TR-RPG beta_r) and the response
tokens t of a row (mask m_it):

    L = sum_r lambda_r / N_r * sum_i trrpg(sum_t m_it log pi(y_it), sum_t m_it log pi_old(y_it), A_i, beta_r, c)
      + kl_reference * sum_{i,t} m_it k3(pi, pi_ref)_it / sum_{i,t} m_it

(`rl/loss.py` trrpg_loss on a response's summed log-probs; k3 to the adapters-off reference, `lora.py`; log pi at
the rollout's temperature). Every term is a sum over rows divided by a whole-step count, so the rows can be cut into
micro-batches whose gradients add up to the whole batch's: roles run one after another, each role's rows sorted
by real length (prompt + response) and cut into micro-batches of `micro.size` rows, each padded only to its own
longest prompt and response (dynamic padding; packing several sequences into one row is not done). Log-probs
and k3 come in chunks of `chunk_tokens` response tokens (`logprobs.response_logprobs`): no (rows, tokens, vocab)
tensor is built.

Out of memory: an allocation failure (torch.OutOfMemoryError, or a RuntimeError saying "out of memory" or the CPU
allocator's "can't allocate memory"), or `guard(micro.size)` answering False (predicted not to fit), zeroes the
gradients, halves the micro-batch (a warning) and redoes the step from the same parameters; the optimizer steps
once. The micro-batch grows back (doubling, up to its starting size) after `grow_after` clean steps.

Several processes (`settings.sharding`, fsdp.py): each back-propagates its own rows over the whole step's counts
(all-reduced) and FSDP sums the gradients; an allocation failure is raised, not retried (one process redoing the
step alone would leave the others waiting in a collective).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from trmkit.rl.lm.generate import Rollout, left_pad
from trmkit.rl.lm.logprobs import k3_kl, response_logprobs
from trmkit.rl.loss import trrpg_loss

OOM_MESSAGES = ("out of memory", "can't allocate memory")
PAD = 0  # the id that pads micro-batches (see pack_rows)

T = TypeVar("T")


@dataclass
class RoleRows:
    """One role's rollout and what the update needs to weigh it."""

    rollout: Rollout
    advantages: torch.Tensor  # (N,) one per row
    weight: float  # lambda_r: the role's share of the loss
    beta: float  # TR-RPG's regulariser toward pi_old
    name: str
    total_rows: int = 0  # N_r over every process (several processes: this one holds some of them); 0: rollout.rows


@dataclass
class UpdateSettings:
    """How one update runs."""

    micro_batch: int  # rows per forward/backward (the starting size; halved on out-of-memory)
    chunk_tokens: int  # response tokens per lm_head chunk
    log_ratio_clip: float  # c: log pi - log pi_old clamped to [-c, c]
    kl_reference: float  # weight of the k3 KL to the adapters-off reference (0 = off)
    max_grad_norm: float  # gradient clipping (0 = off)
    grow_after: int = 20  # clean steps before a halved micro-batch doubles again
    sharding: Any = None  # rl/lm/fsdp.py Sharding: the policy is shared by several processes (FSDP2)


class MicroBatch:
    """The current micro-batch size: halved on out-of-memory, grown back after `grow_after` clean steps."""

    def __init__(self, size: int, grow_after: int = 20, ceiling: int | None = None, log: Callable = print):
        if size < 1:
            raise ValueError(f"micro-batch must be >= 1, not {size}")
        self.size, self.ceiling, self.grow_after, self.log = size, ceiling or size, grow_after, log
        self.clean = 0  # clean steps since the last change
        self.halvings = 0

    def halve(self, reason: str) -> None:
        if self.size == 1:
            raise MemoryError(f"one row does not fit: {reason}; shorten rl.max_response_tokens / rl.max_prompt_tokens, "
                              "or use LoRA, bfloat16 weights and checkpointing")
        before, self.size = self.size, self.size // 2
        self.clean, self.halvings = 0, self.halvings + 1
        self.log(f"warning: micro-batch {before} -> {self.size} ({reason}); redoing the step")

    def clean_step(self) -> None:
        self.clean += 1
        if self.clean >= self.grow_after and self.size < self.ceiling:
            before, self.size, self.clean = self.size, min(self.ceiling, self.size * 2), 0
            self.log(f"micro-batch {before} -> {self.size} (grown back after {self.grow_after} clean steps)")

    def state_dict(self) -> dict[str, int]:
        return {"size": self.size, "ceiling": self.ceiling, "grow_after": self.grow_after, "clean": self.clean,
                "halvings": self.halvings}

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("size", "ceiling", "grow_after", "clean", "halvings"):
            setattr(self, key, int(state[key]))


class PredictedOOM(Exception):
    """The guard predicts that the micro-batch would not fit."""


def is_oom(error: BaseException) -> bool:
    """An allocation failure torch raises (CUDA's OutOfMemoryError, the CPU allocator's RuntimeError)."""
    if isinstance(error, (torch.OutOfMemoryError, PredictedOOM)):
        return True
    return isinstance(error, RuntimeError) and any(m in str(error).lower() for m in OOM_MESSAGES)


def micro_batches(rollout: Rollout, size: int) -> list[torch.Tensor]:
    """Row indices of each micro-batch: rows sorted by real length (shortest first), `size` at a time."""
    order = torch.argsort(rollout.lengths(), stable=True)
    return [order[i:i + size] for i in range(0, len(order), size)]


def pack_rows(rollout: Rollout, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The rows padded to their own longest prompt and response: ids (b, P' + R'), attention mask, P', R'.

    Padding is masked out of attention (prompt) or comes after the row's last real token (response), so the pad
    id never changes a score: PAD, valid in every vocabulary, stands for the tokenizer's."""
    prompts = [rollout.prompt_ids[i][rollout.prompt_mask[i].bool()].tolist() for i in rows.tolist()]
    p_ids, p_mask = left_pad(prompts, PAD)
    width = max(1, int(rollout.response_mask[rows].sum(1).max()))
    response = rollout.response_ids[rows, :width]
    ids = torch.cat([p_ids, response], 1)
    return ids, torch.cat([p_mask, torch.ones_like(response)], 1), p_ids.shape[1], width


def _micro_loss(model: Any, role: RoleRows, rows: torch.Tensor, settings: UpdateSettings, counts: dict
                ) -> tuple[torch.Tensor, dict[str, float]]:
    """The micro-batch's share of the step's loss (a sum over its rows over whole-step counts) and its sums."""
    ro, device = role.rollout, next(model.parameters()).device
    ids, mask, prompt_len, width = (v.to(device) if torch.is_tensor(v) else v for v in pack_rows(ro, rows))
    response_mask = ro.response_mask[rows, :width].float().to(device)
    logp = response_logprobs(model, ids, mask, prompt_len, settings.chunk_tokens, use_checkpoint=True,
                             temperature=ro.temperature) * response_mask  # (b, R')
    old = ro.old_logp[rows, :width].to(device) * response_mask
    loss_i, stats = trrpg_loss(logp.sum(1), old.sum(1), role.advantages[rows].float().to(device), role.beta,
                               settings.log_ratio_clip)
    loss = loss_i.sum() * (role.weight / (role.total_rows or ro.rows))
    sums = {"ratio": stats["ratio"].sum().item(), "clipped": stats["clipped"].sum().item(),
            "kl_old": stats["kl"].sum().item(), "rows": float(len(rows)), "tokens": response_mask.sum().item(),
            "log_ratio_abs_max": (logp.sum(1) - old.sum(1)).detach().abs().max().item()}
    if settings.kl_reference > 0:
        from trmkit.rl.lm.lora import reference_logprobs

        ref = reference_logprobs(model, ids, mask, prompt_len, settings.chunk_tokens, temperature=ro.temperature)
        kl = (k3_kl(logp, ref) * response_mask).sum()
        loss = loss + settings.kl_reference * kl / counts["tokens"]
        sums["kl_reference"] = kl.item()
    return loss, sums


def _accumulate(model: Any, roles: list[RoleRows], settings: UpdateSettings, size: int,
                guard: Callable[[int], bool] | None) -> dict[str, float]:
    """Forward and backward of every micro-batch of every role, gradients accumulated; the sums of the stats."""
    if guard is not None and not guard(size):
        raise PredictedOOM(f"the memory guard predicts {size} rows do not fit")
    sharding = settings.sharding
    tokens = float(sum(r.rollout.response_mask.sum() for r in roles))
    counts = {"tokens": max(1.0, sharding.total(tokens) if sharding else tokens)}  # the whole step's
    total: dict[str, float] = {"loss": 0.0}
    batches = [(role, rows) for role in roles for rows in micro_batches(role.rollout, size)]
    with sharding.gathered(training=True) if sharding else contextlib.nullcontext():
        if sharding and not batches:
            sharding.empty_backward(model)
        for i, (role, rows) in enumerate(batches):
            if sharding:  # gradients reduced at this process's last backward only (rl/lm/fsdp.py)
                sharding.sync(i == len(batches) - 1)
            loss, sums = _micro_loss(model, role, rows, settings, counts)
            loss.backward()
            total["loss"] += loss.item()
            for key, value in sums.items():
                combine = max if key == "log_ratio_abs_max" else (lambda a, b: a + b)
                total[key] = combine(total.get(key, 0.0), value)
            del loss
    return sharding.sum_stats(total) if sharding else total


def check_roles(model: Any, roles: list[RoleRows], settings: UpdateSettings) -> None:
    if settings.kl_reference > 0 and not hasattr(model, "disable_adapter"):
        raise ValueError("update: kl_reference > 0 needs a LoRA policy (the reference is the adapters-off base); "
                         "set the KL-to-reference weight to 0 for a full fine-tune")
    if not roles and settings.sharding is None:  # several processes: this one may hold no row of the step
        raise ValueError("update: no roles")
    for role in roles:
        if role.advantages.shape != (role.rollout.rows,):
            raise ValueError(f"update: role {role.name!r} has {tuple(role.advantages.shape)} advantages for "
                             f"{role.rollout.rows} rows; give one per row")


def until_it_fits(attempt: Callable[[int], T], micro: MicroBatch, label: str = "",
                  reset: Callable[[], None] | None = None) -> tuple[T, int]:
    """`attempt(micro.size)` until it runs without an allocation failure (or the guard's prediction of one):
    each failure halves `micro` and tries again, `reset` (e.g. zeroing the gradients) before every try and after
    a failure; other errors propagate. Its result and the number of retries."""
    retries = 0
    while True:
        if reset is not None:
            reset()
        try:
            return attempt(micro.size), retries
        except (RuntimeError, PredictedOOM) as error:
            if not is_oom(error):
                raise
            reason = label + str(error).splitlines()[0][:200]
        if reset is not None:
            reset()
        micro.halve(reason)
        retries += 1


def update(model: Any, optimizer: torch.optim.Optimizer, roles: list[RoleRows], settings: UpdateSettings,
           micro: MicroBatch, guard: Callable[[int], bool] | None = None, log: Callable = print
           ) -> dict[str, float]:
    """One optimizer step over all roles; halves `micro` and redoes the step on out-of-memory. Metrics: loss,
    ratio (mean pi / pi_old per row), clipped, kl_old, kl_reference (per token), tokens_updated, micro_batch,
    retries, grad_norm, seconds, peak_rss_gb (the process's high-water mark after the step)."""
    check_roles(model, roles, settings)
    micro.grow_after = settings.grow_after  # the settings rule the micro-batch's growth
    t0 = time.perf_counter()
    model.train()
    if settings.sharding is not None:  # one process redoing the step alone would desert the others' collectives
        optimizer.zero_grad(set_to_none=True)
        total, retries = _accumulate(model, roles, settings, micro.size, guard), 0
    else:
        total, retries = until_it_fits(lambda size: _accumulate(model, roles, settings, size, guard), micro,
                                       reset=lambda: optimizer.zero_grad(set_to_none=True))
    if retries:
        log(f"update: the step was redone {retries} time(s); micro-batch now {micro.size}")
    if not math.isfinite(total["loss"]):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(f"update: the loss is {total['loss']}; lower the learning rate or the log-ratio "
                                 "clip (rl.log_ratio_clip)")
    norm = step_optimizer(optimizer, settings.max_grad_norm)
    if retries == 0:
        micro.clean_step()
    return step_metrics(total, micro, retries, norm, time.perf_counter() - t0)


def step_optimizer(optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float:
    """Clip the gradients (max_grad_norm > 0), step, zero; the gradient norm before clipping."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not params:
        norm = 0.0
    elif max_grad_norm > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    else:
        norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def step_metrics(total: dict[str, float], micro: MicroBatch, retries: int, grad_norm: float,
                 seconds: float) -> dict[str, float]:
    from trmkit.hardware.memory import GiB, kernel_peak

    rows, tokens = max(1.0, total.get("rows", 0.0)), total.get("tokens", 0.0)
    out = {"loss": total["loss"], "ratio": total.get("ratio", 0.0) / rows,
           "clipped": total.get("clipped", 0.0) / rows, "kl_old": total.get("kl_old", 0.0) / rows,
           "log_ratio_abs_max": total.get("log_ratio_abs_max", 0.0), "tokens_updated": tokens,
           "micro_batch": float(micro.size), "retries": float(retries), "grad_norm": grad_norm,
           "seconds": seconds, "peak_rss_gb": (kernel_peak() or 0) / GiB}
    if "kl_reference" in total:
        out["kl_reference"] = total["kl_reference"] / max(1.0, tokens)
    return out
