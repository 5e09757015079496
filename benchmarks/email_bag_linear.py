"""What does the recursion add to model.bag_linear? A run's test predictions against the fitted linear
model of the bag alone (the same fit the run started from: class-balanced L2 logistic regression on the
training split's bag ids, model/bag_linear.py), on the same test messages, with a paired bootstrap.

    python benchmarks/email_bag_linear.py --data data/email-tr-s32b1024 --run runs/email-tr-lin

The run must have been trained on --data with model.bag_linear=true. `trmkit email baseline DATA --run RUN`
compares the same run with TF-IDF + logistic regression on every word of the message.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from trmkit import rundir
from trmkit.config import ModelConfig
from trmkit.data.store import open_split
from trmkit.model import bag_linear
from trmkit.tasks.classify import bootstrap_ci, summary_metrics


class _Linear(torch.nn.Module):
    """Just the buffers bag_linear.fit fills."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("bag_linear_weight", torch.zeros(cfg.vocab_size, cfg.num_classes))
        self.register_buffer("bag_linear_bias", torch.zeros(cfg.num_classes))


def linear_alone(data: Path, c: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Test labels and the fitted linear model's test predictions (store row order), and the classes."""
    train, test = open_split(data / "train"), open_split(data / "test")
    classes = list(train.meta.classes)
    labels = np.asarray(train.labels)[:, 0]
    weights = torch.tensor(len(labels) / (len(classes) * np.bincount(labels, minlength=len(classes))))
    cfg = ModelConfig(vocab_size=train.meta.vocab_size, seq_len=train.meta.seq_len, num_classes=len(classes),
                      bag_positions=train.meta.bag_positions, puzzle_emb_len=0, bag_linear=True, bag_linear_c=c)
    model = _Linear(cfg)
    bag_linear.fit(model, train.inputs, train.labels, weights, c)
    inputs = torch.from_numpy(np.asarray(test.inputs).astype(np.int64))
    logits = bag_linear.read(inputs, model.bag_linear_weight, model.bag_linear_bias, cfg.bag_positions)
    return np.asarray(test.labels)[:, 0].astype(np.int64), logits.argmax(1).numpy(), classes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the e-mail store the run was trained on (built with --bag N)")
    p.add_argument("--run", required=True, help="a run trained with model.bag_linear=true")
    p.add_argument("--c", type=float, default=1.0, help="model.bag_linear_c of the run")
    args = p.parse_args()
    truth, alone, classes = linear_alone(Path(args.data), args.c)
    trm = json.loads(rundir.path(args.run, rundir.CLASSIFICATION).read_text())
    rows = np.asarray(trm["rows"], dtype=np.int64)
    preds = np.empty(len(rows), np.int64)
    preds[rows] = trm["preds"]
    base = summary_metrics(truth, alone, classes)
    ci = bootstrap_ci(truth, preds, len(classes), other_pred=alone)
    print(f"test messages {len(truth)}")
    print(f"bag_linear alone (no recursion): macro-F1 {base['macro_f1']:.4f}, accuracy {base['accuracy']:.4f}")
    print(f"the run (bag_linear + recursion): macro-F1 {trm['summary']['macro_f1']:.4f}, "
          f"accuracy {trm['summary']['accuracy']:.4f}")
    lo, hi = ci["macro_f1_difference"]
    print(f"run - alone: macro-F1 {trm['summary']['macro_f1'] - base['macro_f1']:+.4f}, 95% interval "
          f"{lo:+.4f} to {hi:+.4f} (paired bootstrap, {ci['rounds']} rounds); "
          f"{int((preds != alone).sum())} test messages labelled differently")


if __name__ == "__main__":
    main()
