"""Standard errors for held-out solve rates and the critique's balanced accuracy.

- `rate_se`: the standard error of one run's solve rate over n tasks, sqrt(p (1 - p) / n) (what a
  bootstrap over the tasks converges to for a mean of 0/1 outcomes).
- `paired_bootstrap`: two runs on the same tasks: the mean difference and its bootstrap standard
  error, resampling tasks with replacement and using the same draw for both runs, so the spread
  of task difficulty, which both runs share, cancels.
- `balanced_accuracy`: the mean of the critique's recall on right and on wrong answers; a critique
  that always says `<no>` scores 0.5, whatever the solve rate.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def rate_se(outcomes: Sequence[bool | float]) -> float:
    """sqrt(p (1 - p) / n) of 0/1 outcomes (0 for no outcomes)."""
    n = len(outcomes)
    if n == 0:
        return 0.0
    p = float(np.mean(outcomes))
    return math.sqrt(p * (1.0 - p) / n)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = 10000, seed: int = 0
                     ) -> tuple[float, float]:
    """(mean of b - a, its bootstrap standard error) over the same tasks.

    >>> paired_bootstrap([0, 1, 1, 0], [1, 1, 1, 0])[0]
    0.25
    """
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if d.ndim != 1 or len(a) != len(b) or len(d) == 0:
        raise ValueError(f"paired_bootstrap: two runs on the same tasks, got {len(a)} and {len(b)} outcomes")
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, 1000):  # bounded memory: at most 1000 x n indices at once
        idx = rng.integers(0, len(d), size=(min(1000, resamples - start), len(d)))
        means.append(d[idx].mean(axis=1))
    return float(d.mean()), float(np.concatenate(means).std(ddof=1))


def balanced_accuracy(verdicts: Sequence[bool | None], truth: Sequence[bool]) -> float | None:
    """Mean recall on the right (truth True) and the wrong answers; a missing or malformed verdict
    (None) counts as wrong. None when either class is absent (the measure is undefined)."""
    recalls = []
    for cls in (True, False):
        sel = [v == cls for v, t in zip(verdicts, truth) if t == cls]
        if not sel:
            return None
        recalls.append(float(np.mean(sel)))
    return float(np.mean(recalls))
