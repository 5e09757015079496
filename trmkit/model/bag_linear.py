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

Out of fold (model.bag_linear_folds = K >= 2): the fitted model classifies its own training split
almost perfectly, so the recursion, trained on those logits, sees few errors to learn from. With K
folds it is also fitted K times, each time without one fold of the training split, and a training
step adds to each message the logits of the fit that did not see it (stacking); evaluation and
inference use the fit on the whole split. A message's fold is a hash of its bag's ids (`fold_of`):
the model reads it from the input alone, and identical bags share a fold.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

Log = Callable[[str], None]
MAX_ITERATIONS = 500
HASH_MULTIPLIER, HASH_PRIME = 2654435761, 2147483647  # a bag's fold: sum of its ids' hashes, mod K


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


def fold_of(ids: torch.Tensor, folds: int) -> torch.Tensor:
    """(B,) int64 in 0..folds-1: each row's fold, a hash of its bag's ids (order does not matter, pads add 0)."""
    return ((ids.long() * HASH_MULTIPLIER) % HASH_PRIME).sum(1) % folds


def read_out_of_fold(inputs: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor, positions: int
                     ) -> torch.Tensor:
    """As `read`, each row with the fit of its own fold's model (weights (K, vocab, C), biases (K, C)):
    the one fitted without the messages of that fold."""
    folds, vocab, classes = weights.shape
    ids = inputs[:, -positions:].long()
    fold = fold_of(ids, folds)
    present = (ids != 0).unsqueeze(-1).float()
    rows = torch.nn.functional.embedding(ids + (fold * vocab).unsqueeze(1), weights.reshape(folds * vocab, classes))
    return (rows * present).sum(1) + biases[fold]


def fit(model: torch.nn.Module, inputs: np.ndarray, labels: np.ndarray, class_weights: torch.Tensor | None,
        c: float, log: Log = print) -> dict[str, float]:
    """Fit model.bag_linear_weight / bias to the training split (inputs (N, seq_len), labels: the class
    at position 0), and with model.bag_linear_folds also one model per fold without that fold
    (model.bag_linear_fold_weight / _bias); returns what the fit on the whole split reached, and logs it."""
    cfg = model.cfg
    start = time.perf_counter()
    ids = np.asarray(inputs)[:, -cfg.bag_positions:]
    y = torch.from_numpy(np.asarray(labels)[:, 0].astype(np.int64))
    if int(y.max()) >= cfg.num_classes or int(y.min()) < 0:
        raise ValueError(f"model.bag_linear: training labels outside 0..{cfg.num_classes - 1}")
    w = (class_weights[:cfg.num_classes].float().cpu() if class_weights is not None
         else torch.ones(cfg.num_classes))[y]
    weight, bias, out = _fit_one(multi_hot(ids, cfg.vocab_size), y, w, cfg.num_classes, c)
    with torch.no_grad():
        model.bag_linear_weight.copy_(weight.to(model.bag_linear_weight.device))
        model.bag_linear_bias.copy_(bias.to(model.bag_linear_bias.device))
    seconds = time.perf_counter() - start
    log(f"model: bag_linear fitted (logistic regression on the bag's ids, C={c:g}, {len(y)} training messages, "
        f"{out['iterations']} L-BFGS iterations, {seconds:.1f} s): objective {out['objective']:.4f}, training "
        f"accuracy {out['train_accuracy']:.3f}; frozen, the recursion's head learns beside it")
    if cfg.bag_linear_folds:
        out["out_of_fold_accuracy"] = _fit_folds(model, ids, y, w, c, log)
    return {**out, "seconds": time.perf_counter() - start}


def _fit_folds(model: torch.nn.Module, ids: np.ndarray, y: torch.Tensor, w: torch.Tensor, c: float, log: Log
               ) -> float:
    """Fit one model per fold on the other folds into the fold buffers; the accuracy of each message's
    out-of-fold model on it (what the training steps will add)."""
    cfg, start = model.cfg, time.perf_counter()
    fold = fold_of(torch.from_numpy(ids.astype(np.int64)), cfg.bag_linear_folds).numpy()
    right = 0
    for k in range(cfg.bag_linear_folds):
        held, kept = fold == k, fold != k
        if not kept.any() or len(np.unique(y.numpy()[kept])) < 2:
            raise ValueError(f"model.bag_linear_folds={cfg.bag_linear_folds}: fold {k} leaves {int(kept.sum())} "
                             "training message(s) of fewer than 2 classes to fit on; use fewer folds")
        weight, bias, _ = _fit_one(multi_hot(ids[kept], cfg.vocab_size), y[kept], w[kept], cfg.num_classes, c)
        with torch.no_grad():
            model.bag_linear_fold_weight[k].copy_(weight.to(model.bag_linear_fold_weight.device))
            model.bag_linear_fold_bias[k].copy_(bias.to(model.bag_linear_fold_bias.device))
            if held.any():
                logits = torch.sparse.mm(multi_hot(ids[held], cfg.vocab_size), weight) + bias
                right += int((logits.argmax(1) == y[held]).sum())
    accuracy = right / len(y)
    log(f"model: bag_linear_folds={cfg.bag_linear_folds} -> {cfg.bag_linear_folds} more fits, each without one fold "
        f"of the training split ({time.perf_counter() - start:.1f} s); training steps add each message's "
        f"out-of-fold logits (accuracy {accuracy:.3f} on the messages it did not see), evaluation the whole fit's")
    return accuracy


def _fit_one(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, classes: int, c: float
             ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The optimum of the class-weighted L2 logistic regression on multi-hot x (N, vocab) by L-BFGS."""
    weight = torch.zeros(x.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
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
    iterations = int(opt.state[opt._params[0]].get("n_iter", 0))
    return weight.detach(), bias.detach(), {"objective": loss, "train_accuracy": accuracy, "iterations": iterations}
