"""Tests for trmkit.data.store and trmkit.data.stream: round trip, atomic writes, sampling, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trmkit.data import store
from trmkit.data.store import (
    SplitArrays,
    StoreError,
    open_split,
    open_store,
    smallest_index_dtype,
    smallest_uint_dtype,
    write_store,
)
from trmkit.data.stream import SampleStream, eval_batches

VOCAB = [f"t{i}" for i in range(64)]
PUZZLES_PER_GROUP = (1, 3, 2, 1, 2, 3, 1)  # 7 groups, 13 puzzles
EXAMPLES_PER_PUZZLE = (1, 2)  # puzzle p has EXAMPLES_PER_PUZZLE[p % 2] examples


def toy_split(seq_len: int = 4) -> SplitArrays:
    """Rows encode (group, puzzle, row) in columns 0..2 so samples can be traced."""
    group_of_puzzle = np.repeat(np.arange(len(PUZZLES_PER_GROUP)), PUZZLES_PER_GROUP)  # (P,)
    examples = np.array([EXAMPLES_PER_PUZZLE[p % 2] for p in range(len(group_of_puzzle))])  # (P,)
    puzzle_of_row = np.repeat(np.arange(len(examples)), examples)  # (N,)
    n = len(puzzle_of_row)
    inputs = np.zeros((n, seq_len), dtype=np.int64)  # int64 on purpose: the store must shrink it
    inputs[:, 0] = group_of_puzzle[puzzle_of_row]
    inputs[:, 1] = puzzle_of_row
    inputs[:, 2] = np.arange(n)
    return SplitArrays(
        inputs=inputs,
        labels=inputs[:, ::-1].copy(),
        puzzle_identifiers=np.arange(len(examples)),
        puzzle_indices=np.concatenate([[0], np.cumsum(examples)]),
        group_indices=np.concatenate([[0], np.cumsum(PUZZLES_PER_GROUP)]),
    )


def toy_meta() -> dict:
    return {
        "task": "toy", "vocab": VOCAB, "pad_id": 0, "ignore_label_id": 0, "blank_id": None,
        "num_puzzle_identifiers": 13, "source": "test", "build": {"seed": 0},
    }


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    write_store(out, {"train": toy_split(), "test": toy_split()}, toy_meta())
    return out


def test_smallest_dtypes() -> None:
    assert smallest_uint_dtype(10) == np.uint8
    assert smallest_uint_dtype(255) == np.uint8
    assert smallest_uint_dtype(256) == np.uint16
    assert smallest_uint_dtype(70_000) == np.uint32
    assert smallest_index_dtype(2**31 - 1) == np.int32
    assert smallest_index_dtype(2**31) == np.int64


def test_round_trip_dtypes_memmap_and_meta(root: Path) -> None:
    splits = open_store(root)
    assert sorted(splits) == ["test", "train"]
    split = splits["train"]
    source = toy_split()
    for name in store.ARRAY_NAMES:
        arr = getattr(split, name)
        assert isinstance(arr, np.memmap), name
        assert arr.dtype != np.int64, name
        np.testing.assert_array_equal(arr, getattr(source, name))
    assert split.inputs.dtype == split.labels.dtype == np.uint8
    assert split.puzzle_identifiers.dtype == np.uint8
    assert split.puzzle_indices.dtype == split.group_indices.dtype == np.int32
    meta = split.meta
    assert (meta.format, meta.task, meta.vocab_size, meta.seq_len) == ("trmkit-store/1", "toy", 64, 4)
    assert (meta.num_examples, meta.num_puzzles, meta.num_groups) == (19, 13, 7)
    assert meta.dtypes["inputs"] == "uint8" and meta.build == {"seed": 0}
    assert meta.decode(split.inputs[5]) == ["t1", "t3", "t5", "t0"]  # group 1, puzzle 3, row 5
    raw = json.loads((root / "train" / "meta.json").read_text())
    assert raw["vocab"] == VOCAB  # decodable without trmkit


def test_a_meta_json_written_before_the_rename_reads_its_part_positions(root: Path) -> None:
    """The e-mail bag's positions: bag_positions, then pooled_positions, now the generic part_positions."""
    raw = json.loads((root / "train" / "meta.json").read_text())
    for former in ("bag_positions", "pooled_positions", "part_positions"):
        meta = store.StoreMeta.from_dict({**raw, former: 2})
        assert meta.part_positions == 2 and meta.to_dict()["part_positions"] == 2
        assert former == "part_positions" or former not in meta.to_dict()


