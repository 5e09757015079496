"""A store's fingerprint (one SHA-256 per split, written once with the store, read from meta.json) and
`trmkit data` / `build_data` refusing to write over a store without --force."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trmkit
from trmkit import cli
from trmkit.config import ConfigError
from trmkit.data.store import (SplitArrays, open_split, split_fingerprint_on_disk, store_changes,
                               store_fingerprints, write_store)


def split(n: int = 3, offset: int = 0) -> SplitArrays:
    x = (np.arange(n * 4).reshape(n, 4) + offset) % 5
    return SplitArrays(inputs=x, labels=x, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


META = {"task": "toy", "vocab": list("abcde"), "pad_id": 0, "ignore_label_id": 0, "blank_id": None,
        "num_puzzle_identifiers": 1, "source": "test", "build": {}}


def test_each_split_records_the_hash_of_what_was_written(tmp_path: Path) -> None:
    root = write_store(tmp_path / "s", {"train": split(4), "test": split(2)}, META, extras={"test": {"x.json": [1]}})
    prints = store_fingerprints(root)
    assert set(prints) == {"train", "test"} and prints["train"]["examples"] == 4
    for name in prints:
        recorded = open_split(root / name).meta.fingerprint
        assert recorded.startswith("sha256:") and recorded == prints[name]["fingerprint"]
        assert split_fingerprint_on_disk(root / name) == recorded  # the bytes on disk, sidecars included
    assert prints["train"]["fingerprint"] != prints["test"]["fingerprint"]
    other = write_store(tmp_path / "o", {"train": split(4, offset=1)}, META)
    assert store_fingerprints(other)["train"]["fingerprint"] != prints["train"]["fingerprint"]


def test_a_fingerprint_copied_from_an_old_meta_is_replaced_by_the_new_content(tmp_path: Path) -> None:
    old = write_store(tmp_path / "a", {"train": split(3)}, META)
    stale = json.loads((old / "train" / "meta.json").read_text())["fingerprint"]
    new = write_store(tmp_path / "b", {"train": split(3, offset=2)}, {**META, "fingerprint": stale})
    assert store_fingerprints(new)["train"]["fingerprint"] != stale


def test_store_changes_name_the_split_and_its_counts() -> None:
    was = {"train": {"fingerprint": "sha256:a", "examples": 27}, "test": {"fingerprint": "sha256:b", "examples": 30}}
    assert store_changes(was, was) == []
    now = {"train": {"fingerprint": "sha256:c", "examples": 27}, "test": {"fingerprint": "sha256:d", "examples": 50},
           "val": {"fingerprint": "sha256:e", "examples": 5}}
    assert store_changes(was, now) == ["split test had 30 examples, now 50",
                                       "split train has other contents (the same 27 examples in number)",
                                       "split val added (5 examples)"]
    unknown = {k: {**v, "fingerprint": None} for k, v in was.items()}  # a store from before fingerprints
    assert store_changes(was, unknown) == []


def test_build_data_refuses_to_overwrite_a_store_without_force(tmp_path: Path, capsys) -> None:
    out = tmp_path / "easy"
    options = dict(source="generate", num=8, givens="40-45", aug=1, log=lambda m: None)
    trmkit.build_data("sudoku", out, **options)
    before = store_fingerprints(out)
    with pytest.raises(ConfigError, match="already holds a trmkit store.*--force"):
        trmkit.build_data("sudoku", out, seed=1, **options)
    assert store_fingerprints(out) == before  # untouched
    assert cli.main(["data", "sudoku", "--source", "generate", "--num", "8", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    trmkit.build_data("sudoku", out, seed=1, force=True, **options)
    assert store_fingerprints(out) != before


def test_a_folder_that_is_not_a_store_is_refused_even_with_force(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="not a trmkit store"):
        trmkit.build_data("sudoku", out, source="generate", num=8, force=True, log=lambda m: None)
    assert (out / "notes.txt").read_text() == "keep"
