"""The TF-IDF + logistic-regression baseline (trmkit/email/baseline.py), on toy text and on real Turkish spam."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from trmkit.email.baseline import message_text, run_baseline, stratified_split
from trmkit.tasks.classify.metrics import summary_metrics

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TURKISH = DATA / "email" / "turkish" / "trspam_v01.csv"


def read_turkish(path: Path) -> tuple[list[str], list[str], int]:
    """(texts, labels, junk rows skipped) of trspam_v01.csv (Text,Classification; UTF-8 with BOM).

    Some texts hold unquoted commas, so a row can have more than two fields: the label is the
    last field and the text the others joined by commas again (124 of the 825 messages)."""
    if not path.is_file():
        raise AssertionError(f"real data missing: {path} (the tests read ../shared/data from the repo root)")
    texts, labels, junk = [], [], 0
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == ["Text", "Classification"]
        for row in reader:
            if len(row) < 2 or row[-1] not in ("spam", "ham"):  # one labelled message is empty: kept
                junk += 1  # the last row is ",,496"
                continue
            texts.append(",".join(row[:-1]))
            labels.append(row[-1])
    return texts, labels, junk


def test_stratified_split_keeps_class_shares():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 20
    train, test = stratified_split(labels, 0.2, seed=0)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(100))
    y = np.array(labels)
    assert [int((y[test] == c).sum()) for c in "abc"] == [10, 6, 4]
    assert np.array_equal(stratified_split(labels, 0.2, seed=0)[1], test)  # seeded
    assert not np.array_equal(stratified_split(labels, 0.2, seed=1)[1], test)


def test_toy_baseline_uses_summary_metrics_and_names_bad_labels():
    spam = [f"win money now offer {i} click" for i in range(20)]
    ham = [f"meeting agenda notes project {i} team" for i in range(20)]
    texts, labels = spam + ham, ["spam"] * 20 + ["ham"] * 20
    train, test = stratified_split(labels, 0.25, seed=0)
    pick = lambda seq, rows: [seq[i] for i in rows]  # noqa: E731
    out = run_baseline(pick(texts, train), pick(labels, train), pick(texts, test), pick(labels, test),
                       ["ham", "spam"])
    assert out["accuracy"] == 1.0 and out["macro_f1"] == 1.0 and out["seconds"] > 0
    assert out["confusion"] == summary_metrics([0] * 5 + [1] * 5, [0] * 5 + [1] * 5, ["ham", "spam"])["confusion"]
    with pytest.raises(ValueError, match=r"test_labels\[1\] = 'eggs' is neither a class name"):
        run_baseline(texts, labels, texts[:2], ["spam", "eggs"], ["ham", "spam"])
    msg = SimpleNamespace(subject="Hello", sender="a@b.c", body="text")
    assert message_text(msg) == "Hello\na@b.c\ntext"


def test_turkish_spam_baseline_on_real_data():
    texts, labels, junk = read_turkish(TURKISH)
    assert len(texts) == 825 and junk == 1, (len(texts), junk)
    train, test = stratified_split(labels, 0.2, seed=0)
    pick = lambda seq, rows: [seq[i] for i in rows]  # noqa: E731
    out = run_baseline(pick(texts, train), pick(labels, train), pick(texts, test), pick(labels, test),
                       ["ham", "spam"], seed=0)
    print(f"Turkish trspam baseline: accuracy {out['accuracy']:.4f}, macro-F1 {out['macro_f1']:.4f}, "
          f"{out['n']} test messages, {out['features']} features, {out['seconds']:.1f} s")
    assert out["n"] == len(test) == 165
    assert out["macro_f1"] >= 0.90 and out["accuracy"] >= 0.90  # measured: 0.9146 and 0.9212
    # 165 test messages make one split's number noisy (seeds 0-4: macro-F1 0.915-0.955), so the mean too
    scores = [out["macro_f1"]]
    for seed in range(1, 5):
        train, test = stratified_split(labels, 0.2, seed=seed)
        scores.append(run_baseline(pick(texts, train), pick(labels, train), pick(texts, test), pick(labels, test),
                                   ["ham", "spam"], seed=seed)["macro_f1"])
    print(f"macro-F1 over seeds 0-4: {np.round(scores, 4).tolist()}, mean {np.mean(scores):.4f}")
    assert np.mean(scores) >= 0.92  # measured: 0.9366
