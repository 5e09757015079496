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

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trmkit.email.prepare import message_text  # the text both sides read
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


def store_texts(data: Path, split: str) -> tuple[list[str], list[str]]:
    """(the texts both sides read, the labels) of one split of an e-mail store, from its messages.json."""
    records = _records(data, split)
    return _texts(records), [r["label"] for r in records]


def split_texts(data: Path, split: str) -> list[str]:
    """The texts of one split of an e-mail store, as the rival reads them; no label read."""
    return _texts(_records(data, split))


def _records(data: Path, split: str) -> list[dict]:
    from trmkit.config import ConfigError
    from trmkit.email.task import MESSAGES_FILE

    path = Path(data) / split / MESSAGES_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: {data} is not an e-mail store (build it with `trmkit data email`)")
    try:
        records = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not JSON ({err}): build the store again with `trmkit data email`") from err
    for i, r in enumerate(records):
        missing = [key for key in ("subject", "sender", "body") if not isinstance(r, dict) or key not in r]
        if missing:
            raise ConfigError(f"{path}: message {i} has no {missing[0]!r}: build the store again with "
                              "`trmkit data email`")
    return records


def _texts(records: list[dict]) -> list[str]:
    from trmkit.email.mail import Message

    return [message_text(Message(subject=r["subject"], sender=r["sender"], body=r["body"])) for r in records]


def both_baselines(data: Path, classes: Sequence[str]) -> dict:
    """`trmkit email baseline`'s rivals on a store: {"baseline", "baseline_balanced", "stronger"}, both fitted on
    the store's train/ (a --keep-labels store's: its K labelled messages per class alone) and scored on test/."""
    train_x, train_y = store_texts(data, "train")
    test_x, test_y = store_texts(data, "test")
    result = {"baseline": run_baseline(train_x, train_y, test_x, test_y, classes),
              "baseline_balanced": run_baseline(train_x, train_y, test_x, test_y, classes, class_weight="balanced")}
    result["stronger"] = max(("baseline", "baseline_balanced"), key=lambda k: result[k]["macro_f1"])
    return result


def rival_macro_f1(data: str, classes: tuple[str, ...]) -> tuple[float, str]:
    """(macro-F1, name) of the stronger of both_baselines on a store's test split: the figure a few-label run's summary
    and `trmkit email baseline --run` both print (computed once per store in a process, as long as its
    messages.json files are unchanged: a run evaluates often)."""
    from trmkit.email.task import MESSAGES_FILE

    stamps = tuple((Path(data) / name / MESSAGES_FILE).stat().st_mtime_ns for name in ("train", "test"))
    return _rival(data, classes, stamps)


@lru_cache(maxsize=8)
def _rival(data: str, classes: tuple[str, ...], stamps: tuple[int, ...]) -> tuple[float, str]:
    result = both_baselines(Path(data), list(classes))
    key = result["stronger"]
    return float(result[key]["macro_f1"]), RIVAL_NAMES[key]


RIVAL_NAMES = {"baseline": "TF-IDF + LR", "baseline_balanced": "TF-IDF + LR balanced"}


BELOW_BY = 0.01  # a few-label model further than this below its rival gets a warning


def rival_line(model: float, rival: float, name: str, labels: int | None) -> str:
    """The line a few-label run's end and `trmkit email baseline --run` both print: the model's test macro-F1
    beside its rival's on the same labels, a WARNING when it is more than BELOW_BY below."""
    on = f"the same {labels} labels" if labels else "the same labels"
    said = f"test macro-F1 {model:.4f} against {rival:.4f} for {name} fitted on {on} ({model - rival:+.4f})"
    if model < rival - BELOW_BY:
        return (f"WARNING: few labels: {said}: the model is more than {BELOW_BY:g} below the simplest rival; "
                "label more messages (`trmkit email label STORE`) or use the rival")
    return f"few labels: {said}"
