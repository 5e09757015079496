"""The curriculum of self-play's solver tasks: the generator's program lengths and the proposer's share.

Per task type, one round's statistics (the solver's sampled solve rate r on its tasks, the share m of
its tasks with mixed outcomes, the proposer's rewards) update two things:

- the generator's length window [lo, hi] (programs of lo..hi statements, drawn uniformly);
- the share of the solver's tasks that fresh proposals may fill.

rl.curriculum_step = 0 (the default, as measured so far): only hi moves, by one statement, and only in
a round with m < rl.mixed_target: up when r > 1/2, down otherwise; lo stays 1 and the proposer's share
stays rl.proposer_share. Measured rounds had m at 29-48% against a 30% target, so it rarely moved, and
the 1-statement tasks (mostly solved) stayed in every round.

rl.curriculum_step = s > 0 (the moving curriculum):
- lo and hi both move by s per round with m < rl.mixed_target, up when r > 1/2 and down otherwise
  (kept in [1, MAX_STATEMENTS], lo <= hi; they are reals, a program's length is drawn from their
  rounded values), so the whole window follows the lengths where the solver is right about half the
  time, which is where a task's k attempts disagree most often;
- the proposer's share is rl.proposer_share + (MAX_PROPOSER_SHARE - rl.proposer_share) x q, with q a
  running mean (rate SHARE_RATE per round) of its rewards 4 r (1 - r) (a malformed proposal counts 0):
  the better its tasks' outcomes are mixed, the more of the solver's tasks it poses; the rest always
  come from the generator.

Logged per round: the window (`curriculum/min_statements`, `curriculum/max_statements`), the share
(`curriculum/proposer_share`), and the share of valid proposals outside the generator's support
(`propose/outside_support`: programs longer or shorter than the window the generator draws from this
round; the generator's inputs cover every list a proposal may hold, 1 to 6 digits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trmkit.rl import programs as P

MAX_PROPOSER_SHARE = 0.75  # the moving curriculum's largest proposer share: a quarter stays generated
SHARE_RATE = 0.1  # weight of a round's mean proposer reward in the running mean q


def _rounded(x: float) -> int:
    return int(x + 0.5)


@dataclass
class Curriculum:
    """The length window and proposer share per task type (module docstring)."""

    step: float  # rl.curriculum_step: 0 = only hi moves, by 1 (the measured one)
    mixed_target: float  # rl.mixed_target
    base_share: float  # rl.proposer_share
    window: dict[str, list[float]] = field(default_factory=lambda: {k: [1.0, float(P.SEED_MAX_STATEMENTS)]
                                                                   for k in P.TYPES})
    quality: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in P.TYPES})  # q per type

    @property
    def moving(self) -> bool:
        return self.step > 0

    def lengths(self, kind: str) -> tuple[int, int]:
        """(min, max) statements of the generator's programs of this type."""
        lo, hi = self.window[kind]
        return _rounded(lo), max(_rounded(lo), _rounded(hi))

    def share(self, kind: str) -> float:
        if not self.moving:
            return self.base_share
        return self.base_share + (max(MAX_PROPOSER_SHARE, self.base_share) - self.base_share) * self.quality[kind]

    def slots(self, kind: str, tasks_per_type: int) -> int:
        """Solver tasks of this type that fresh proposals may fill."""
        return int(self.share(kind) * tasks_per_type)

    def update(self, kind: str, solve_rate: float, mixed_share: float, propose_rewards: list[float]) -> None:
        """One round's statistics of one type: move the window, update the proposer's running reward."""
        lo, hi = self.window[kind]
        if mixed_share < self.mixed_target:
            up = solve_rate > 0.5
            if self.moving:
                d = self.step if up else -self.step
                lo = min(float(P.MAX_STATEMENTS), max(1.0, lo + d))
                hi = min(float(P.MAX_STATEMENTS), max(lo, hi + d))
            else:
                hi = float(min(P.MAX_STATEMENTS, max(1, _rounded(hi) + (1 if up else -1))))
        self.window[kind] = [lo, hi]
        if self.moving and propose_rewards:
            mean = sum(max(0.0, r) for r in propose_rewards) / len(propose_rewards)
            self.quality[kind] += SHARE_RATE * (mean - self.quality[kind])

    def outside(self, kind: str, tasks: list[P.CodeTask]) -> float | None:
        """The share of these (valid, proposed) tasks the generator could not draw this round."""
        if not tasks:
            return None
        lo, hi = self.lengths(kind)
        return sum(not lo <= len(t.program) <= hi for t in tasks) / len(tasks)

    def metrics(self, kind: str) -> dict[str, float]:
        lo, hi = self.lengths(kind)
        return {f"curriculum/min_statements/{kind}": float(lo), f"curriculum/max_statements/{kind}": float(hi),
                f"curriculum/proposer_share/{kind}": self.share(kind)}

    def state_dict(self) -> dict:
        return {"window": {k: list(v) for k, v in self.window.items()}, "quality": dict(self.quality)}

    def load_state_dict(self, state: dict) -> None:
        self.window = {k: [float(a), float(b)] for k, (a, b) in state["window"].items()}
        self.quality = {k: float(v) for k, v in state["quality"].items()}
