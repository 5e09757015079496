"""Metrics for any classification task: F1, confusion, calibration, and the evaluation scorer.

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

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from trmkit import rundir
from trmkit.files import write_json

ProbFn = Callable[..., np.ndarray]
# Keys under which a store's meta.json "build" section may list the class names, in this order.
CLASS_NAME_KEYS = ("class_names", "classes", "labels")


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


# ---------------------------------------------------------------- files


def read_classification(path: str | os.PathLike[str]) -> dict:
    """A classification.json written by ClassifyScorer.save, checked for the keys readers use."""
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in ("class_names", "summary", "ece", "reliability", "logits", "labels") if k not in data]
    if missing:
        raise ValueError(f"{path}: missing key(s) {missing}; write it again with ClassifyScorer.save "
                         "(evaluate the run again: `trmkit eval`)")
    return data


# ---------------------------------------------------------------- the scorer


def class_names_from_meta(build: Any) -> list[str] | None:
    """Class names listed in a store's meta.json "build" section (see CLASS_NAME_KEYS), else None."""
    if not isinstance(build, dict):
        return None
    for key in CLASS_NAME_KEYS:
        value = build.get(key)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return list(value)
    return None


class ClassifyScorer:
    """Accuracy, F1 and calibration of a classification task, fed batch by batch during evaluation.

    Each example's class id sits at label position 0 (the store's ignore id
    elsewhere); the model's prediction and logits for it are at position 0
    too. Class names: the argument, else the store's meta "classes", else
    its "build" section (CLASS_NAME_KEYS), else class_0..class_{C-1} from the
    logits' width. Probabilities are stable-max, as the model is trained.
    """

    needs_logits = True

    def __init__(self, split: Any, class_names: Sequence[str] | None = None, bins: int = 15) -> None:
        meta = getattr(split, "meta", None)
        self.class_names = list(class_names) if class_names is not None else \
            (list(getattr(meta, "classes", None) or []) or class_names_from_meta(getattr(meta, "build", None)))
        self.bins = bins
        path = getattr(split, "path", None)  # the validation split's answers go to their own file
        self.split_name = Path(path).name if path is not None else "test"
        self.logits: list[np.ndarray] = []  # (b, C) float64 per batch
        self.labels: list[np.ndarray] = []  # (b,) class ids
        self.preds: list[np.ndarray] = []  # (b,) class ids
        self.rows: list[np.ndarray] = []  # (b,) example rows in the split
        self.n = 0

    def add(self, batch: Any, preds: np.ndarray, q_halt: np.ndarray, logits: np.ndarray | None = None) -> None:
        """preds (b, L) or (b,) class ids, logits (b, L, C) or (b, C): position 0 is the class."""
        if logits is None:
            raise ValueError("ClassifyScorer needs the logits (needs_logits = True): the trainer's evaluate() "
                             "must pass logits= to scorers that ask for them")
        pred = np.asarray(preds)
        pred = pred[:, 0] if pred.ndim == 2 else pred  # (b,)
        z = np.asarray(logits, dtype=np.float64)
        z = z[:, 0, :] if z.ndim == 3 else z  # (b, C)
        label = np.asarray(batch.labels)[:, 0].astype(np.int64)  # (b,)
        if z.ndim != 2 or not len(pred) == len(z) == len(label):
            raise ValueError(f"batch of {len(label)} labels with preds {np.shape(preds)} and logits "
                             f"{np.shape(logits)}: expected preds (b, L), logits (b, L, C)")
        self._check_classes(z.shape[1], label, pred)
        rows = getattr(batch, "rows", None)
        self.rows.append(np.arange(self.n, self.n + len(label)) if rows is None else np.asarray(rows, np.int64))
        self.logits.append(z)
        self.labels.append(label)
        self.preds.append(pred.astype(np.int64))
        self.n += len(label)

    def _check_classes(self, width: int, label: np.ndarray, pred: np.ndarray) -> None:
        if self.class_names is None:
            self.class_names = [f"class_{i}" for i in range(width)]
        if width != len(self.class_names):
            raise ValueError(f"the model gives {width} logits per example but there are "
                             f"{len(self.class_names)} classes {self.class_names}; the head and the "
                             "store's class list disagree (rebuild the store or retrain)")
        _labels(label, f"labels at position 0 (rows {self.n}..{self.n + len(label) - 1} of the evaluation)",
                width)
        _labels(pred, "predictions at position 0", width)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(logits (n, C), labels (n,), preds (n,)) gathered so far."""
        width = len(self.class_names or [])
        if not self.logits:
            return np.zeros((0, width)), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(self.logits), np.concatenate(self.labels), np.concatenate(self.preds)

    def summary(self) -> dict:
        """summary_metrics, the ECE and the reliability bins of everything added."""
        logits, labels, preds = self.arrays()
        names = self.class_names or []
        if not names:  # nothing added and no class list: nothing to measure
            empty = {"n": 0, "accuracy": 0.0, "macro_f1": 0.0, "weighted_f1": 0.0, "class_names": [],
                     "per_class": {}, "confusion": []}
            return {"summary": empty, "ece": 0.0, "reliability": []}
        probs = stablemax_probs(logits) if len(logits) else np.zeros((0, len(names)))
        return {"summary": summary_metrics(labels, preds, names),
                "ece": expected_calibration_error(probs, labels, self.bins),
                "reliability": reliability_bins(probs, labels, self.bins)}

    def result(self) -> dict[str, float]:
        """Flat floats: accuracy, macro_f1, weighted_f1, ece, their standard errors se/accuracy and
        se/macro_f1, and f1/precision/recall per class."""
        s = self.summary()
        m = s["summary"]
        out = {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "weighted_f1": m["weighted_f1"],
               "ece": s["ece"]}
        _, labels, preds = self.arrays()  # standard errors, for train.best_margin=se
        out.update({f"se/{k}": v for k, v in bootstrap_se(labels, preds, len(self.class_names or [])).items()})
        for name in self.class_names or []:
            c = m["per_class"][name]
            out.update({f"f1/{name}": c["f1"], f"precision/{name}": c["precision"], f"recall/{name}": c["recall"]})
        return {k: float(v) for k, v in out.items()}

    def save(self, run_dir: str | os.PathLike[str]) -> Path:
        """RUN_DIR/classification.json (atomic): metrics, confusion, reliability, raw logits and labels.
        A validation split's go to classification-val.json (the calibration is fitted on them)."""
        logits, labels, preds = self.arrays()
        s = self.summary()
        data = {"class_names": list(self.class_names or []), "probability": "stablemax", "bins": self.bins,
                "summary": s["summary"], "ece": s["ece"], "reliability": s["reliability"],
                "rows": np.concatenate(self.rows).tolist() if self.rows else [],
                "labels": labels.tolist(), "preds": preds.tolist(), "logits": logits.tolist()}
        if len(labels):
            s["summary"]["ci95"] = bootstrap_ci(labels, preds, len(self.class_names or []))
        name = rundir.CLASSIFICATION if self.split_name != "val" else rundir.CLASSIFICATION_VAL
        path = write_json(rundir.path(run_dir, name), {"split": self.split_name, **data}, indent=None)
        if self.split_name != "val" and rundir.path(run_dir, rundir.CLASSIFICATION_VAL).is_file():
            calibrate(run_dir)
        return path


