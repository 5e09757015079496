"""Classification metrics (tasks/classify/metrics.py), the evaluation scorer, and the e-mail task's report plots
(email/plots.py, drawn by `trmkit report` for a run whose data_meta.json names the task)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trmkit import cli
from trmkit.email.plots import classification_plots
from trmkit.model.losses import log_stablemax
from trmkit.report import write_report
from trmkit.tasks.classify.metrics import (
    _macro_f1_batch, bootstrap_ci, confusion_matrix, expected_calibration_error, fit_temperature, nll, per_class,
    reliability_bins, softmax_probs, stablemax_probs, summary_metrics,
)
from trmkit.tasks.classify.scorer import ClassifyScorer, read_classification

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAMES = ["a", "b", "c"]
# a small case worked by hand: class c is never predicted
Y_TRUE = [0, 0, 0, 1, 1, 2, 2]
Y_PRED = [0, 0, 1, 1, 0, 0, 1]


def _sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label per row drawn from its probabilities."""
    u = rng.random((len(probs), 1))
    return np.minimum((u > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1)


# ---------------------------------------------------------------- confusion and F1


def test_confusion_and_per_class_by_hand():
    cm = confusion_matrix(Y_TRUE, Y_PRED, 3)
    assert cm.tolist() == [[2, 1, 0], [1, 1, 0], [1, 1, 0]]  # rows true, columns predicted
    pc = per_class(cm, NAMES)
    assert pc["a"]["precision"] == pytest.approx(2 / 4) and pc["a"]["recall"] == pytest.approx(2 / 3)
    assert pc["a"]["f1"] == pytest.approx(4 / 7)
    assert pc["b"]["precision"] == pytest.approx(1 / 3) and pc["b"]["recall"] == pytest.approx(1 / 2)
    assert pc["b"]["f1"] == pytest.approx(0.4)
    # never predicted: precision is undefined and reported as 0 (so recall and F1 are 0 too)
    assert pc["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2, "predicted": 0}
    assert [pc[n]["support"] for n in NAMES] == [3, 2, 2]


def test_summary_metrics_by_hand_and_against_sklearn():
    s = summary_metrics(Y_TRUE, Y_PRED, NAMES)
    assert s["accuracy"] == pytest.approx(3 / 7)
    assert s["macro_f1"] == pytest.approx((4 / 7 + 0.4 + 0.0) / 3)
    assert s["weighted_f1"] == pytest.approx((4 / 7 * 3 + 0.4 * 2) / 7)
    assert s["confusion"] == [[2, 1, 0], [1, 1, 0], [1, 1, 0]] and s["n"] == 7
    # a class absent from both y_true and y_pred has no F1 and is left out of the macro average
    s4 = summary_metrics(Y_TRUE, Y_PRED, NAMES + ["d"])
    assert s4["macro_f1"] == pytest.approx(s["macro_f1"]) and s4["per_class"]["d"]["support"] == 0
    from sklearn.metrics import f1_score  # the same conventions as scikit-learn's defaults

    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 4, 500), rng.integers(0, 4, 500)
    p[p == 3] = 2  # class 3 never predicted
    s = summary_metrics(t, p, ["w", "x", "y", "z"])
    assert s["macro_f1"] == pytest.approx(f1_score(t, p, average="macro", zero_division=0))
    assert s["weighted_f1"] == pytest.approx(f1_score(t, p, average="weighted", zero_division=0))


def test_bootstrap_intervals_hold_the_point_estimate_and_the_paired_difference_its_sign():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    good = np.where(rng.random(400) < 0.9, y, (y + 1) % 3)  # 90% right
    bad = np.where(rng.random(400) < 0.6, y, (y + 1) % 3)  # 60% right
    ci = bootstrap_ci(y, good, 3, other_pred=bad, rounds=400)
    point = summary_metrics(y, good, NAMES)
    assert _macro_f1_batch(y[None], good[None], 3)[0] == pytest.approx(point["macro_f1"])
    assert _macro_f1_batch(np.array([Y_TRUE]), np.array([Y_PRED]), 3)[0] == pytest.approx(
        summary_metrics(Y_TRUE, Y_PRED, NAMES)["macro_f1"])  # a class never predicted counts
    assert ci["macro_f1"][0] <= point["macro_f1"] <= ci["macro_f1"][1]
    assert ci["accuracy"][0] <= point["accuracy"] <= ci["accuracy"][1] and ci["accuracy"][1] - ci["accuracy"][0] < 0.1
    assert 0 < ci["macro_f1_difference"][0] < ci["macro_f1_difference"][1]  # clearly better on this split
    same = bootstrap_ci(y, good, 3, other_pred=good, rounds=50)
    assert same["macro_f1_difference"] == [0.0, 0.0]
    assert summary_metrics(Y_TRUE, Y_PRED, NAMES)["small_classes"] == NAMES  # 3, 2 and 2 examples: all < 20


def test_bad_labels_are_named():
    with pytest.raises(ValueError, match=r"y_pred\[2\] = 3 is not a class id in 0..2"):
        confusion_matrix([0, 1, 2], [0, 1, 3], 3)
    with pytest.raises(ValueError, match="3 labels but y_pred has 2"):
        confusion_matrix([0, 1, 2], [0, 1], 3)


# ---------------------------------------------------------------- probabilities


def test_stablemax_matches_direct_float64_and_losses_py():
    logits = np.array([[2.0, -1.0, 0.0, -3.5], [0.25, 0.25, -0.5, 7.0]])
    p = stablemax_probs(logits)
    s = lambda x: x + 1 if x >= 0 else 1 / (1 - x)  # noqa: E731  (the definition, one value at a time)
    for row, out in zip(logits, p):
        direct = np.array([s(x) for x in row]) / sum(s(x) for x in row)
        np.testing.assert_allclose(out, direct, rtol=1e-15)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-15)
    torch_p = log_stablemax(torch.from_numpy(logits), dim=-1).exp().numpy()  # the training loss's own
    np.testing.assert_allclose(p, torch_p, rtol=1e-12)
    np.testing.assert_allclose(stablemax_probs(logits, 2.0), stablemax_probs(logits / 2.0))
    np.testing.assert_allclose(softmax_probs(logits).sum(axis=1), 1.0)
    np.testing.assert_allclose(softmax_probs([[0.0, np.log(3.0)]]), [[0.25, 0.75]])
    assert nll([[0.25, 0.75]], [1]) == pytest.approx(-np.log(0.75))
    with pytest.raises(ValueError, match="temperature must be a positive"):
        stablemax_probs(logits, 0.0)


