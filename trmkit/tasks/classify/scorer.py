"""The classify scorer and its files: ClassifyScorer (fed during evaluation, writes classification.json),
reading classification.json back, and the temperature calibration written beside it (calibration.json).

The numbers themselves are metrics.py's; this module adds the run directory's files (rundir.py names them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trmkit import rundir
from trmkit.files import write_json
from trmkit.tasks.classify.metrics import (
    _labels, bootstrap_ci, bootstrap_se, expected_calibration_error, fit_temperature, nll, reliability_bins,
    stablemax_probs, summary_metrics,
)

# Keys under which a store's meta.json "build" section may list the class names, in this order.
CLASS_NAME_KEYS = ("class_names", "classes", "labels")


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
