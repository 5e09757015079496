"""When `email predict` stops a message before its last supervision step: the halting head, or a sure answer.

The model's own halting head (ACT: stop when q_halt > 0) starts at bias -5, as in the paper, so that
training begins by never stopping early. AdamW moves a weight by about the learning rate per step, so
an e-mail run (lr 3e-4, a few thousand steps in 8 minutes) cannot bring it above 0: on the demo's run
every message's q_halt was -4.0, and every message ran every step, although its answer after the
first step was already its final one (on all 6,046 SpamAssassin messages).

So a message also stops at step n < N_sup when its top class probability (stable-max at the fitted
temperature) is at least P, where P is fitted without labels: the lowest value of GRID at which no
message of a fitting set changed its answer after a step whose probability reached it. The fitting
set is the store's validation split, else its unlabelled split, else its training split (at most
FIT_MESSAGES of it; no label is read, so a few-labels store gives none away). With fewer than
MIN_MESSAGES, or when no value of GRID holds, no P is fitted and only the halting head stops a message.
"""

from __future__ import annotations

import numpy as np

GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
FIT_SPLITS = ("val", "unlabelled", "train")
FIT_MESSAGES = 1000
MIN_MESSAGES = 100


def fit_probability(step_probs: list[np.ndarray]) -> float | None:
    """The lowest P of GRID such that every message whose top probability after some step before the last
    is >= P already has its last step's answer; None if none holds. step_probs: (n, C) per step."""
    final = step_probs[-1].argmax(1)
    for p in GRID:
        if all(((probs.max(1) < p) | (probs.argmax(1) == final)).all() for probs in step_probs[:-1]):
            return p
    return None


def describe(probability: float | None, fitted_on: str) -> str:
    """The rule in words, as predict prints it and the model card states it."""
    if probability is None:
        return f"a message stops early only when its halting head says so (q_halt > 0); {fitted_on}"
    return (f"a message stops at the first step whose top class probability is >= {probability:g} (or whose "
            f"halting head says so): fitted without labels on {fitted_on}, the lowest level at which no answer "
            "changed after it")