def test_refuses_to_overwrite_other_directory(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a trmkit store"):
        write_store(out, {"train": toy_split()}, toy_meta())
    assert (out / "notes.txt").read_text() == "keep me"


def test_rewrite_replaces_store_and_leaves_no_siblings(root: Path) -> None:
    write_store(root, {"train": toy_split(seq_len=6)}, toy_meta(), force=True)
    assert sorted(p.name for p in root.iterdir()) == ["train"]
    assert open_split(root / "train").meta.seq_len == 6
    assert [p.name for p in root.parent.iterdir()] == ["ds"]


def test_failed_build_leaves_nothing(tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = store._write_split

    def fail_on_second(path: Path, arrays: SplitArrays, meta: dict) -> None:
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        real(path, arrays, meta)

    monkeypatch.setattr(store, "_write_split", fail_on_second)
    fresh = tmp_path / "fresh"
    with pytest.raises(OSError, match="simulated"):
        write_store(fresh, {"train": toy_split(), "test": toy_split()}, toy_meta())
    assert not fresh.exists()
    calls.clear()
    with pytest.raises(OSError, match="simulated"):
        write_store(root, {"train": toy_split(seq_len=6), "test": toy_split()}, toy_meta(), force=True)
    assert open_split(root / "train").meta.seq_len == 4  # the old store is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary directories


def test_open_split_reports_missing_and_inconsistent(root: Path) -> None:
    split_dir = root / "train"
    (split_dir / "labels.npy").unlink()
    with pytest.raises(StoreError, match=r"labels\.npy: missing"):
        open_split(split_dir)
    np.save(split_dir / "labels.npy", np.zeros((3, 4), dtype=np.uint8))
    with pytest.raises(StoreError, match=r"labels\.npy: shape \(3, 4\).*\(19, 4\)"):
        open_split(split_dir)
    meta = json.loads((root / "test" / "meta.json").read_text())
    del meta["seq_len"]
    (root / "test" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"meta\.json: missing key\(s\) \['seq_len'\]"):
        open_split(root / "test")
    with pytest.raises(StoreError, match="not found"):
        open_split(root / "nope")


def test_stream_is_deterministic_and_small_dtyped(root: Path) -> None:
    split = open_split(root / "train")
    a, b = SampleStream(split, seed=3).take(30), SampleStream(split, seed=3).take(30)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    np.testing.assert_array_equal(a.puzzle_ids, b.puzzle_ids)
    other = SampleStream(split, seed=4).take(30)
    assert not np.array_equal(a.inputs, other.inputs)
    assert a.inputs.shape == (30, 4) and a.labels.shape == (30, 4) and a.puzzle_ids.shape == (30,)
    assert a.inputs.dtype == a.labels.dtype == a.puzzle_ids.dtype == np.uint8
    assert not isinstance(a.inputs, np.memmap)
    np.testing.assert_array_equal(a.labels, a.inputs[:, ::-1])  # label rows match input rows
    np.testing.assert_array_equal(a.puzzle_ids, a.inputs[:, 1])  # ids come from the chosen puzzle


def test_each_epoch_visits_every_group_once(root: Path) -> None:
    split = open_split(root / "train")
    stream = SampleStream(split, seed=0)
    groups = np.concatenate([stream.take(k).inputs[:, 0] for k in (3, 5, 0, 9, 4)])  # 21 = 3 epochs
    assert stream.epoch == 3 and stream.samples_served == 21
    orders = groups.reshape(3, 7)
    for order in orders:
        assert sorted(order) == list(range(7))
    assert len({tuple(o) for o in orders}) > 1  # shuffled differently per epoch
    rows = np.concatenate([stream.take(7).inputs for _ in range(40)])
    puzzles_seen = set(rows[:, 1].tolist())
    assert puzzles_seen == set(range(13))  # every augmentation gets drawn eventually
    assert set(rows[:, 2].tolist()) == set(range(19))  # and every example


def test_resume_gives_identical_continuation(root: Path) -> None:
    split = open_split(root / "train")
    first = SampleStream(split, seed=11)
    first.take(10)
    state = json.loads(json.dumps(first.state_dict()))
    assert state == {"epoch": 1, "index": 3, "seed": 11}
    expected = first.take(25)
    resumed = SampleStream(split, seed=0)
    resumed.load_state_dict(state)
    got = resumed.take(25)
    np.testing.assert_array_equal(got.inputs, expected.inputs)
    np.testing.assert_array_equal(got.puzzle_ids, expected.puzzle_ids)
    assert resumed.samples_served == first.samples_served == 35
    with pytest.raises(ValueError, match="groups"):
        resumed.load_state_dict({"epoch": 0, "index": 7, "seed": 0})


def test_eval_batches_cover_all_examples(root: Path) -> None:
    split = open_split(root / "test")
    batches = list(eval_batches(split, batch_size=6))
    assert [len(b) for b in batches] == [6, 6, 6, 1]
    inputs = np.concatenate([b.inputs for b in batches])
    np.testing.assert_array_equal(inputs[:, 2], np.arange(19))
    ids = np.concatenate([b.puzzle_ids for b in batches])
    np.testing.assert_array_equal(ids, inputs[:, 1])
    assert inputs.dtype == np.uint8
    assert [len(b) for b in eval_batches(split, batch_size=4, limit=9)] == [4, 4, 1]
