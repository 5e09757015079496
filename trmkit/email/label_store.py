"""`trmkit email label STORE --apply --out NEW_STORE`: the answers become labels, for the one trainer.

NEW_STORE is STORE with every answered message (a class given; skips stay unlabelled) moved from
unlabelled/ to train/, its label id at position 0 and its messages.json record's "label" filled in
("answered": true). Everything else is copied as it is: the test split, the tokenizer, the bag,
the dataset report, the arrays' rows; the store is written by data.store.write_store (all or nothing).
meta.json's build.keep_labels gains "answered" (how many, per class) and "answers" (the file read),
so a run trained on NEW_STORE records where its extra labels came from. Training is then the
ordinary `trmkit train configs/email-fast.yaml data.path=NEW_STORE`: there is no second trainer.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from trmkit.data.store import ARRAY_NAMES, META_FILE, SplitArrays, check_new_store, open_store, write_store
from trmkit.email.fewlabels import UNLABELLED
from trmkit.email.label import Log, Pool, labelled_answers
from trmkit.email.task import MESSAGES_FILE

DERIVED = ("format", "vocab_size", "seq_len", "num_examples", "num_puzzles", "num_groups", "dtypes")


def _split_arrays(inputs: np.ndarray, labels: np.ndarray) -> SplitArrays:
    n = len(inputs)  # a classify store: one example per puzzle and group
    return SplitArrays(inputs=inputs, labels=labels, puzzle_identifiers=np.zeros(n, dtype=np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


def _sidecars(split_dir: Path) -> dict[str, object]:
    """Every JSON file of a split but its meta.json, to write again beside the new arrays."""
    return {p.name: json.loads(p.read_text()) for p in sorted(split_dir.glob("*.json")) if p.name != META_FILE}


def moved_splits(pool: Pool, given: dict[int, int]) -> tuple[SplitArrays, SplitArrays, list[dict], list[dict]]:
    """(train, unlabelled) arrays and messages.json records with the answered rows moved to train."""
    splits = open_store(pool.store)
    train, hidden = splits["train"], splits[UNLABELLED]
    moved = np.array(sorted(given), dtype=np.int64)
    kept = np.setdiff1d(np.arange(len(hidden)), moved)
    labels = np.asarray(hidden.labels)[moved].astype(np.int64)
    labels[:, 0] = [given[r] for r in moved]
    train_arrays = _split_arrays(np.concatenate([np.asarray(train.inputs), np.asarray(hidden.inputs)[moved]]),
                                 np.concatenate([np.asarray(train.labels).astype(np.int64), labels]))
    rest = _split_arrays(np.asarray(hidden.inputs)[kept], np.asarray(hidden.labels)[kept])
    old = json.loads((pool.store / "train" / MESSAGES_FILE).read_text())
    new = [{**pool.records[r], "label": pool.classes[given[r]], "answered": True} for r in moved]
    return train_arrays, rest, old + new, [pool.records[r] for r in kept]


def apply_answers(pool: Pool, answers: list[dict], answers_file: Path, out: Path, log: Log = print,
                  force: bool = False) -> Path:
    """Write NEW_STORE (`out`): the answered messages labelled in train/, the rest still in unlabelled/. A store
    already at `out` is replaced only with `force` (`--force`)."""
    check_new_store(out, force)
    given = labelled_answers(pool, answers, log)
    if not given:
        raise ValueError(f"{answers_file}: no answer names a class yet: label some messages first "
                         f"(`trmkit email label {pool.store}`)")
    if len(given) == len(pool.records):
        raise ValueError("every unlabelled message has an answer: the new store would have no unlabelled split; "
                         "build the store without --keep-labels instead")
    train, rest, train_records, rest_records = moved_splits(pool, given)
    splits, extras = {}, {}
    for name in open_store(pool.store):
        extras[name] = _sidecars(pool.store / name)
        if name not in ("train", UNLABELLED):
            s = open_store(pool.store)[name]
            splits[name] = SplitArrays(**{k: np.asarray(getattr(s, k)) for k in ARRAY_NAMES})
    splits["train"], splits[UNLABELLED] = train, rest
    extras["train"][MESSAGES_FILE], extras[UNLABELLED][MESSAGES_FILE] = train_records, rest_records
    meta = {k: v for k, v in pool.meta.items() if k not in DERIVED}
    few = dict(meta["build"]["keep_labels"])
    per_class = Counter(pool.classes[c] for c in given.values())
    few.update(labelled=dict(sorted(Counter(r["label"] for r in train_records).items())),
               unlabelled=len(rest_records), answered=dict(sorted(per_class.items())), answers=str(answers_file))
    meta["build"] = {**meta["build"], "keep_labels": few}
    write_store(out, splits, meta, extras=extras, force=force)
    log(f"label: wrote {out}: train {len(train_records)} messages ({len(given)} answered: "
        + ", ".join(f"{c} {n}" for c, n in sorted(per_class.items())) + f"), unlabelled {len(rest_records)}; "
        f"train on it with\n  trmkit train configs/email-fast.yaml data.path={out}")
    return out
