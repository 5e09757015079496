"""What a caller of the one trainer (train/run.py) plugs into its loop: `Hooks`, every method a no-op.

A workload that is a training with something added (the learning curve's evaluations at marks of
training time, a start from another run's weights) subclasses `Hooks` and overrides what it needs;
the loop calls them in this order:

    on_start(s)            once, before the first step (after a checkpoint was resumed)
    on_step(s, metrics)    after each step, with the step's metrics
    should_stop(s)         after on_step: True ends the steps and the run's end follows (with several
                           processes, one process's True ends every one's)
    evaluation(s)          at the end: the hooks' own evaluation of the weights in hand, or None
    after_training(s, r)   once the loop has returned its result r (train/run.py)

`owns_end = True` says that should_stop alone ends the steps: train.max_steps then only shapes the
learning-rate schedule and train.max_minutes only the plan (a stop signal still stops the run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trmkit.train.session import Session


class Hooks:
    """No-op hooks: a plain training (`trmkit train`, RL, e-mail pretraining)."""

    owns_end: bool = False

    def on_start(self, s: Session) -> None:
        """Before the first step of this session (a resumed run: after its checkpoint was loaded)."""

    def on_step(self, s: Session, metrics: dict[str, float]) -> None:
        """After each step; may replace s.cfg (e.g. train.max_steps fitted to a budget): the loop reads it anew."""

    def should_stop(self, s: Session) -> bool:
        """After on_step: True ends the steps."""
        return False

    def evaluation(self, s: Session) -> dict | None:
        """At the end: the hooks' evaluation of the weights in hand, which the summary reports; the loop's end
        then saves the state, the weights and the summary without evaluating again. None: it evaluates."""
        return None

    def after_training(self, s: Session, result: dict) -> None:
        """Once the loop has returned (finished, or stopped by a signal: result["stopped"])."""


NO_HOOKS = Hooks()
