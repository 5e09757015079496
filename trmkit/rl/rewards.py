"""Rewards for the three self-play roles and the advantages computed from them.

Every reward is the executor's verdict, nothing self-graded:

    R_solve    = 1 if the answer executes right, 0 if wrong
    R_critique = 1 if the critique's verdict (right / wrong) matches the executor's, else 0
    R_propose  = 4 r (1 - r), r the solver's solve rate over its k attempts at the task:
                 1 at r = 1/2, 0 for a task every attempt solves or none does (nothing to learn)

A malformed output (no parsable answer, verdict or task) gets ``format_penalty`` (<= 0) instead.

Advantages (`group_advantages`): a prompt is sampled k times from one forward (rl/policy.py), and
each sample's advantage is its reward minus the mean of the *other* k - 1 samples of the same
prompt (leave-one-out), then divided by the standard deviation of the round's advantages of that
(task type, role). A prompt whose samples all score the same contributes no gradient, and the
mean advantage is 0 for every prompt: no systematic "raise whatever was sampled" term.

Departures from TR-RPG as published, and why (measured in docs/results.md):
- No length reward. The TRM thinks in its latent recursion (T, n, supervision steps), not in the
  tokens it writes all at once; a reward for emitted think tokens paid for noise (a wrong answer
  with 30 think digits earned 0.687, a right one with a true trace 0.662). Think slots are trained
  by the seeding loss on executor traces only (the anchor, rl/selfplay.py).
- No critique creativity score: it was the critique's own output, which it learned to game.
- The running (type, role) baseline of the published method (Welford, `RunningStats`) stays
  available as rl.baseline=running; per-task group baselines are the default. rl.baseline=expert is
  the rival a reviewer asks for, expert iteration (`expert_advantages`).

Only the standard library is imported; nothing runs at import time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


# --------------------------------------------------------------------------- rewards


def solve_reward(correct: bool, well_formed: bool, format_penalty: float) -> float:
    """1 right, 0 wrong, ``format_penalty`` when the answer could not be parsed."""
    _check_penalty(format_penalty)
    return float(bool(correct)) if well_formed else float(format_penalty)


def critique_reward(agrees: bool, well_formed: bool, format_penalty: float) -> float:
    """1 when the verdict matches what executing the code found, 0 when not, penalty if malformed."""
    _check_penalty(format_penalty)
    return float(bool(agrees)) if well_formed else float(format_penalty)


def propose_reward(solve_rate: float | None, well_formed: bool, format_penalty: float) -> float:
    """4 r (1 - r): highest for a task of mixed outcome; 0 for one never or always solved.

    ``solve_rate=None``: the task was well formed but the executor could not complete it (it raised,
    timed out, had no deterministic answer), so it earns 0 like a trivial or impossible task."""
    _check_penalty(format_penalty)
    if not well_formed:
        return float(format_penalty)
    if solve_rate is None:
        return 0.0
    if not 0.0 <= solve_rate <= 1.0:  # also rejects NaN
        raise ValueError(f"solve_rate={solve_rate}: a fraction of attempts must lie in [0, 1]")
    return 4.0 * solve_rate * (1.0 - solve_rate)


def _check_penalty(format_penalty: float) -> None:
    if not format_penalty <= 0.0:
        raise ValueError(f"format_penalty={format_penalty}: it must be <= 0 (e.g. -0.5) so that "
                         "a malformed output never earns more than a well-formed one")


# --------------------------------------------------------------------------- advantages


def leave_one_out(rewards: Sequence[Sequence[float]]) -> list[list[float]]:
    """Per prompt (a row of k >= 2 samples): r_i - mean of the other k - 1 rewards of that row."""
    out = []
    for row in rewards:
        k, total = len(row), float(sum(row))
        if k < 2:
            raise ValueError("a leave-one-out baseline needs at least 2 samples per prompt (rl.attempts >= 2)")
        out.append([r - (total - r) / (k - 1) for r in row])
    return out


def group_advantages(rewards: Sequence[Sequence[float]], eps: float = 1e-6) -> list[list[float]]:
    """Leave-one-out advantages divided by their standard deviation over the round's rows (one
    (type, role)); all zero when every prompt's samples scored alike."""
    adv = leave_one_out(rewards)
    flat = [a for row in adv for a in row]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((a - mean) ** 2 for a in flat) / len(flat))
    if std < eps:
        return [[0.0] * len(row) for row in adv]
    return [[a / std for a in row] for row in adv]


