"""The e-mail task's report plots: a confusion matrix, a reliability diagram and a Markdown section.

`trmkit report RUN` draws what every run wrote (report.py) and asks the run's task for its own
plots (Task.plots); for a classifier run these are:
- confusion.png: annotated counts, rows the true class, columns the predicted one;
- reliability.png: accuracy against confidence per bin, the diagonal, bin counts underneath;
- a "Classification" section of report.md: the metrics, per-class table and confusion.

They are drawn when RUN_DIR/classification.json exists (written by tasks.classify.scorer.ClassifyScorer.save).
RUN_DIR/calibration.json, when present, holds {"temperature": T, "ece_before": .., "ece_after": ..}
and adds the temperature-scaled curve to the reliability diagram. matplotlib is imported inside
the drawing functions; `report.write_report` has set the Agg backend before calling them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trmkit import rundir
from trmkit.files import write_figure
from trmkit.tasks.classify.metrics import PROB_FNS, expected_calibration_error, reliability_bins
from trmkit.tasks.classify.scorer import read_classification


def classification_plots(run_dir: Path, out_dir: Path) -> tuple[list[Path], str]:
    """(confusion.png and reliability.png written to out_dir, the Markdown section) of a classifier
    run; ([], "") for a run without classification.json."""
    found = _read_classification_run(Path(run_dir))
    return _classification_figures(found, Path(out_dir)), _classification_markdown(found)


def _read_classification_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(classification.json, calibration.json or {}) of a classification run; None for other runs."""
    path = rundir.path(run_dir, rundir.CLASSIFICATION)
    if not path.is_file():
        return None
    calibration_file = rundir.path(run_dir, rundir.CALIBRATION)
    calibration = json.loads(calibration_file.read_text()) if calibration_file.is_file() else {}
    if calibration and not isinstance(calibration.get("temperature"), (int, float)):
        raise ValueError(f"{calibration_file}: needs a numeric \"temperature\" key, "
                         f"got keys {sorted(calibration)}; write it again or delete it")
    return read_classification(path), calibration


def _calibrated_bins(data: Mapping[str, Any], temperature: float) -> tuple[list[dict], float]:
    """Reliability bins and ECE of the saved logits divided by `temperature`."""
    prob_fn = PROB_FNS[data.get("probability", "stablemax")]
    bins = int(data.get("bins") or len(data["reliability"]) or 15)
    logits = np.asarray(data["logits"], dtype=np.float64).reshape(len(data["labels"]), -1)
    probs = prob_fn(logits, temperature)
    return reliability_bins(probs, data["labels"], bins), expected_calibration_error(probs, data["labels"], bins)


def _number(value: Any, default: float) -> float:
    """value when it is a number (calibration.json may lack a key or hold null), else default."""
    return float(value) if isinstance(value, (int, float)) else default


def _plot_confusion(data: Mapping[str, Any], out_dir: Path) -> Path:
    """confusion.png: annotated counts, rows the true class, columns the predicted one."""
    import matplotlib.pyplot as plt

    names = list(data["class_names"])
    summary = data["summary"]
    cm = np.asarray(summary["confusion"], dtype=np.int64).reshape(len(names), len(names))
    side = 2.5 + 0.9 * len(names)
    fig, ax = plt.subplots(figsize=(side + 1.0, side))
    image = ax.imshow(cm, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    threshold = cm.max() / 2 if cm.size and cm.max() else 0.5
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                    color="white" if cm[i, j] > threshold else "black")
    ax.set_xticks(range(len(names)), names, rotation=45 if max(map(len, names), default=0) > 6 else 0,
                  ha="right" if max(map(len, names), default=0) > 6 else "center")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"Confusion (n={int(cm.sum())}): accuracy {summary['accuracy']:.3f}, "
                 f"macro-F1 {summary['macro_f1']:.3f}", fontsize=10)
    fig.tight_layout()
    path = out_dir / "confusion.png"
    write_figure(path, fig, dpi=100)
    plt.close(fig)
    return path


def _reliability_series(ax, bins: Sequence[Mapping[str, Any]], label: str, style: str) -> None:
    kept = [b for b in bins if b["count"]]
    ax.plot([b["confidence"] for b in kept], [b["accuracy"] for b in kept], style, label=label, markersize=4)


def _plot_reliability(data: Mapping[str, Any], calibration: Mapping[str, Any], out_dir: Path) -> Path:
    """reliability.png: accuracy against confidence per bin, the diagonal, bin counts underneath."""
    import matplotlib.pyplot as plt

    before = data["reliability"]
    fig, (ax, counts) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, gridspec_kw={"height_ratios": (3, 1)})
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
    _reliability_series(ax, before, "before", "o-")
    title = f"Reliability: ECE {_number(calibration.get('ece_before'), data['ece']):.3f}"
    width = [b["hi"] - b["lo"] for b in before]
    counts.bar([b["lo"] for b in before], [b["count"] for b in before], width=width, align="edge",
               alpha=0.5, label="before", edgecolor="C0")
    if calibration and data["labels"]:
        t = float(calibration["temperature"])
        after, ece_after = _calibrated_bins(data, t)
        _reliability_series(ax, after, f"after (T={t:.3g})", "s-")
        counts.step([b["lo"] for b in after] + [1.0], [b["count"] for b in after] + [after[-1]["count"]],
                    where="post", color="C1", label="after")
        title += f" before, {_number(calibration.get('ece_after'), ece_after):.3f} after temperature T={t:.3g}"
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    counts.set_xlabel("confidence (top-label probability)")
    counts.set_ylabel("examples")
    counts.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = out_dir / "reliability.png"
    write_figure(path, fig, dpi=100)
    plt.close(fig)
    return path


def _classification_figures(found: tuple[dict, dict] | None, out_dir: Path) -> list[Path]:
    if found is None:
        return []
    data, calibration = found
    return [_plot_confusion(data, out_dir), _plot_reliability(data, calibration, out_dir)]


def _classification_markdown(found: tuple[dict, dict] | None) -> str:
    """The "Classification" section of report.md ("" for other runs)."""
    if found is None:
        return ""
    data, calibration = found
    s = data["summary"]
    rows = [("examples", s["n"]), ("accuracy", f"{s['accuracy']:.4f}"), ("macro-F1", f"{s['macro_f1']:.4f}"),
            ("weighted-F1", f"{s['weighted_f1']:.4f}"), ("ECE (stable-max, top label)", f"{data['ece']:.4f}")]
    if calibration:
        after = calibration.get("ece_after")
        rows += [("temperature", f"{float(calibration['temperature']):.4g}"),
                 ("ECE after temperature scaling",
                  f"{after:.4f}" if isinstance(after, (int, float)) else "-")]
    lines = ["## Classification", "", "| metric | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "| class | precision | recall | F1 | support |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {c['precision']:.4f} | {c['recall']:.4f} | {c['f1']:.4f} | {c['support']} |"
              for name, c in s["per_class"].items()]
    names = list(data["class_names"])
    lines += ["", "Confusion (rows true, columns predicted):", "",
              "| true \\ predicted | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(str(v) for v in row) + " |" for name, row in zip(names, s["confusion"])]
    few = s.get("few_labels")  # a --keep-labels store: the rival on the same labels (email/guard.py)
    if few:
        from trmkit.email.baseline import rival_line

        lines += ["", rival_line(few["model_macro_f1"], few["rival_macro_f1"], few["rival"], few["labels"])]
        lines += [f"The few-label guard chose {few['guard']['name']}: {few['guard']['reason']}"] if few["guard"] else []
    return "\n".join(lines + [""])
