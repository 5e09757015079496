"""`trmkit data email --keep-labels K`: a mailbox where only K messages per class are labelled.

The split is made first, exactly as without the option (so the test split does not depend on K),
then K training messages of each class are drawn with --seed (stratified; for one seed the K=5
draw is inside the K=10 draw, and so on). Every other training message, and the whole validation
split, becomes the store's `unlabelled/` split:

    unlabelled/  inputs as any split; labels ignore_label_id everywhere; messages.json records
                 with "label" and "where" set to null (a folder path spells the folder label)

The trainer reads train/, val/ and test/ only, so no loss, fit, cross-validation, checkpoint choice,
early stop or calibration can see an unlabelled message, and its true label is written nowhere.
There is no val/ split: its labels would be labels beyond the K per class. The tokenizer and the
bag's idf read the text of the labelled and the unlabelled training messages (no labels), so for
one seed every K gets the same tokenizer.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

UNLABELLED = "unlabelled"  # the store's split of training messages without a label


def keep_labels(labels: list[str], rows: dict[str, np.ndarray], k: int, seed: int) -> dict[str, np.ndarray]:
    """{train: K rows per class, val: none, test: as given, unlabelled: the rest of train, then val}.

    labels: the class of every kept message, indexed by rows. A class with fewer than K training
    messages is refused, with every class's count."""
    if k < 1:
        raise ValueError(f"--keep-labels must be at least 1, got {k}")
    train = np.asarray(rows["train"], dtype=np.int64)
    counts = Counter(labels[i] for i in train)
    short = {c: n for c, n in sorted(counts.items()) if n < k}
    if short:
        raise ValueError(f"--keep-labels {k}: the training split holds fewer than {k} messages of "
                         + ", ".join(f"{c} ({n})" for c, n in short.items()) + "; its classes hold "
                         + ", ".join(f"{c} {n}" for c, n in sorted(counts.items()))
                         + f": use --keep-labels {min(counts.values())} or less")
    rng = np.random.default_rng(seed)
    kept = []
    for cls in sorted(counts):  # sorted: the draw does not depend on the order classes were first seen
        of_class = train[np.array([labels[i] == cls for i in train])]
        kept.append(rng.permutation(np.sort(of_class))[:k])
    labelled = np.sort(np.concatenate(kept))
    rest = np.concatenate([np.setdiff1d(train, labelled), np.asarray(rows["val"], dtype=np.int64)])
    return {"train": labelled, "val": np.zeros(0, np.int64), "test": np.asarray(rows["test"], np.int64),
            UNLABELLED: np.sort(rest)}


def few_labels_report(labels: list[str], rows: dict[str, np.ndarray], k: int, folded_val: int) -> dict[str, Any]:
    """What the store records of the draw: K, the labelled count per class, the unlabelled total."""
    return {"per_class": k, "labelled": dict(sorted(Counter(labels[i] for i in rows["train"]).items())),
            "unlabelled": int(len(rows[UNLABELLED])), "validation_folded": int(folded_val)}


def hide_unlabelled_classes(report: dict, labels: list[str], rows: dict[str, np.ndarray]) -> None:
    """The dataset report's class counts over the labelled and the test messages only: counts over
    every message would give away the unlabelled ones' classes (all minus labelled minus test)."""
    seen = [labels[i] for name in ("train", "test") for i in rows[name]]
    counts = dict(sorted(Counter(seen).items()))
    report["classes"]["all"] = counts
    report["imbalance_ratio"] = max(counts.values()) / min(counts.values())


def report_line(few: dict) -> str:
    return (f"labels: --keep-labels {few['per_class']}: labelled "
            + ", ".join(f"{c} {n}" for c, n in few["labelled"].items())
            + f"; {few['unlabelled']} training messages unlabelled (the split '{UNLABELLED}/', labels hidden), "
            f"{few['validation_folded']} of them the validation split's: with K labels per class a validation "
            "split would be labels beyond K, so there is none (no checkpoint choice, early stop or calibration "
            "on held-out labels)")