# ---------------------------------------------------------------- calibration


def test_ece_of_calibrated_and_overconfident_predictions():
    rng = np.random.default_rng(1)
    logits = rng.normal(0.0, 2.0, (100_000, 4))
    probs = stablemax_probs(logits)
    y = _sample(probs, rng)  # labels drawn from the model's own probabilities: calibrated
    assert expected_calibration_error(probs, y) < 0.02
    sharp = stablemax_probs(logits * 4.0)  # the same ranking, far more confident
    assert expected_calibration_error(sharp, y) > 0.10  # measured 0.146 (stable-max sharpens slowly)
    bins = reliability_bins(sharp, y, bins=10)
    assert len(bins) == 10 and sum(b["count"] for b in bins) == len(y)
    assert bins[0]["count"] == 0 and bins[0]["accuracy"] is None  # 4 classes: confidence >= 0.25
    top = bins[-1]
    assert top["lo"] == 0.9 and top["confidence"] > 0.9 and top["accuracy"] < top["confidence"] - 0.1


def test_ece_by_hand():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    y = np.array([0, 1, 1, 0])
    # bins of 0.5: (0.5, 1.0] holds all four; confidence mean 0.75, accuracy 3/4 -> ECE 0
    assert expected_calibration_error(probs, y, bins=2) == pytest.approx(0.0)
    # bins of 0.1: {0.9: right}, {0.8: wrong}, {0.7: right}, {0.6: right}
    expected = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.7) + abs(1 - 0.6)) / 4
    assert expected_calibration_error(probs, y, bins=10) == pytest.approx(expected)


