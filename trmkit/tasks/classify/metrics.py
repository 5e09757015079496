"""Metrics for any classification task: F1, confusion, bootstrap, calibration (no files: scorer.py).

numpy only (no torch, no scikit-learn), so that the trainer's scorer, the
report's plots (trmkit/email/plots.py) and the TF-IDF baseline
(trmkit/email/baseline.py) all compute their numbers with the same code.

Probabilities. The TRM is trained with stable-max cross-entropy
(model/losses.py): s(x) = x + 1 for x >= 0, 1 / (1 - x) for x < 0, and
p_i = s(x_i) / sum_j s(x_j). Its confidence is therefore read with
`stablemax_probs`, not softmax; `softmax_probs` is there for models trained
with ordinary cross-entropy. Temperature scaling divides the logits by T
before either function; `fit_temperature` picks T by minimising the
negative log-likelihood (Guo et al., 2017, "On calibration of modern neural
networks"), with a deterministic 1-D search on log T.

Conventions where a number is undefined (the same as scikit-learn's
``zero_division=0`` and its default label set):
- precision of a class that is never predicted is 0; recall of a class
  with no true examples is 0; F1 is 0 when precision + recall is 0;
- macro-F1 averages over the classes that occur in y_true or y_pred (a
  class absent from both has no defined F1 and is left out rather than
  counted as 0); weighted-F1 weights each class's F1 by its support;
- ECE is top-label: the predicted class's probability against whether it
  was right, in `bins` equal-width bins (lo, hi] over [0, 1] (a confidence
  of exactly 0 goes to the first bin); empty bins add nothing and are
  reported with count 0 and confidence/accuracy None.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

ProbFn = Callable[..., np.ndarray]


# ---------------------------------------------------------------- probabilities


def _logits_2d(logits: Any, temperature: float) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"logits must be (n, C) with C >= 1, got shape {x.shape}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    return x / temperature


def stablemax_probs(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """(n, C) logits -> (n, C) stable-max probabilities in float64 (mirror of model/losses.py)."""
    x = _logits_2d(logits, temperature)
    s = np.where(x >= 0, x + 1.0, 1.0 / (1.0 - np.minimum(x, 0.0)))  # (n, C), all > 0
    return s / s.sum(axis=1, keepdims=True)


def softmax_probs(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """(n, C) logits -> (n, C) softmax probabilities in float64 (max subtracted for stability)."""
    x = _logits_2d(logits, temperature)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


PROB_FNS: dict[str, ProbFn] = {"stablemax": stablemax_probs, "softmax": softmax_probs}


def _labels(y: Any, name: str, num_classes: int | None = None) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D class ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.mod(arr, 1) == 0):
            raise ValueError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if num_classes is not None and arr.size:
        bad = np.flatnonzero((arr < 0) | (arr >= num_classes))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name}[{i}] = {arr[i]} is not a class id in 0..{num_classes - 1} "
                             f"({bad.size} such entries); check the label map and the number of classes")
    return arr


def _probs_and_labels(probs: Any, y_true: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"probs must be (n, C), got shape {p.shape}")
    y = _labels(y_true, "y_true", p.shape[1])
    if len(y) != len(p):
        raise ValueError(f"probs has {len(p)} rows but y_true has {len(y)} labels")
    return p, y


def nll(probs: np.ndarray, y_true: np.ndarray) -> float:
    """Mean negative log-probability of the true class (probabilities floored at 1e-300)."""
    p, y = _probs_and_labels(probs, y_true)
    if len(y) == 0:
        return 0.0
    picked = p[np.arange(len(y)), y]
    return float(-np.mean(np.log(np.maximum(picked, 1e-300))))


# ---------------------------------------------------------------- confusion and F1


def confusion_matrix(y_true: Any, y_pred: Any, num_classes: int) -> np.ndarray:
    """(C, C) int64 counts: rows are true classes, columns predicted classes."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    t = _labels(y_true, "y_true", num_classes)
    p = _labels(y_pred, "y_pred", num_classes)
    if len(t) != len(p):
        raise ValueError(f"y_true has {len(t)} labels but y_pred has {len(p)}")
    flat = np.bincount(t * num_classes + p, minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes).astype(np.int64)


