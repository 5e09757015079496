"""Losses of TRM training: stable-max cross-entropy and the ACT halting loss.

stable-max (Prieto et al., 2025, "Grokking at the edge of numerical stability"):
    s(x) = x + 1 for x >= 0, 1 / (1 - x) for x < 0;  p_i = s(x_i) / sum_j s(x_j)
computed in float64 as in the TRM reference. Token losses are averaged over a
sample's valid cells, summed over samples; the caller divides by the global
batch size so that micro-batching gives the same gradient.

model.loss=softmax (ours) uses the plain softmax cross-entropy instead, for a token head over thousands of
ids (e-mail pretraining, 8,185 of them): stable-max's tail 1/(1 - x) decays so slowly that every other id keeps
a share, and a masked-token model trained with it stalled at the ids' unigram loss (7.0 nats after 1,100
steps, 3.9% of masked tokens right; docs/results.md). The argmax, so every accuracy, is the same for both.

A head with fewer positions than the labels (a classifier: logits (B, 1, C)) is
scored on the first positions; a classify store labels position 0 only.
Optional label weights (train.class_weighting) scale each cell's loss by its
label's weight, so a rare class counts as much as a common one.

A head whose last ids stand for answer ids (a trace's tokens, `fold`: merge_logits) also takes *folded*
labels: a label id past the head's own ids, V + H + a, asks for answer id a under the fold, where the
step's own token is not known (an adapted maze's cells off the accepted path: "not the route", whichever
direction the search would hold there). It trains as the id among a and the trace ids folding into it that
the model itself ranks first (`own_member`), and it is right when the merged argmax is a.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def stablemax_s(x: torch.Tensor) -> torch.Tensor:
    # clamp: torch.where differentiates both branches, and 1/(1-x) at x = 1 (common for
    # bf16 logits) would put inf * 0 = NaN into the gradient
    return torch.where(x >= 0, x + 1, 1 / (1 - x.clamp(max=0)))


def log_stablemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    s = stablemax_s(x)
    return torch.log(s / s.sum(dim=dim, keepdim=True))


def log_probs(logits: torch.Tensor, kind: str = "stablemax") -> torch.Tensor:
    """Log-probabilities over the last dim under the loss's distribution (model.loss): stable-max in float64,
    or softmax in float32 (logsumexp is stable). What the loss trains, and what a policy drawn from the model
    samples (adapt/trrpg.py)."""
    if kind == "softmax":
        return F.log_softmax(logits.float(), dim=-1)
    return log_stablemax(logits.to(torch.float64), dim=-1)


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                            weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-cell loss (B, L); cells labelled IGNORE get 0; weights (V,) scale each label's cells."""
    return _label_nll(log_probs(logits, "stablemax"), labels, weights)


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                          weights: torch.Tensor | None = None) -> torch.Tensor:
    """As stablemax_cross_entropy, with the softmax."""
    return _label_nll(log_probs(logits, "softmax"), labels, weights)