def test_fit_temperature_recovers_a_known_temperature():
    rng = np.random.default_rng(2)
    logits = rng.normal(0.0, 4.0, (20_000, 4))
    y = _sample(stablemax_probs(logits / 2.5), rng)
    t = fit_temperature(logits, y)
    assert abs(t - 2.5) / 2.5 < 0.10, t
    assert fit_temperature(logits, y) == t  # deterministic
    assert nll(stablemax_probs(logits, t), y) < nll(stablemax_probs(logits), y) - 0.05
    assert expected_calibration_error(stablemax_probs(logits, t), y) < 0.5 * expected_calibration_error(
        stablemax_probs(logits), y)
    soft_y = _sample(softmax_probs(logits / 0.5), rng)  # and an under-confident softmax model
    assert abs(fit_temperature(logits, soft_y, prob_fn=softmax_probs) - 0.5) / 0.5 < 0.10


# ---------------------------------------------------------------- the scorer


def _batches(rng: np.random.Generator, n: int, c: int, seq: int = 5, ignore: int = 0):
    """Fake evaluation batches: the class id at label position 0, the ignore id elsewhere."""
    logits = rng.normal(0.0, 2.0, (n, c))
    y = _sample(stablemax_probs(logits), rng)
    out, start = [], 0
    for size in (7, 13, n - 20):
        sl = slice(start, start + size)
        labels = np.full((size, seq), ignore, dtype=np.uint8)
        labels[:, 0] = y[sl]
        full = rng.normal(0.0, 1.0, (size, seq, c))
        full[:, 0, :] = logits[sl]
        batch = SimpleNamespace(labels=labels, rows=np.arange(start, start + size) + 100)
        out.append((batch, full.argmax(-1), np.zeros(size), full))
        start += size
    return out, logits, y


def test_scorer_matches_summary_metrics(tmp_path):
    rng = np.random.default_rng(3)
    batches, logits, y = _batches(rng, 200, 3)
    scorer = ClassifyScorer(split=None, class_names=NAMES)
    for batch, preds, q, full in batches:
        scorer.add(batch, preds, q, logits=full)
    got = scorer.result()
    want = summary_metrics(y, logits.argmax(1), NAMES)
    for key in ("accuracy", "macro_f1", "weighted_f1"):
        assert got[key] == pytest.approx(want[key])
    for name in NAMES:
        assert got[f"f1/{name}"] == pytest.approx(want["per_class"][name]["f1"])
        assert got[f"recall/{name}"] == pytest.approx(want["per_class"][name]["recall"])
    assert got["ece"] == pytest.approx(expected_calibration_error(stablemax_probs(logits), y))
    assert all(isinstance(v, float) for v in got.values())
    generic = {"loss", "cell_accuracy", "exact_accuracy", "act_steps", "samples", "blank_accuracy"}
    assert not generic & set(got)

    path = scorer.save(tmp_path)
    assert path == tmp_path / "classification.json" and not list(tmp_path.glob(".*tmp*"))
    data = read_classification(path)
    assert data["class_names"] == NAMES and data["labels"] == y.tolist()
    assert data["rows"] == list(range(100, 300))
    np.testing.assert_allclose(np.array(data["logits"]), logits)
    assert data["summary"]["confusion"] == want["confusion"] and data["ece"] == pytest.approx(got["ece"])


