"""A time budget as a schedule: fit train.max_steps (and so the learning-rate schedule) to minutes.

`trmkit train CONFIG --minutes N` sets train.max_minutes=N and train.fit_to_time=true. The
loop then times its steps and, once the step time has settled, sets train.max_steps so that
the warm-up and cosine end with the budget, at the speed measured so far: first after
FIT_AFTER_S seconds of steps (or half the budget, whichever is less; the first step, which
may compile, is not timed), then again at each share of the budget in REFIT_AT, with
evaluations and checkpoints amortised into the measured seconds per step. max_minutes stays
the hard stop. Each fit is printed with the measurement behind it.

A run with several processes keeps the config's max_steps (each process would measure its
own speed and the processes must agree on the step count); max_minutes still stops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FIT_AFTER_S = 30.0  # seconds of timed steps before the first fit
REFIT_AT = (0.25, 0.5)  # shares of the budget at which the fit is made again from the longer measurement


def fitted_steps(step: int, elapsed_s: float, per_step_s: float, budget_s: float) -> int:
    """The step count at which the budget ends, from `step` done after `elapsed_s`, at `per_step_s`."""
    return max(step + 1, step + int((budget_s - elapsed_s) / per_step_s))


@dataclass
class TimeFit:
    """Fits max_steps to `budget_s` of wall time counted from `start_s` (the loop's clock)."""

    budget_s: float
    start_s: float
    marks: list[float] = field(default_factory=list)  # seconds of timed steps at which to fit
    timed_from: tuple[int, float] | None = None  # (step, time) at the end of the first step

    def __post_init__(self) -> None:
        first = min(FIT_AFTER_S, self.budget_s / 2)
        self.marks = [first] + [self.budget_s * r for r in REFIT_AT if self.budget_s * r > first]

    def observe(self, step: int, now_s: float) -> tuple[int, str] | None:
        """After each step: (new max_steps, why) when a fit is due, else None."""
        if self.timed_from is None:
            self.timed_from = (step, now_s)
            return None
        step0, t0 = self.timed_from
        if not self.marks or now_s - t0 < self.marks[0] or step == step0:
            return None
        self.marks.pop(0)
        per_step = (now_s - t0) / (step - step0)
        elapsed = now_s - self.start_s
        total = fitted_steps(step, elapsed, per_step, self.budget_s)
        return total, (f"train.max_steps={total} ({per_step:.3f} s/step measured over steps {step0 + 1}-{step}, "
                       f"evaluations and checkpoints included; the lr schedule now ends with the "
                       f"{self.budget_s / 60:g}-minute budget, {elapsed / 60:.1f} min of it spent)")
