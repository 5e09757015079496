"""Rewards for the three self-play roles (propose, solve, critique) and their running statistics.

Each reward mixes a hard signal (the answer executed correctly, the critic agreed with the
executor, the proposed task sat between trivial and impossible) with a soft one (how long the
solver thought, the critic's own 0..5 score). Early in training the soft part dominates so a
fresh model gets a gradient before it can solve anything; the weight of the hard part grows
with training progress ``t`` in [0, 1]:

    alpha_s(t): 0.3 until t = 0.2, linear to 0.8 at t = 0.6, linear to 0.95 at t = 1
    alpha_c(t): 0.1 until t = 0.2, linear to 0.6 at t = 0.6, linear to 0.8 at t = 1

    R_solve    = alpha_s * correct   + (1 - alpha_s) * R_len,   R_len = min(1, log n / log T_max)
    R_critique = alpha_c * agreement + (1 - alpha_c) * score / 5
    R_propose  = 1 - solve_rate  when 0 < solve_rate < 1, else 0

A malformed output (no parsable answer, critique or task) gets ``format_penalty`` (a number
<= 0, e.g. -0.5) instead, in every role: it is the only reward below 0, so the model learns the
format before anything else.

Departures and choices:

- The length term rewards log-length, capped at ``T_max`` tokens: log so the first few tokens of
  thought count most and a long ramble gains little; capped so there is no reason to run to the
  context limit. One token or none earns 0 (log 1 = 0).
- A proposed task that every attempt solves (rate 1) teaches nothing, and one that none solves
  (rate 0) may be wrong or impossible: both earn 0, as does a task the executor could not check
  (``solve_rate=None``). They are rewarded 0, not penalised: the proposer was well formed.
- ``RunningStats`` keeps a mean and variance per (task type, role) over all of training so
  advantages are comparable across batches (Welford's update merged per batch with Chan et
  al.'s parallel formula, so a batch costs one pass, not one update per value).

Only the standard library is imported; nothing runs at import time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

# (t, alpha) knots; between knots the weight is linear, outside [0, 1] t is clamped.
ALPHA_S = ((0.0, 0.3), (0.2, 0.3), (0.6, 0.8), (1.0, 0.95))
ALPHA_C = ((0.0, 0.1), (0.2, 0.1), (0.6, 0.6), (1.0, 0.8))

MAX_SCORE = 5  # the critic scores a solution 0..5


# --------------------------------------------------------------------------- schedules


def piecewise_linear(t: float, points: Sequence[tuple[float, float]]) -> float:
    """The value at ``t`` (clamped to [0, 1]) of the line through ``points`` (x ascending).

    Before the first knot the first value holds, after the last knot the last value: a schedule
    with knots only inside [0, 1] is flat at its ends rather than extrapolated."""
    if not points:
        raise ValueError("piecewise_linear needs at least one (t, value) point")
    xs = [float(x) for x, _ in points]
    if any(b < a for a, b in zip(xs, xs[1:])):
        raise ValueError(f"piecewise_linear points must have ascending t, got {xs}")
    if math.isnan(t):
        raise ValueError("training progress t is NaN: pass step / total_steps in [0, 1]")
    t = min(1.0, max(0.0, float(t)))
    if t < xs[0]:
        return float(points[0][1])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if t < x1:  # x0 <= t < x1, so x1 > x0: two knots at one t make a step, the later wins
            return float(y0) + (float(y1) - float(y0)) * (t - x0) / (x1 - x0)
    return float(points[-1][1])


def alpha_s(t: float) -> float:
    """Weight of correctness in the solve reward at training progress ``t``."""
    return piecewise_linear(t, ALPHA_S)


def alpha_c(t: float) -> float:
    """Weight of agreement with the executor in the critique reward at training progress ``t``."""
    return piecewise_linear(t, ALPHA_C)


# --------------------------------------------------------------------------- rewards


def length_reward(think_tokens: int, t_max: int) -> float:
    """R_len = min(1, log n / log T_max): thinking longer earns more, less and less, up to T_max."""
    if t_max < 2:
        raise ValueError(f"t_max={t_max}: the length cap must be at least 2 tokens (log 1 = 0)")
    if think_tokens <= 1:
        return 0.0
    return min(1.0, math.log(think_tokens) / math.log(t_max))


def solve_reward(correct: bool, think_tokens: int, t: float, t_max: int, well_formed: bool,
                 format_penalty: float) -> float:
    """alpha_s(t) * correct + (1 - alpha_s(t)) * R_len, or ``format_penalty`` when malformed."""
    _check_penalty(format_penalty)
    if not well_formed:
        return float(format_penalty)
    a = alpha_s(t)
    return a * float(bool(correct)) + (1.0 - a) * length_reward(think_tokens, t_max)


def critique_reward(agrees: bool, score: int | None, t: float, well_formed: bool,
                    format_penalty: float) -> float:
    """alpha_c(t) * agreement + (1 - alpha_c(t)) * score / 5, or ``format_penalty`` when malformed.

    ``agrees``: the critic's verdict (correct / wrong) matches what executing the code found.
    ``score`` may be None only for a malformed critique: a well-formed one always carries it."""
    _check_penalty(format_penalty)
    if not well_formed:
        return float(format_penalty)
    if score is None or isinstance(score, bool) or not 0 <= score <= MAX_SCORE \
            or int(score) != score:
        raise ValueError(f"critique score {score!r}: a well-formed critique has an integer score "
                         f"0..{MAX_SCORE}; pass well_formed=False when it could not be parsed")
    a = alpha_c(t)
    return a * float(bool(agrees)) + (1.0 - a) * int(score) / MAX_SCORE


def propose_reward(solve_rate: float | None, well_formed: bool, format_penalty: float) -> float:
    """1 - solve_rate for a task solved sometimes (0 < rate < 1), 0 otherwise; penalty if malformed.

    ``solve_rate=None``: the task was well formed but the executor could not check it (it raised,
    timed out, had no deterministic answer), so it earns 0 like a trivial or impossible task."""
    _check_penalty(format_penalty)
    if not well_formed:
        return float(format_penalty)
    if solve_rate is None:
        return 0.0
    if not 0.0 <= solve_rate <= 1.0:  # also rejects NaN
        raise ValueError(f"solve_rate={solve_rate}: a fraction of attempts must lie in [0, 1]")
    return 1.0 - float(solve_rate) if 0.0 < solve_rate < 1.0 else 0.0


def _check_penalty(format_penalty: float) -> None:
    if not format_penalty <= 0.0:
        raise ValueError(f"format_penalty={format_penalty}: it must be <= 0 (e.g. -0.5) so that "
                         "a malformed output never earns more than a well-formed one")


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
