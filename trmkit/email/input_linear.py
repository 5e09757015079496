"""A frozen linear model of the bag's ids (email.input_linear): the read, in the forward pass.

An e-mail classifier whose store ends each example with the bag's ids (its last `model.part_positions`
positions, read by the e-mail model part: email/parts.py) may add to its class logits a linear model
of those ids,

    logits_in(x) = sum over the pooled ids j of v_j W[j] + b        (W: vocab x classes)

with v_j = 1 (email.input_linear_weighting: binary), or (idf) v_j = idf_j / sqrt(sum over the row of
idf^2), idf_j kept as a buffer: a row's TF-IDF vector over its ids (binary tf: a row holds an id once).
W, b (and idf) are buffers, not parameters: the store's task fits them before training
(Task.before_training; e-mail: email/linear_fit.py) and they stay frozen. The recursion's own head
starts beside it and learns what it leaves; a resumed run reloads them with the rest.

Out of fold (email.input_linear_folds = K >= 2): the task also fits K models, each without one fold
of the training split, and a training step adds to each row the logits of the fit that did not see
it (stacking); evaluation and inference use the fit on the whole split. A row's fold is a hash of
its pooled ids (`fold_of`): the model reads it from the input alone, and identical rows share a fold.
"""

from __future__ import annotations

import torch

HASH_MULTIPLIER, HASH_PRIME = 2654435761, 2147483647  # a row's fold: sum of its ids' hashes, mod K

Features = "tuple[torch.Tensor, torch.Tensor] | torch.Tensor | None"  # idf, or (idf, use: 1 idf / 0 binary)


def values_of(ids: torch.Tensor, idf: Features) -> torch.Tensor:
    """(B, P) float32: each pooled position's feature: 0 for a pad (id 0), else 1 without idf, or the id's idf
    divided by the L2 norm of its row's idfs; with (idf, use), the one or the other by `use` (a 0-dim
    buffer: no branch on its value, so a compiled graph holds either choice)."""
    present = (ids != 0).float()
    if idf is None:
        return present
    idf, use = idf if isinstance(idf, tuple) else (idf, None)
    v = idf.float()[ids] * present
    v = v / v.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return v if use is None else torch.lerp(present, v, use.float())


def read(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, positions: int,
         idf: Features = None) -> torch.Tensor:
    """(B, C) float32: for each row of inputs, the sum of its pooled ids' rows of weight times their
    features (its last `positions` ids, pads left out), plus bias."""
    ids = inputs[:, -positions:].long()
    return (torch.nn.functional.embedding(ids, weight) * values_of(ids, idf).unsqueeze(-1)).sum(1) + bias


def fold_of(ids: torch.Tensor, folds: int) -> torch.Tensor:
    """(B,) int64 in 0..folds-1: each row's fold, a hash of its pooled ids (order does not matter, pads add 0)."""
    return ((ids.long() * HASH_MULTIPLIER) % HASH_PRIME).sum(1) % folds


def read_out_of_fold(inputs: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor, positions: int,
                     idf: Features = None) -> torch.Tensor:
    """As `read`, each row with the fit of its own fold's model (weights (K, vocab, C), biases (K, C)):
    the one fitted without the messages of that fold."""
    folds, vocab, classes = weights.shape
    ids = inputs[:, -positions:].long()
    fold = fold_of(ids, folds)
    rows = torch.nn.functional.embedding(ids + (fold * vocab).unsqueeze(1), weights.reshape(folds * vocab, classes))
    return (rows * values_of(ids, idf).unsqueeze(-1)).sum(1) + biases[fold]