def per_class(cm: np.ndarray, class_names: Sequence[str]) -> dict[str, dict]:
    """Precision, recall, F1 and support per class from a confusion matrix (0 where undefined)."""
    cm = np.asarray(cm, dtype=np.int64)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1] or cm.shape[0] != len(class_names):
        raise ValueError(f"confusion matrix {cm.shape} does not match {len(class_names)} class names")
    if len(set(class_names)) != len(class_names):
        raise ValueError(f"class names must be distinct, got {list(class_names)}")
    out = {}
    for i, name in enumerate(class_names):
        tp, predicted, support = int(cm[i, i]), int(cm[:, i].sum()), int(cm[i, :].sum())
        precision = tp / predicted if predicted else 0.0  # never predicted: 0 by convention
        recall = tp / support if support else 0.0  # no true examples: 0 by convention
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[str(name)] = {"precision": precision, "recall": recall, "f1": f1, "support": support,
                          "predicted": predicted}
    return out


def summary_metrics(y_true: Any, y_pred: Any, class_names: Sequence[str]) -> dict:
    """accuracy, macro_f1, weighted_f1, per_class, confusion (list of lists), n."""
    names = [str(c) for c in class_names]
    cm = confusion_matrix(y_true, y_pred, len(names))
    classes = per_class(cm, names)
    n = int(cm.sum())
    present = [c for c in classes.values() if c["support"] or c["predicted"]]  # see the module docstring
    macro = float(np.mean([c["f1"] for c in present])) if present else 0.0
    weighted = sum(c["f1"] * c["support"] for c in classes.values()) / n if n else 0.0
    return {"n": n, "accuracy": float(np.trace(cm)) / n if n else 0.0, "macro_f1": macro,
            "weighted_f1": float(weighted), "class_names": names, "per_class": classes,
            "confusion": cm.tolist(),
            "small_classes": [c for c, v in classes.items() if 0 < v["support"] < SMALL_CLASS]}


# ---------------------------------------------------------------- how sure: the bootstrap

SMALL_CLASS = 20  # test examples under which a class's F1 moves by tens of points between splits
BOOTSTRAP_ROUNDS = 1000


def _macro_f1_batch(t: np.ndarray, p: np.ndarray, num_classes: int) -> np.ndarray:
    """Macro-F1 of each row of (R, n) true / predicted ids, as summary_metrics counts it (classes
    with neither support nor predictions left out)."""
    rounds = t.shape[0]
    offset = (np.arange(rounds) * num_classes * num_classes)[:, None]
    cm = np.bincount((offset + t * num_classes + p).ravel(), minlength=rounds * num_classes ** 2)
    cm = cm.reshape(rounds, num_classes, num_classes)
    tp = np.diagonal(cm, axis1=1, axis2=2).astype(float)
    support, predicted = cm.sum(2).astype(float), cm.sum(1).astype(float)
    f1 = np.divide(2 * tp, support + predicted, out=np.zeros_like(tp), where=(support + predicted) > 0)
    present = (support + predicted) > 0
    return (f1 * present).sum(1) / np.maximum(present.sum(1), 1)


RESAMPLE_CELLS = 1 << 24  # example indices a bootstrap holds at once (128 MB), whatever the split's size


