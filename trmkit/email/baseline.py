"""The baseline a TRM e-mail classifier has to beat: TF-IDF + logistic regression (scikit-learn).

Settings are fixed, not tuned on the test split: word 1-2-grams, lowercase,
sublinear tf, min_df=2; LogisticRegression with C=10, max_iter=2000, no class
weights. `trmkit email baseline` also runs it with class_weight="balanced" (the
weighting the e-mail presets train the TRM with), which was the stronger of the
two on all three corpora measured (docs/results.md): the bar a
TRM has to clear is the better of the two. The text is what the TRM sees, subject + sender + body
(`message_text`). The numbers come from `tasks.classify.metrics.summary_metrics`, the
same code that scores the TRM, so the two sides are comparable line by line.

Numbers, stratified 80/20 split (`stratified_split`), seed 0:
- Turkish trspam, all 825 labelled rows, text only: accuracy 0.921, macro-F1
  0.915 (seeds 0-4: macro-F1 0.915-0.955, mean 0.937); tests/email/test_baseline.py
  runs this. Another split gave 0.969 / 0.965: with 165 test messages one split
  moves macro-F1 by several points.
- SpamAssassin easy-ham/hard-ham/spam, exact-duplicate bodies removed: a
  measurement on 5,951 messages gave accuracy 0.982, macro-F1 0.932,
  hard-ham F1 0.822; with a rough stdlib parser (5,799 messages) this module
  gave 0.978 / 0.916 / 0.785. Hard-ham has about 50 test messages, so its F1
  is the noisiest number.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from trmkit.email.prepare import message_text  # noqa: F401 (the text both sides read)
from trmkit.tasks.classify.metrics import bootstrap_ci, summary_metrics

SETTINGS = {"ngram_range": (1, 2), "sublinear_tf": True, "min_df": 2, "lowercase": True,
            "C": 10.0, "max_iter": 2000, "class_weight": None}


def stratified_split(labels: Sequence[Any], test_fraction: float = 0.2, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices, sorted: round(test_fraction * count) rows of each class go to test."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    test = []
    for cls in np.unique(y):  # sorted, so the draw does not depend on row order of first sightings
        rows = np.flatnonzero(y == cls)
        test.append(rng.permutation(rows)[: int(round(test_fraction * len(rows)))])
    test_rows = np.sort(np.concatenate(test)) if test else np.zeros(0, np.int64)
    train_rows = np.setdiff1d(np.arange(len(y)), test_rows)
    return train_rows, test_rows


def _class_ids(labels: Sequence[Any], class_names: Sequence[str], name: str) -> np.ndarray:
    """Labels given as class ids or as class names -> ids; an unknown one names its index."""
    index = {str(c): i for i, c in enumerate(class_names)}
    out = np.empty(len(labels), dtype=np.int64)
    for i, label in enumerate(labels):
        if isinstance(label, (int, np.integer)) and 0 <= int(label) < len(class_names):
            out[i] = int(label)
        elif str(label) in index:
            out[i] = index[str(label)]
        else:
            raise ValueError(f"{name}[{i}] = {label!r} is neither a class name in {list(class_names)} "
                             f"nor a class id in 0..{len(class_names) - 1}")
    return out


def run_baseline(train_texts: Sequence[str], train_labels: Sequence[Any], test_texts: Sequence[str],
                 test_labels: Sequence[Any], class_names: Sequence[str], seed: int = 0,
                 class_weight: str | None = SETTINGS["class_weight"]) -> dict:
    """Fit on train, score test: summary_metrics of the test split plus "seconds" (fit + predict).
    class_weight: None (SETTINGS) or "balanced" (each class weighted by N / (K x count))."""
    if class_weight not in (None, "balanced"):
        raise ValueError(f"class_weight={class_weight!r}: use None or 'balanced'")
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError as err:
        raise ImportError("the TF-IDF baseline needs scikit-learn: pip install 'trmkit[test]'") from err
    if len(train_texts) != len(train_labels) or len(test_texts) != len(test_labels):
        raise ValueError(f"texts and labels differ in length: train {len(train_texts)} vs {len(train_labels)}, "
                         f"test {len(test_texts)} vs {len(test_labels)}")
    y_train = _class_ids(train_labels, class_names, "train_labels")
    y_test = _class_ids(test_labels, class_names, "test_labels")
    if len(np.unique(y_train)) < 2:
        raise ValueError(f"the training split holds {len(np.unique(y_train))} class(es); a classifier needs 2+")
    t0 = time.perf_counter()
    vectorizer = TfidfVectorizer(ngram_range=SETTINGS["ngram_range"], sublinear_tf=SETTINGS["sublinear_tf"],
                                 min_df=SETTINGS["min_df"], lowercase=SETTINGS["lowercase"])
    x_train = vectorizer.fit_transform(list(train_texts))
    model = LogisticRegression(C=SETTINGS["C"], max_iter=SETTINGS["max_iter"],
                               class_weight=class_weight, random_state=seed)
    model.fit(x_train, y_train)
    pred = model.predict(vectorizer.transform(list(test_texts)))
    seconds = time.perf_counter() - t0
    result = summary_metrics(y_test, pred, class_names)
    result.update(ci95=bootstrap_ci(y_test, pred, len(class_names)), preds=pred.tolist())
    result.update(seconds=seconds, features=len(vectorizer.vocabulary_), train=len(y_train),
                  settings={**SETTINGS, "ngram_range": list(SETTINGS["ngram_range"]), "seed": seed,
                            "class_weight": class_weight})
    return result
