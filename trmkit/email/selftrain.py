"""Self-training of the bag's linear model on a mailbox's unlabelled messages.

A store built with `trmkit data email --keep-labels K` holds K labelled messages per class and
the rest of the mailbox without labels (its `unlabelled/` split). The linear model fitted on the K
(email/linear_fit.py) then labels the unlabelled messages, and is fitted again on the labelled
ones and its most confident answers, in rounds that take a growing share (ROUNDS) of the
unlabelled messages, the most confident first, each class in proportion to how many messages the
model gives it. Each refit weighs the classes as balanced over
what it fits on and counts a labelled message LABELLED_WEIGHT times a pseudo-labelled one, so a
wrong pseudo-label weighs less than a real one. The idf of the features is counted over every
training message, labelled or not (no labels read). Nothing here reads a label of an unlabelled
message: none is stored.

Off by default (email.input_linear_unlabelled=self_train turns it on): measured with scikit-learn on full TF-IDF vectors
of SpamAssassin 3-way it lifted 10 labels per class from 0.591 to 0.719 macro-F1 (2 draws), but on
the bag's features it drifted towards one class and lowered macro-F1 (0.81 -> 0.45 with idf
features and C=1, 0.775 -> 0.787 with binary ones; docs/results.md, "E-mail").
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from trmkit.email.progress import slow_steps

ROUNDS = (0.05, 0.1, 0.2, 0.4)  # shares of the unlabelled messages pseudo-labelled in each round
LABELLED_WEIGHT = 3.0  # a labelled message counts this many pseudo-labelled ones

Log = Callable[[str], None]
Fit = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, dict]]


def balanced(y: torch.Tensor, classes: int) -> torch.Tensor:
    """(classes,) weights N / (K * count): every class weighs the same in the loss (0 for an absent one)."""
    counts = torch.bincount(y, minlength=classes).float()
    present = counts > 0
    out = torch.zeros(classes)
    out[present] = len(y) / (int(present.sum()) * counts[present])
    return out


def self_train(x_l: torch.Tensor, y_l: torch.Tensor, x_u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               classes: int, fit: Fit, log: Log = print) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) after the rounds: x_l/x_u the labelled/unlabelled sparse feature rows, (weight, bias)
    the fit on the labelled alone, fit(x, y, w) one weighted logistic-regression fit."""
    start, n_u = time.perf_counter(), x_u.shape[0]
    said: list[str] = []
    say = slow_steps(log, start)
    for share in ROUNDS:
        probs = torch.softmax(torch.sparse.mm(x_u, weight) + bias, dim=1)
        confidence, guess = probs.max(1)
        take = most_confident(confidence, guess, share, classes)
        rows = torch.index_select(x_u, 0, take).coalesce()
        x = torch.cat([x_l, rows]).coalesce()
        y = torch.cat([y_l, guess[take]])
        w = balanced(y, classes)[y] * torch.cat([torch.full((len(y_l),), LABELLED_WEIGHT), torch.ones(len(take))])
        weight, bias, _ = fit(x, y, w)
        counts = torch.bincount(guess[take], minlength=classes).tolist()
        said.append(f"{len(take)} ({'/'.join(map(str, counts))}, confidence >= {float(confidence[take].min()):.2f})")
        say(f"model: input_linear self-training round {len(said)}/{len(ROUNDS)}: {said[-1]} of {n_u} unlabelled "
            "messages pseudo-labelled")
    log(f"model: input_linear self-trained on {n_u} unlabelled messages in {len(ROUNDS)} rounds, the most confident "
        f"first: {', '.join(said)} pseudo-labelled (per class); {time.perf_counter() - start:.1f} s")
    return weight, bias


def most_confident(confidence: torch.Tensor, guess: torch.Tensor, share: float, classes: int) -> torch.Tensor:
    """Rows to pseudo-label: `share` of them, each class's quota in proportion to how many rows the model
    gives it, its most confident first (one global ranking would let the class with the sharpest
    answers take every place)."""
    picked = []
    for c in range(classes):
        rows = torch.nonzero(guess == c).flatten()
        quota = int(round(share * len(rows)))
        picked.append(rows[torch.argsort(confidence[rows], descending=True)[:quota]])
    return torch.cat(picked)


def ids_of(split, positions: int) -> np.ndarray:
    """The bag ids of a split's rows (its last `positions` columns)."""
    return np.asarray(split.inputs)[:, -positions:]