def test_scorer_save_is_atomic(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    batches, _, _ = _batches(rng, 40, 2)
    scorer = ClassifyScorer(None, ["ham", "spam"])
    for batch, preds, q, full in batches:
        scorer.add(batch, preds, q, logits=full)
    (tmp_path / "classification.json").write_text('{"old": true}')

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        scorer.save(tmp_path)
    assert json.loads((tmp_path / "classification.json").read_text()) == {"old": True}  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["classification.json"]  # no temporary left behind


def test_scorer_names_and_errors():
    split = SimpleNamespace(meta=SimpleNamespace(build={"class_names": ["ham", "spam"]}))
    scorer = ClassifyScorer(split)
    assert scorer.class_names == ["ham", "spam"] and scorer.result()["accuracy"] == 0.0
    batch = SimpleNamespace(labels=np.array([[1, 0], [0, 0]]), rows=None)
    with pytest.raises(ValueError, match="needs the logits"):
        scorer.add(batch, np.array([[1, 0], [0, 0]]), np.zeros(2))
    with pytest.raises(ValueError, match="3 logits per example but there are 2 classes"):
        scorer.add(batch, np.array([[1, 0], [0, 0]]), np.zeros(2), logits=np.zeros((2, 2, 3)))
    bad = SimpleNamespace(labels=np.array([[5, 0], [0, 0]]), rows=None)
    with pytest.raises(ValueError, match=r"position 0 .*\[0\] = 5 is not a class id"):
        scorer.add(bad, np.array([[1, 0], [0, 0]]), np.zeros(2), logits=np.zeros((2, 2, 2)))
    assert ClassifyScorer(SimpleNamespace(meta=SimpleNamespace(classes=("x", "y"), build={}))).class_names == ["x", "y"]
    unnamed = ClassifyScorer(None)  # no names anywhere: taken from the logits' width
    unnamed.add(batch, np.array([[1], [0]]), np.zeros(2), logits=np.array([[[0.0, 1.0]], [[1.0, 0.0]]]))
    assert unnamed.class_names == ["class_0", "class_1"] and unnamed.result()["accuracy"] == 1.0


# ---------------------------------------------------------------- the report


def _classification_run(tmp_path, calibrate: bool):
    run = tmp_path / "email-run"
    run.mkdir()
    records = [{"step": i, "time": 1.7e9 + i, "wall": float(i), "train/loss": 1.0 / i} for i in range(1, 6)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    rng = np.random.default_rng(5)
    batches, logits, y = _batches(rng, 300, 3)
    scorer = ClassifyScorer(None, ["easy-ham", "hard-ham", "spam"])
    for batch, preds, q, full in batches:
        scorer.add(batch, preds, q, logits=full * 3.0)  # over-confident, so calibration has work to do
    scorer.save(run)
    if calibrate:
        t = fit_temperature(logits * 3.0, y)
        (run / "calibration.json").write_text(json.dumps({
            "temperature": t, "ece_before": expected_calibration_error(stablemax_probs(logits * 3.0), y),
            "ece_after": expected_calibration_error(stablemax_probs(logits * 3.0, t), y)}))
    return run


@pytest.mark.parametrize("calibrate", [False, True])
def test_report_draws_confusion_and_reliability(tmp_path, calibrate):
    run = _classification_run(tmp_path, calibrate)
    written = write_report(run, plots=classification_plots)
    names = {p.name for p in written}
    assert {"confusion.png", "reliability.png", "report.md"} <= names
    for stem in ("confusion", "reliability"):
        data = (run / "report" / f"{stem}.png").read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 5_000
    md = (run / "report" / "report.md").read_text()
    assert "## Classification" in md and "| macro-F1 |" in md and "| hard-ham |" in md
    assert "![confusion](confusion.png)" in md and "![reliability](reliability.png)" in md
    assert ("ECE after temperature scaling" in md) == calibrate


def test_report_of_other_runs_has_no_classification(tmp_path):
    run = _classification_run(tmp_path, False)
    (run / "classification.json").unlink()
    names = {p.name for p in write_report(run, plots=classification_plots)}
    assert "confusion.png" not in names and "## Classification" not in (run / "report" / "report.md").read_text()


def test_the_report_command_takes_the_plots_from_the_runs_task(tmp_path, capsys):
    run = _classification_run(tmp_path, False)
    assert cli.main(["report", str(run)]) == 0  # no data_meta.json: the generic plots only
    assert "confusion.png" not in capsys.readouterr().out
    (run / "data_meta.json").write_text(json.dumps({"task": "email"}))
    assert cli.main(["report", str(run)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(run / "report" / "confusion.png") in printed and str(run / "report" / "reliability.png") in printed
    assert "## Classification" in (run / "report" / "report.md").read_text()
