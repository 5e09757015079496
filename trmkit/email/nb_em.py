"""Naive Bayes by expectation-maximisation: the bag's linear model from a few labels and the unlabelled rest.

With `trmkit data email --keep-labels K` a store holds K labelled messages per class and the rest of
the mailbox without labels (its `unlabelled/` split). Ten labelled messages are too few for a
discriminative fit; a generative one can read the unlabelled messages as well (Nigam, McCallum, Thrun
and Mitchell 2000, "Text classification from labeled and unlabeled documents using EM"):

    M-step  theta[c, j] = (alpha + n[c, j]) / (alpha * V + n[c])     prior[c] ~ m[c]
            n[c, j]: the count of bag id j in the messages of class c, each labelled message counted
            with weight 1 in its class, each unlabelled one with weight lam * P(c | message);
            m[c]: the same weights summed; V: the vocabulary's size
    E-step  P(c | message) = softmax_c(log prior[c] + sum over the message's ids j of log theta[c, j])

starting from the fit on the labelled messages alone (or from the given class probabilities of the unlabelled
messages: the e-mail fit gives those of the logistic regression the messages' text taught, email/linear_fit.py
`_em_start`), for ITERATIONS rounds. The answer is a linear
model of the bag's binary ids (W[j, c] = log theta[c, j], b = log prior), so it fills the model's
frozen linear buffers (email.input_linear) as the logistic regression does, and the recursion learns beside it.
Each id's row and the bias are centred over the classes (each message's logits then sum to 0): the
posterior is the same, and the logits stay near 0 rather than at -thousands, where the stablemax the
trainer and the calibration read (unlike softmax) would turn them into near-uniform probabilities.

lam is set so that the unlabelled messages weigh UNLABELLED_WEIGHT times the labelled ones in all
(lam = UNLABELLED_WEIGHT * labelled / unlabelled): at full weight (lam = 1) thousands of unlabelled
messages outvote 30 labelled ones and EM settles on the mailbox's largest clusters, not its classes
(as Nigam et al. found, and their remedy: down-weight them). UNLABELLED_WEIGHT and ALPHA were chosen
on two SpamAssassin 3-way draws (docs/results.md, "E-mail"), never on the Turkish or mailing-list
sets. No label of an unlabelled message is read: the store has none. It is the default weight: before
the fit the few-label guard (email/guard.py) may lower it, down to 0 (naive Bayes on the labels alone),
or replace naive Bayes by logistic regression, where the K labels show, beyond their noise, that the
unlabelled mail misleads.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from trmkit.email.progress import slow_steps

ALPHA = 0.1  # additive smoothing of each class's id counts
UNLABELLED_WEIGHT = 4.0  # the unlabelled messages' total weight, in units of the labelled messages' total
ITERATIONS = 10

Log = Callable[[str], None]


@dataclass(frozen=True)
class Rows:
    """A sparse (rows, vocab) count matrix and its transpose, both CSR: each EM round multiplies by both, and
    CSR products were 6-9x faster than COO ones (4,565 SpamAssassin bags), which makes the guard's cross-fitted
    fits (email/guard.py) cheap."""

    x: torch.Tensor  # (rows, vocab)
    xt: torch.Tensor  # (vocab, rows)

    @classmethod
    def of(cls, coo: torch.Tensor) -> "Rows":
        with warnings.catch_warnings():  # "sparse CSR support is in beta": the two products used here are stable
            warnings.simplefilter("ignore", UserWarning)
            return cls(coo.to_sparse_csr(), coo.t().coalesce().to_sparse_csr())

    def __len__(self) -> int:
        return int(self.x.shape[0])


def fit(x_l: torch.Tensor, y_l: torch.Tensor, x_u: torch.Tensor | Rows, classes: int, vocab: int,
        log: Log = print, unlabelled_weight: float = UNLABELLED_WEIGHT, start_from: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (vocab, classes), bias (classes,)): x_l / x_u the labelled / unlabelled messages' sparse
    (rows, vocab) id counts, y_l the labels. The pad id's row of weight is 0. unlabelled_weight: the
    unlabelled messages' total weight in units of the labelled ones' (0: naive Bayes on the labelled alone).
    start_from: the unlabelled messages' class probabilities (rows, classes) EM starts from (see `solve`)."""
    start = time.perf_counter()
    unlabelled = x_u if isinstance(x_u, Rows) else Rows.of(x_u)
    say = slow_steps(log, start)
    weight, bias, moved, answers = solve(Rows.of(x_l), y_l, unlabelled, classes, vocab, unlabelled_weight, say,
                                         start_from)
    weight, bias = weight - weight.mean(1, keepdim=True), bias - bias.mean()  # the same posterior, centred
    weight[0] = 0.0
    lam = unlabelled_weight * len(y_l) / max(1, len(unlabelled))
    share = torch.bincount(answers, minlength=classes).tolist()
    log(f"model: input_linear by naive Bayes with EM on {len(y_l)} labelled and {len(unlabelled)} unlabelled "
        f"messages (each unlabelled one weighs {lam:.4f}: {unlabelled_weight:g}x the labelled in all; alpha "
        f"{ALPHA:g}; {len(moved)} rounds, answers changed per round {moved}; the unlabelled messages now fall "
        f"{'/'.join(map(str, share))} per class; {time.perf_counter() - start:.1f} s)")
    return weight, bias


