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

starting from the fit on the labelled messages alone, for ITERATIONS rounds. The answer is a linear
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
sets. No label of an unlabelled message is read: the store has none.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from trmkit.email.progress import slow_steps

ALPHA = 0.1  # additive smoothing of each class's id counts
UNLABELLED_WEIGHT = 4.0  # the unlabelled messages' total weight, in units of the labelled messages' total
ITERATIONS = 10

Log = Callable[[str], None]


def fit(x_l: torch.Tensor, y_l: torch.Tensor, x_u: torch.Tensor, classes: int, vocab: int,
        log: Log = print) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (vocab, classes), bias (classes,)): x_l / x_u the labelled / unlabelled messages' sparse
    (rows, vocab) id counts, y_l the labels. The pad id's row of weight is 0."""
    start = time.perf_counter()
    resp_l = torch.nn.functional.one_hot(y_l, classes).float()
    lam = UNLABELLED_WEIGHT * len(y_l) / max(1, x_u.shape[0])
    weight, bias = _m_step(x_l, resp_l, None, None, lam, vocab)
    resp_u = _e_step(x_u, weight, bias)
    answers, moved, say = resp_u.argmax(1), [], slow_steps(log, start)
    for round_ in range(ITERATIONS):  # each round's E-step is also the next round's start
        weight, bias = _m_step(x_l, resp_l, x_u, resp_u, lam, vocab)
        resp_u = _e_step(x_u, weight, bias)
        moved.append(int((resp_u.argmax(1) != answers).sum()))
        answers = resp_u.argmax(1)
        say(f"model: input_linear EM round {round_ + 1}/{ITERATIONS}: {moved[-1]} of {x_u.shape[0]} unlabelled "
            "answers changed")
    weight, bias = weight - weight.mean(1, keepdim=True), bias - bias.mean()  # the same posterior, centred
    weight[0] = 0.0
    share = torch.bincount(answers, minlength=classes).tolist()
    log(f"model: input_linear by naive Bayes with EM on {len(y_l)} labelled and {x_u.shape[0]} unlabelled "
        f"messages (each unlabelled one weighs {lam:.4f}: {UNLABELLED_WEIGHT:g}x the labelled in all; alpha "
        f"{ALPHA:g}; {ITERATIONS} rounds, answers changed per round {moved}; the unlabelled messages now fall "
        f"{'/'.join(map(str, share))} per class; {time.perf_counter() - start:.1f} s)")
    return weight, bias


def _e_step(x_u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """P(c | message) of each unlabelled message (rows, classes)."""
    return torch.softmax(torch.sparse.mm(x_u, weight) + bias, dim=1)


def _m_step(x_l: torch.Tensor, resp_l: torch.Tensor, x_u: torch.Tensor | None, resp_u: torch.Tensor | None,
            lam: float, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """log theta (vocab, classes) and log prior (classes,) from weighted class responsibilities."""
    counts = torch.sparse.mm(x_l.t(), resp_l)  # (vocab, classes)
    mass = resp_l.sum(0)
    if x_u is not None:
        counts = counts + lam * torch.sparse.mm(x_u.t(), resp_u)
        mass = mass + lam * resp_u.sum(0)
    smoothed = counts + ALPHA
    weight = torch.log(smoothed) - torch.log(counts.sum(0) + ALPHA * vocab)
    return weight, torch.log(mass / mass.sum())
