"""What does the recursion add to email.input_linear? A run's test predictions against the fitted linear
model of the bag alone (the fit the run started from, read from its weights: class-balanced L2 logistic
regression on the training split's bag ids, email/linear_fit.py), on the same test messages, with a paired
bootstrap.

    python benchmarks/email_bag_linear.py --data data/email-tr-s32b1024 --run runs/email-tr-lin

The run must have been trained on --data with email.input_linear=true. `trmkit email baseline DATA --run RUN`
compares the same run with TF-IDF + logistic regression on every word of the message.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from trmkit import rundir
from trmkit.data.store import open_split
from trmkit.email import input_linear
from trmkit.tasks.classify.metrics import bootstrap_ci, summary_metrics


PART = "parts.0."  # the e-mail model's bag part (trmkit/email/parts.py)


def linear_alone(data: Path, run: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Test labels and the run's fitted linear model's test predictions (store row order), and the classes:
    the bag part's linear buffers in the run's final weights (the fit it started from, whatever features and C
    it chose), read alone."""
    train, test = open_split(data / "train"), open_split(data / "test")
    tensors = rundir.read_weights(rundir.path(run, rundir.WEIGHTS))  # under current names, runs from before too
    buffers = {name[len(PART):]: t for name, t in tensors.items() if name.startswith(PART)}
    if "linear_weight" not in buffers:
        raise SystemExit(f"{run}: its weights hold no fitted bag model (train with email.input_linear=true)")
    idf = (buffers["linear_idf"], buffers["linear_use_idf"]) if "linear_idf" in buffers else None
    inputs = torch.from_numpy(np.asarray(test.inputs).astype(np.int64))
    logits = input_linear.read(inputs, buffers["linear_weight"].float(), buffers["linear_bias"].float(),
                               train.meta.part_positions, idf)
    return np.asarray(test.labels)[:, 0].astype(np.int64), logits.argmax(1).numpy(), list(train.meta.classes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the e-mail store the run was trained on (built with --bag N)")
    p.add_argument("--run", required=True, help="a run trained with email.input_linear=true")
    args = p.parse_args()
    truth, alone, classes = linear_alone(Path(args.data), Path(args.run))
    trm = json.loads(rundir.path(args.run, rundir.CLASSIFICATION).read_text())
    rows = np.asarray(trm["rows"], dtype=np.int64)
    preds = np.empty(len(rows), np.int64)
    preds[rows] = trm["preds"]
    base = summary_metrics(truth, alone, classes)
    ci = bootstrap_ci(truth, preds, len(classes), other_pred=alone)
    print(f"test messages {len(truth)}")
    print(f"input_linear alone (no recursion): macro-F1 {base['macro_f1']:.4f}, accuracy {base['accuracy']:.4f}")
    print(f"the run (bag_linear + recursion): macro-F1 {trm['summary']['macro_f1']:.4f}, "
          f"accuracy {trm['summary']['accuracy']:.4f}")
    lo, hi = ci["macro_f1_difference"]
    print(f"run - alone: macro-F1 {trm['summary']['macro_f1'] - base['macro_f1']:+.4f}, 95% interval "
          f"{lo:+.4f} to {hi:+.4f} (paired bootstrap, {ci['rounds']} rounds); "
          f"{int((preds != alone).sum())} test messages labelled differently")


if __name__ == "__main__":
    main()