def _label_nll(logp: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """-log p of each cell's label (B, L) from log-probabilities (B, L, V); IGNORE cells get 0."""
    valid = labels != IGNORE
    safe = torch.where(valid, labels, 0).long()
    picked = torch.gather(logp, -1, safe.unsqueeze(-1)).squeeze(-1)  # (B, L)
    if weights is not None:
        picked = picked * weights.to(picked.dtype)[safe]
    return torch.where(valid, -picked, torch.zeros_like(picked))


def merge_logits(logits: torch.Tensor, into: tuple[int, ...], kind: str = "stablemax") -> torch.Tensor:
    """(..., V + H) logits whose last H ids stand for answer ids `into` (H of them) -> (..., V) logits of
    the answer alone: each answer id's probability becomes its own plus that of the ids standing for it,
    exactly, under the loss's distribution (stable-max: s^-1 of the summed s; softmax: logsumexp).
    The argmax is then the answer's, and the loss on an answer label is the merged probability's."""
    if not into:
        return logits
    V = logits.shape[-1] - len(into)
    index = torch.tensor(into, device=logits.device)
    if kind == "softmax":
        x = logits.float()
        top = x.amax(-1, keepdim=True)  # logsumexp's shift: no overflow
        e = (x - top).exp()
        return e[..., :V].index_add(-1, index, e[..., V:]).log() + top
    s = stablemax_s(logits.to(torch.float64))
    total = s[..., :V].index_add(-1, index, s[..., V:])  # (..., V): s of each answer id, its trace ids added
    return torch.where(total >= 1, total - 1, 1 - 1 / total).to(torch.float32)  # s^-1


def act_loss(logits: torch.Tensor, labels: torch.Tensor, q_halt: torch.Tensor,
             halt_weight: float, weights: torch.Tensor | None = None, kind: str = "stablemax",
             done_labels: torch.Tensor | None = None, fold: tuple[int, ...] = ()
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Summed (not averaged) loss over the batch and per-sample statistics.

    labels: (B, L) with IGNORE for cells that carry no label; only the first
    logits.shape[1] positions are scored. weights: (V,) per-label loss weights or None.
    done_labels: the labels the halting head's target reads (B, L), when they differ from this step's
    (a trace, data.trace: halting means "the whole trace is done", not "this step's part is right").
    fold: the answer ids the head's last ids stand for (model.trace_ids), which folded labels are read under.
    Returns (loss_sum, stats) where stats hold per-sample tensors (no grad):
    correct cells, valid cells, exact (all valid cells right).
    """
    labels = labels[:, :logits.shape[1]]
    valid = labels != IGNORE
    counts = valid.sum(-1).clamp_min(1)  # (B,)
    cross_entropy = softmax_cross_entropy if kind == "softmax" else stablemax_cross_entropy
    plain, folded = split_folded(labels, logits.shape[-1], fold)
    merged = None
    if folded is not None:  # a trace's folded labels (module docstring)
        merged = merge_logits(logits.detach(), fold, kind)
        plain = torch.where(folded != IGNORE, own_member(logits.detach(), folded, fold), plain)
    token = cross_entropy(logits, plain, weights).sum(-1) / counts  # (B,)
    with torch.no_grad():
        n_right = cells_right(logits, labels, fold, merged).sum(-1)
        exact = n_right == valid.sum(-1)
        done = exact if done_labels is None else all_right(logits, done_labels[:, :logits.shape[1]], fold, kind)
    halt = F.binary_cross_entropy_with_logits(q_halt, done.to(q_halt.dtype), reduction="none")
    loss = token.sum() + halt_weight * halt.sum()
    stats = {"token_loss": token.detach(), "halt_loss": halt.detach(), "right": n_right,
             "valid": valid.sum(-1), "exact": exact, "q_halt": q_halt.detach()}
    return loss, stats


def all_right(logits: torch.Tensor, labels: torch.Tensor, fold: tuple[int, ...] = (),
              kind: str = "stablemax") -> torch.Tensor:
    """(B,) bool: every labelled cell's argmax is its label (a folded label's: the merged argmax)."""
    merged = merge_logits(logits, fold, kind) if fold and bool((labels >= logits.shape[-1]).any()) else None
    return (cells_right(logits, labels, fold, merged) | (labels == IGNORE)).all(-1)


def split_folded(labels: torch.Tensor, n_ids: int, fold: tuple[int, ...]
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the labels of the head's own ids, IGNORE elsewhere; the folded labels as answer ids, IGNORE elsewhere,
    or None where there are none) of labels (B, L) over a head of n_ids ids (module docstring)."""
    if not fold:  # no trace: nothing is folded, and the step's hot path does no more work
        return labels, None
    past = labels >= n_ids
    if not bool(past.any()):
        return labels, None
    ignore = torch.full_like(labels, IGNORE)
    return torch.where(past, ignore, labels), torch.where(past, labels - n_ids, ignore)


def own_member(logits: torch.Tensor, folded: torch.Tensor, fold: tuple[int, ...]) -> torch.Tensor:
    """(B, L) the id the model itself ranks first among those standing for each cell's folded answer id (the
    answer id and the trace ids folding into it): a folded label trains as that id, so the loss asks for
    the answer without moving the step's own token among its members (a summed probability would, under
    stable-max: every member with a positive logit gains alike, and a wave's direction would give way to
    " "). IGNORE cells get id 0."""
    V = logits.shape[-1] - len(fold)
    answer_of = torch.cat([torch.arange(V, device=logits.device), torch.tensor(fold, device=logits.device)])
    allowed = answer_of.view(1, 1, -1) == folded.clamp_min(0).unsqueeze(-1)  # (B, L, V + H)
    return logits.masked_fill(~allowed, float("-inf")).argmax(-1)


def cells_right(logits: torch.Tensor, labels: torch.Tensor, fold: tuple[int, ...] = (),
                merged: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L) bool: labelled cells whose argmax is their label; a folded label's, the merged logits' argmax."""
    plain, folded = split_folded(labels, logits.shape[-1], fold)
    right = (logits.argmax(-1) == plain) & (plain != IGNORE)
    if folded is not None and merged is not None:
        right |= (merged.argmax(-1) == folded) & (folded != IGNORE)
    return right