def solve(labelled: Rows, y_l: torch.Tensor, unlabelled: Rows, classes: int, vocab: int, unlabelled_weight: float,
          say: Log | None = None, start_from: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, list[int], torch.Tensor]:
    """EM itself: (log theta (vocab, classes), log prior (classes,), unlabelled answers changed per round, the
    unlabelled messages' last answers). unlabelled_weight 0: the labelled fit alone, no round. EM starts from
    `start_from` (the unlabelled messages' class probabilities) where given, else from the labelled fit's."""
    resp_l = torch.nn.functional.one_hot(y_l, classes).float()
    lam = unlabelled_weight * len(y_l) / max(1, len(unlabelled))
    weight, bias = _m_step(labelled, resp_l, None, None, lam, vocab)
    resp_u = _e_step(unlabelled, weight, bias) if start_from is None or lam == 0 else start_from.float()
    answers, moved = resp_u.argmax(1), []
    for round_ in range(ITERATIONS if lam > 0 else 0):  # each round's E-step is also the next round's start
        weight, bias = _m_step(labelled, resp_l, unlabelled, resp_u, lam, vocab)
        resp_u = _e_step(unlabelled, weight, bias)
        moved.append(int((resp_u.argmax(1) != answers).sum()))
        answers = resp_u.argmax(1)
        if say is not None:
            say(f"model: input_linear EM round {round_ + 1}/{ITERATIONS}: {moved[-1]} of {len(unlabelled)} "
                "unlabelled answers changed")
    return weight, bias, moved, answers


def _e_step(x_u: Rows, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """P(c | message) of each unlabelled message (rows, classes)."""
    return torch.softmax(x_u.x @ weight + bias, dim=1)


def _m_step(x_l: Rows, resp_l: torch.Tensor, x_u: Rows | None, resp_u: torch.Tensor | None,
            lam: float, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """log theta (vocab, classes) and log prior (classes,) from weighted class responsibilities."""
    counts = x_l.xt @ resp_l  # (vocab, classes)
    mass = resp_l.sum(0)
    if x_u is not None:
        counts = counts + lam * (x_u.xt @ resp_u)
        mass = mass + lam * resp_u.sum(0)
    smoothed = counts + ALPHA
    weight = torch.log(smoothed) - torch.log(counts.sum(0) + ALPHA * vocab)
    return weight, torch.log(mass / mass.sum())