def calibrate(run_dir: str | os.PathLike[str]) -> dict:
    """Temperature scaling: T fitted on the validation split's logits (classification-val.json), ECE
    measured on the test split's (classification.json) at T = 1 and at the fitted T; written to
    RUN_DIR/calibration.json. Without a validation file T stays 1 (nothing is fitted on test)."""
    test = read_classification(rundir.path(run_dir, rundir.CLASSIFICATION))
    logits, labels = np.asarray(test["logits"], dtype=np.float64), np.asarray(test["labels"])
    out = {"temperature": 1.0, "fitted_on": "none",
           "ece_before": expected_calibration_error(stablemax_probs(logits), labels), "ece_after": None}
    val_file = rundir.path(run_dir, rundir.CLASSIFICATION_VAL)
    if val_file.is_file():
        val = read_classification(val_file)
        T = fit_temperature(np.asarray(val["logits"], dtype=np.float64), np.asarray(val["labels"]))
        out.update(temperature=float(T), fitted_on="val",
                   ece_after=expected_calibration_error(stablemax_probs(logits, T), labels),
                   nll_before=nll(stablemax_probs(logits), labels), nll_after=nll(stablemax_probs(logits, T), labels))
    write_json(rundir.path(run_dir, rundir.CALIBRATION), out, indent=None)
    return out
