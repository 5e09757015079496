"""`trmkit data email --keep-labels K` and the baseline on such a store, on a tiny CSV mailbox."""

import json
from pathlib import Path

import numpy as np
import pytest

from trmkit import cli
from trmkit.email.fewlabels import UNLABELLED, keep_labels


def write_csv(path: Path, per_class: int = 30) -> Path:
    rng = np.random.default_rng(0)
    words = {"ham": [f"meeting{i}" for i in range(60)], "spam": [f"offer{i}" for i in range(60)]}
    lines = ["text,label"]
    for label, vocab in words.items():
        for _ in range(per_class):  # random words: no two messages are near duplicates
            lines.append(" ".join(rng.choice(vocab, 25)) + f",{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def build(tmp_path: Path, name: str, *extra: str) -> Path:
    out = tmp_path / name
    assert cli.main(["data", "email", "--source", str(tmp_path / "mail.csv"), "--vocab-size", "300",
                     "--seq-len", "16", "--seed", "1", *extra, "--out", str(out)]) == 0
    return out


def records(store: Path, split: str) -> list[dict]:
    return json.loads((store / split / "messages.json").read_text())


def test_keep_labels_draws_k_per_class_and_hides_the_rest(tmp_path, capsys):
    write_csv(tmp_path / "mail.csv")
    full, three, five = build(tmp_path, "full"), build(tmp_path, "k3", "--keep-labels", "3"), \
        build(tmp_path, "k5", "--keep-labels", "5")
    out = capsys.readouterr().out
    assert "--keep-labels 3: labelled ham 3, spam 3" in out and "so there is none" in out
    assert [r["where"] for r in records(three, "test")] == [r["where"] for r in records(full, "test")]
    assert [r["label"] for r in records(three, "train")] == ["ham"] * 3 + ["spam"] * 3
    # nested draws: the 3 per class of a seed are among its 5
    assert {r["where"] for r in records(three, "train")} < {r["where"] for r in records(five, "train")}
    assert not (three / "val").exists()
    hidden = records(three, UNLABELLED)
    n_train_val = len(records(full, "train")) + len(records(full, "val"))
    assert len(hidden) == n_train_val - 6
    assert all(r["label"] is None and r["where"] is None for r in hidden)
    meta = json.loads((three / UNLABELLED / "meta.json").read_text())
    assert (np.load(three / UNLABELLED / "labels.npy") == meta["ignore_label_id"]).all()
    build_meta = json.loads((three / "train" / "meta.json").read_text())["build"]
    assert build_meta["keep_labels"] == {"per_class": 3, "labelled": {"ham": 3, "spam": 3},
                                         "unlabelled": len(hidden), "validation_folded": len(records(full, "val"))}
    # the report's class counts are of the labelled and the test messages: none of the unlabelled
    assert build_meta["dataset"]["classes"]["all"] == {"ham": 3 + 6, "spam": 3 + 6}

    assert cli.main(["email", "baseline", str(three), "--out", str(tmp_path / "b.json")]) == 0
    assert "fitted on the 6 labelled training messages only (--keep-labels 3" in capsys.readouterr().err
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["baseline"]["train"] == result["baseline_balanced"]["train"] == 6


def test_keep_labels_more_than_a_class_holds_is_refused_with_the_counts():
    labels = ["a"] * 10 + ["b"] * 4
    rows = {"train": np.arange(14), "val": np.zeros(0, np.int64), "test": np.zeros(0, np.int64)}
    with pytest.raises(ValueError, match=r"fewer than 5 messages of b \(4\); its classes hold a 10, b 4"):
        keep_labels(labels, rows, 5, seed=0)
    kept = keep_labels(labels, rows, 4, seed=0)
    assert len(kept["train"]) == 8 and len(kept[UNLABELLED]) == 6
