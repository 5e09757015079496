"""A time budget as a schedule: fit train.max_steps (and so the learning-rate schedule) to minutes.

`trmkit train CONFIG --minutes N` sets train.max_minutes=N and train.fit_to_time=true. The
loop then times its steps and, once the step time has settled, sets train.max_steps so that
the warm-up and cosine end with the budget, at the speed measured so far: first after
FIT_AFTER_S seconds of steps (or half the budget, whichever is less; the first step, which
may compile, is not timed), then again at each share of the budget in REFIT_AT, with
evaluations and checkpoints amortised into the measured seconds per step. max_minutes stays
the hard stop. Each fit is printed with the measurement behind it. With train.depth_curriculum a
step is counted by its depth's cost (train/depth.py), and the fit is made once more at DEEP_REFIT_AT.

The budget counts from the start of the run's preparation, not its first step: the planner's
measurements and a task's fit before training (the e-mail bag's cross-validated linear model can
take minutes) are inside `--minutes`, and the first line says how much of it they used.

A run with several processes keeps the config's max_steps (each process would measure its
own speed and the processes must agree on the step count); max_minutes still stops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trmkit.config import ModelConfig
from trmkit.train.depth import fitted_max_steps

FIT_AFTER_S = 30.0  # seconds of timed steps before the first fit
REFIT_AT = (0.25, 0.5)  # shares of the budget at which the fit is made again from the longer measurement
DEEP_REFIT_AT = 0.75  # and with a depth curriculum once more, when the steps run at the full depth


@dataclass
class TimeFit:
    """Fits max_steps to `budget_s` of wall time counted from `start_s` (the loop's clock)."""

    budget_s: float
    start_s: float
    marks: list[float] = field(default_factory=list)  # seconds of timed steps at which to fit
    timed_from: tuple[int, float] | None = None  # (step, time) at the end of the first step
    model: ModelConfig | None = None  # with `ends` (train.depth_curriculum): steps cost by their depth
    ends: tuple[float, ...] = ()
    counted: str = "evaluations and checkpoints included"  # what the measured time holds besides the steps

    def __post_init__(self) -> None:
        first = min(FIT_AFTER_S, self.budget_s / 2)
        shares = REFIT_AT + ((DEEP_REFIT_AT,) if self.ends else ())
        self.marks = [first] + [self.budget_s * r for r in shares if self.budget_s * r > first]

    def observe(self, step: int, now_s: float, max_steps: int = 0) -> tuple[int, str] | None:
        """After each step: (new max_steps, why) when a fit is due, else None. max_steps: the current one
        (with train.depth_curriculum its stages, hence the cost of each step, move with it)."""
        if self.timed_from is None:
            self.timed_from = (step, now_s)
            return None
        step0, t0 = self.timed_from
        if not self.marks or now_s - t0 < self.marks[0] or step == step0:
            return None
        self.marks.pop(0)
        elapsed = now_s - self.start_s
        total, unit = fitted_max_steps(step, (step0, now_s - t0), self.budget_s - elapsed, max_steps or step,
                                       self.model, self.ends)
        speed = f"{unit:.3f} s per full-depth step" if self.ends else f"{unit:.3f} s/step"
        return total, (f"train.max_steps={total} ({speed} measured over steps {step0 + 1}-{step}, "
                       f"{self.counted}; the lr schedule now ends with the "
                       f"{self.budget_s / 60:g}-minute budget, {elapsed / 60:.1f} min of it spent)")


def spent_before(seconds: float, minutes: float) -> str:
    """How much of the budget the preparation (planning, a task's fit before training) used, in words."""
    share = seconds / max(60 * minutes, 1e-9)
    said = f"{seconds:.0f} s of it went to preparing the run (planning, the task's fit before training)"
    if share >= 0.5:
        said += (f": {share:.0%} of the budget, so little is left for training; give more minutes, or make the "
                 "preparation shorter (e-mail: a fixed email.input_linear_c and input_linear_weighting skip the "
                 "cross-validation)")
    return said
