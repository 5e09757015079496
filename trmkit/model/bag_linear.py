"""The bag's fitted linear model (model.bag_linear): logistic regression over a message's n-gram ids.

A classifier store with a bag (`trmkit data email --bag N`) ends each example with the ids of its
N most telling n-grams. With model.bag_linear the class logits add a linear model of those ids,

    logits_bag(x) = sum over the bag's ids j of W[j] + b        (W: vocab x classes)

fitted once before training, on the training split, to the optimum of

    sum_i w_i CE(logits_bag(x_i), y_i) / N  +  |W|^2 / (2 C N)

(w_i: the training loss's class weights, train.class_weighting; C: model.bag_linear_c; the same
objective as scikit-learn's LogisticRegression on a multi-hot matrix), by full-batch L-BFGS, and then
frozen (buffers, not parameters). Why fitted and not trained with the rest: on a few hundred messages
the same linear model trained by Adam beside the recursion stops well short of that optimum and
generalises worse (docs/email.md). The recursion's own head starts beside it and learns what it
leaves; a run resumed from a checkpoint reloads the fitted weights with the rest.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

Log = Callable[[str], None]
MAX_ITERATIONS = 500


def multi_hot(ids: np.ndarray, vocab_size: int) -> torch.Tensor:
    """(N, vocab) sparse float32: a 1 for each non-pad id of each row (repeats add up)."""
    rows, cols = np.nonzero(ids)
    index = torch.from_numpy(np.stack([rows, ids[rows, cols].astype(np.int64)]))
    return torch.sparse_coo_tensor(index, torch.ones(len(rows)), (len(ids), vocab_size),
                                   check_invariants=True).coalesce()


def read(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, positions: int) -> torch.Tensor:
    """(B, C) float32: for each row of inputs, the sum of its bag ids' rows of weight (its last `positions`
    ids, pads left out), plus bias."""
    ids = inputs[:, -positions:].long()
    present = (ids != 0).unsqueeze(-1).float()  # pad id 0
    return (torch.nn.functional.embedding(ids, weight) * present).sum(1) + bias


def fit(model: torch.nn.Module, inputs: np.ndarray, labels: np.ndarray, class_weights: torch.Tensor | None,
        c: float, log: Log = print) -> dict[str, float]:
    """Fit model.bag_linear_weight / bias to the training split (inputs (N, seq_len), labels: the class
    at position 0); returns what the fit reached, and logs it."""
    cfg = model.cfg
    start = time.perf_counter()
    x = multi_hot(np.asarray(inputs)[:, -cfg.bag_positions:], cfg.vocab_size)
    y = torch.from_numpy(np.asarray(labels)[:, 0].astype(np.int64))
    if int(y.max()) >= cfg.num_classes or int(y.min()) < 0:
        raise ValueError(f"model.bag_linear: training labels outside 0..{cfg.num_classes - 1}")
    w = (class_weights[:cfg.num_classes].float().cpu() if class_weights is not None
         else torch.ones(cfg.num_classes))[y]
    weight = torch.zeros(cfg.vocab_size, cfg.num_classes, requires_grad=True)
    bias = torch.zeros(cfg.num_classes, requires_grad=True)
    n = len(y)

    def objective() -> torch.Tensor:
        logits = torch.sparse.mm(x, weight) + bias
        ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return (w * ce).sum() / n + weight.square().sum() / (2 * c * n)

    opt = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=MAX_ITERATIONS, history_size=20,
                            tolerance_grad=1e-7, tolerance_change=1e-10, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        loss = float(objective())
        accuracy = float(((torch.sparse.mm(x, weight) + bias).argmax(1) == y).float().mean())
        model.bag_linear_weight.copy_(weight.to(model.bag_linear_weight.device))
        model.bag_linear_bias.copy_(bias.to(model.bag_linear_bias.device))
    iterations = int(opt.state[opt._params[0]].get("n_iter", 0))
    seconds = time.perf_counter() - start
    log(f"model: bag_linear fitted (logistic regression on the bag's ids, C={c:g}, {n} training messages, "
        f"{iterations} L-BFGS iterations, {seconds:.1f} s): objective {loss:.4f}, training accuracy "
        f"{accuracy:.3f}; frozen, the recursion's head learns beside it")
    return {"objective": loss, "train_accuracy": accuracy, "iterations": iterations, "seconds": seconds}
