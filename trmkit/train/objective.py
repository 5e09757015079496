"""The objective's seam: a workload that makes its own batches instead of reading a store.

A supervised task hands the trainer a store; the trainer samples it (`SampleStream`) and
minimises the TRM's own loss (`train_step`). An `Objective` (self-play RL, or seeding from
generated traces: trmkit/rl/) supplies both instead: each `step` generates its batch with the
current model (rollouts, rewards from an executor), back-propagates its loss in chunks of
`ctx.micro_batch` (which the planner and the memory guard set) and applies the optimizers.
Everything else is the trainer's, unchanged: the plan, the memory guard, checkpoints and
exact resume (the objective's `state_dict` goes into each checkpoint as the stream's
position does), progress, periodic evaluation (`evaluate`), the summary, `report`. Whoever
builds an objective closes it when the run ends (`close`: its executor, sandboxes, workers).

A `Policy` objective also builds its own model and optimizers (a causal language model with LoRA adapters
instead of the TRM) and states its memory plan; session.py asks `owns_model` and builds the TRM otherwise.
One whose `distributed` is true runs on several processes (rl/lm/fsdp.py); a checkpoint of another number of
processes is handed to its `continue_from(states, saved_world, rank, log)` (train/resume.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import torch

from trmkit.config import TrainConfig
from trmkit.model.trm import Carry
from trmkit.plan import Plan
from trmkit.plan.objects import Choice
from trmkit.train.step import Optimizers, TrainState


class Objective(Protocol):
    name: str

    def model_fields(self) -> dict[str, int]:
        """vocab_size, seq_len, num_puzzle_ids, num_classes of the model it trains."""

    def identity(self) -> dict[str, Any]:
        """What the run was trained on (RUN_DIR/data_meta.json)."""

    def step(self, model, opts, cfg: TrainConfig, ctx, on_oom: Callable[[BaseException], int] | None
             ) -> dict[str, float]:
        """One optimizer step (or several, as RL's update epochs); metrics, with "perf/samples"."""

    def evaluate(self, model, ctx) -> dict[str, float]:
        """Held-out metrics, with "samples"."""

    def state_dict(self) -> dict[str, Any]:
        """JSON: everything needed to continue exactly (random state, baselines, buffers, schedules)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from what `state_dict` returned."""

    def close(self) -> None:
        """Release what the objective holds outside the process (executors, sandboxes, workers)."""


class Policy(Protocol):
    """An objective whose policy is not the TRM (a causal language model: trmkit/rl/lm/): it states its own
    memory plan, and builds its own model and optimizers. The trainer asks `owns_model(objective)` and
    otherwise builds the TRM from cfg.model as for every store."""

    def memory_plan(self, dtype: str, dtype_reason: str, budget: int, log: Callable[[str], None]
                    ) -> tuple[int, str]:
        """(micro-batch, its reason): sequences per forward that fit `budget` bytes (0: unplanned) with the
        planner's dtype choice; the reason names the estimate."""

    def build_model(self, device: torch.device, log: Callable[[str], None]) -> torch.nn.Module:
        """The model it trains; its state_dict holds what a checkpoint keeps (only the trained weights)."""

    def build_optimizers(self, model: torch.nn.Module) -> Optimizers:
        """The optimizers of that model's trained parameters."""


def owns_model(objective: Any) -> bool:
    """Whether the objective builds its own model (a `Policy`)."""
    return objective is not None and callable(getattr(objective, "build_model", None))


TRM_ONLY_LINES = ("plan: micro_batch=", "plan: accumulation=", "plan: grad_checkpointing=", "plan: eval_batch=",
                  "plan: time ~")  # the planner's lines about a TRM's step, which a policy objective does not run


def policy_plan_log(log: Callable[[str], None]) -> Callable[[str], None]:
    """`log` without the planner's lines about the TRM's micro-batch and step time (`with_policy_plan` says the
    policy's)."""
    def say(line: str) -> None:
        if not str(line).startswith(TRM_ONLY_LINES):
            log(line)
    return say


def with_policy_plan(plan: Plan, policy: Policy, log: Callable[[str], None]) -> Plan:
    """The plan with the policy's micro-batch; the TRM's memory estimate is dropped (it describes no model of
    this run, and the calibration cache must not learn from it)."""
    micro, reason = policy.memory_plan(str(plan.dtype.value), plan.dtype.reason, int(plan.budget.value or 0), log)
    log(f"plan: micro_batch={micro} ({reason})")
    return dataclasses.replace(plan, micro_batch=Choice(micro, reason), accumulation=Choice(1, "the policy's"),
                               estimate=None, step_seconds=None)


def empty_state(device: torch.device) -> TrainState:
    """A TrainState with no slots, for a model that keeps no ACT carry (checkpoints still hold its step)."""
    empty = torch.zeros(0, device=device)
    carry = Carry(z_H=empty, z_L=empty, steps=empty.int(), halted=empty.bool())
    return TrainState(carry=carry, inputs=empty.long(), labels=empty.long(), puzzle_ids=empty.long())