def expert_advantages(rewards: Sequence[Sequence[float]]) -> list[list[float]]:
    """Expert iteration (rl.baseline=expert): each sample weighted by its reward where that is positive, else 0,
    so the update imitates the policy's own samples that execution verified (a right answer, a verdict that
    matches the executor's; a proposal by its 4 r (1 - r)) and nothing else: no baseline, no push away from
    wrong samples."""
    return [[max(float(r), 0.0) for r in row] for row in rewards]


# --------------------------------------------------------------------------- running statistics


@dataclass
class _Moments:
    """Count, mean and sum of squared deviations (M2) of every value seen under one key."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0


class RunningStats:
    """Mean and population variance per key over all values seen, for normalising rewards.

    A key is a string or a tuple of strings, e.g. ("deduction", "solve"); a tuple is stored as
    its parts joined by "|" ("deduction|solve"), so both spellings name the same statistics and
    ``state_dict`` is plain JSON. An unseen key has count 0, mean 0 and std 0."""

    SEP = "|"

    def __init__(self, eps: float = 1e-6) -> None:
        if not eps > 0:
            raise ValueError(f"eps={eps}: it must be > 0 to keep the division finite")
        self.eps = float(eps)
        self._moments: dict[str, _Moments] = {}

    def update(self, key: str | tuple, values: Iterable[float]) -> None:
        """Merge a batch: its own mean and M2 (two passes, exact sums), then Chan et al.'s formula.

        A NaN or infinite reward is an error, not skipped: it would poison the key forever."""
        batch = [float(v) for v in values]
        if not batch:
            return
        if not all(math.isfinite(v) for v in batch):
            bad = next(v for v in batch if not math.isfinite(v))
            raise ValueError(f"RunningStats.update({key!r}): reward {bad} is not finite; "
                             "fix the reward that produced it")
        n_b = len(batch)
        mean_b = math.fsum(batch) / n_b
        m2_b = math.fsum((v - mean_b) ** 2 for v in batch)
        m = self._moments.setdefault(self._name(key), _Moments())
        n = m.count + n_b
        delta = mean_b - m.mean
        m.mean += delta * n_b / n
        m.m2 += m2_b + delta * delta * m.count * n_b / n
        m.count = n

    def count(self, key: str | tuple) -> int:
        return self._get(key).count

    def mean(self, key: str | tuple) -> float:
        return self._get(key).mean

    def std(self, key: str | tuple) -> float:
        """Population standard deviation (divides by n, as numpy's default); 0 under 2 values."""
        m = self._get(key)
        return math.sqrt(max(m.m2, 0.0) / m.count) if m.count >= 2 else 0.0

    def normalize(self, key: str | tuple, values: Iterable[float]) -> list[float]:
        """(v - mean) / (std + eps); only v - mean while under 2 values (no spread known yet)."""
        m = self._get(key)
        if m.count < 2:
            return [float(v) - m.mean for v in values]
        scale = self.std(key) + self.eps
        return [(float(v) - m.mean) / scale for v in values]

    def keys(self) -> list[str]:
        return sorted(self._moments)

    def state_dict(self) -> dict:
        """Plain JSON types; floats survive json.dumps/loads exactly (repr round-trips)."""
        return {"eps": self.eps,
                "keys": {k: {"count": m.count, "mean": m.mean, "m2": m.m2}
                         for k, m in sorted(self._moments.items())}}

    def load_state_dict(self, state: dict) -> None:
        """Replace every statistic with those of ``state`` (from ``state_dict``)."""
        try:
            moments = {str(k): _Moments(int(v["count"]), float(v["mean"]), float(v["m2"]))
                       for k, v in state["keys"].items()}
            eps = float(state["eps"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a RunningStats state_dict ({e!r}): expected "
                             "{'eps': float, 'keys': {name: {count, mean, m2}}}") from e
        self.eps = eps
        self._moments = moments

    def _get(self, key: str | tuple) -> _Moments:
        return self._moments.get(self._name(key), _Moments())

    @classmethod
    def _name(cls, key: str | tuple) -> str:
        if isinstance(key, str):
            return key
        if isinstance(key, tuple) and key and all(isinstance(p, str) and cls.SEP not in p
                                                  for p in key):
            return cls.SEP.join(key)
        raise ValueError(f"RunningStats key {key!r}: use a string or a non-empty tuple of strings "
                         f"without {cls.SEP!r}, e.g. ('deduction', 'solve')")
