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
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from trmkit.config import TrainConfig


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