def _resample(t: np.ndarray, preds: list[np.ndarray], num_classes: int, rounds: int,
              seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(accuracy of preds[0], [macro-F1 of each of preds]) on each of `rounds` resamples of the
    examples, the same resamples for every prediction; drawn in chunks, the same draws as at once."""
    rng, chunk = np.random.default_rng(seed), max(1, RESAMPLE_CELLS // len(t))
    acc, f1 = [], [[] for _ in preds]
    for start in range(0, rounds, chunk):
        idx = rng.integers(0, len(t), size=(min(chunk, rounds - start), len(t)))
        acc.append((t[idx] == preds[0][idx]).mean(1))
        for scores, p in zip(f1, preds):
            scores.append(_macro_f1_batch(t[idx], p[idx], num_classes))
    return np.concatenate(acc), [np.concatenate(scores) for scores in f1]


def bootstrap_ci(y_true: Any, y_pred: Any, num_classes: int, other_pred: Any = None,
                 rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0, level: float = 0.95) -> dict:
    """Percentile intervals of accuracy and macro-F1 over `rounds` resamples of the test examples;
    with `other_pred` (another model's predictions on the same examples) also the paired difference
    of macro-F1 (this minus other), resampled together: is one really better on this split?"""
    t, p = _labels(y_true, "y_true", num_classes), _labels(y_pred, "y_pred", num_classes)
    if len(t) == 0:
        return {}
    others = [] if other_pred is None else [_labels(other_pred, "other_pred", num_classes)]
    acc, f1 = _resample(t, [p, *others], num_classes, rounds, seed)
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    out = {"level": level, "rounds": rounds,
           "macro_f1": np.percentile(f1[0], [lo, hi]).tolist(),
           "accuracy": np.percentile(acc, [lo, hi]).tolist()}
    if others:
        out["macro_f1_difference"] = np.percentile(f1[0] - f1[1], [lo, hi]).tolist()
    return out


def bootstrap_se(y_true: Any, y_pred: Any, num_classes: int, rounds: int = BOOTSTRAP_ROUNDS,
                 seed: int = 0) -> dict[str, float]:
    """Standard errors of accuracy and macro-F1 on these examples: the standard deviation over
    `rounds` resamples (how far the score of another split of this size could move)."""
    t, p = _labels(y_true, "y_true", num_classes), _labels(y_pred, "y_pred", num_classes)
    if len(t) == 0:
        return {"accuracy": 0.0, "macro_f1": 0.0}
    acc, (f1,) = _resample(t, [p], num_classes, rounds, seed)
    return {"accuracy": float(acc.std()), "macro_f1": float(f1.std())}


# ---------------------------------------------------------------- calibration


def _top_label(probs: Any, y_true: Any, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence (n,), correct (n,), bin index (n,)) for top-label calibration."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    p, y = _probs_and_labels(probs, y_true)
    confidence = p.max(axis=1) if len(p) else np.zeros(0)
    correct = (p.argmax(axis=1) == y) if len(p) else np.zeros(0, dtype=bool)
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)  # bins (lo, hi]
    return confidence, correct, index


def reliability_bins(probs: np.ndarray, y_true: np.ndarray, bins: int = 15) -> list[dict]:
    """Per equal-width bin: lo, hi, count, mean confidence, accuracy (None for an empty bin)."""
    confidence, correct, index = _top_label(probs, y_true, bins)
    count = np.bincount(index, minlength=bins)
    conf_sum = np.bincount(index, weights=confidence, minlength=bins)
    right = np.bincount(index, weights=correct.astype(np.float64), minlength=bins)
    out = []
    for b in range(bins):
        k = int(count[b])
        out.append({"lo": b / bins, "hi": (b + 1) / bins, "count": k,
                    "confidence": float(conf_sum[b] / k) if k else None,
                    "accuracy": float(right[b] / k) if k else None})
    return out


def expected_calibration_error(probs: np.ndarray, y_true: np.ndarray, bins: int = 15) -> float:
    """Top-label ECE: sum over bins of (bin count / n) * |accuracy - mean confidence|."""
    table = reliability_bins(probs, y_true, bins)
    n = sum(b["count"] for b in table)
    if n == 0:
        return 0.0
    return float(sum(b["count"] / n * abs(b["accuracy"] - b["confidence"]) for b in table if b["count"]))


def fit_temperature(logits: np.ndarray, y_true: np.ndarray, prob_fn: ProbFn = stablemax_probs,
                    lo: float = 0.05, hi: float = 20.0) -> float:
    """The T in [lo, hi] that minimises NLL(prob_fn(logits / T), y_true); deterministic.

    A grid of 121 points on log T finds the best bracket (the NLL in T need not
    be convex for stable-max), then golden-section search refines inside it to
    a relative precision of about 1e-6.
    """
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    x = np.asarray(logits, dtype=np.float64)
    _probs_and_labels(x, y_true)  # shape and label checks, with clear messages
    if len(x) == 0:
        raise ValueError("fit_temperature needs at least one example")

    def loss(log_t: float) -> float:
        return nll(prob_fn(x, float(np.exp(log_t))), y_true)

    grid = np.linspace(np.log(lo), np.log(hi), 121)
    values = [loss(g) for g in grid]
    best = int(np.argmin(values))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss(c), loss(d)
    while b - a > 1e-6:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(d)
    candidates = [(values[best], grid[best]), (fc, c), (fd, d)]  # never worse than the grid's best
    return float(np.exp(min(candidates)[1]))
