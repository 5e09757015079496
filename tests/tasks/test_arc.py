"""Tests for trmkit.tasks.arc: encoding, augmentations, the builder's protocol, voting and pass@k."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from trmkit.api import add_data_arguments, data_options
from trmkit.data.store import open_store
from trmkit.data.stream import Batch, eval_batches
from trmkit.tasks import arc
from trmkit.tasks.arc.build import build, read_sidecar
from trmkit.tasks.arc.data import EOS, Aug, decode, encode
from trmkit.tasks.arc.score import ArcScorer, submission, write_submission
from trmkit.tasks.arc.task import run_build

# A perm of colours 1-9 with no fixed point, so a wrong inverse cannot pass by luck.
PERM = (0, 3, 7, 1, 9, 2, 8, 4, 6, 5)


@pytest.fixture(scope="module")
def data_dir() -> Path:
    path = (Path(__file__).parents[2] / ".." / "shared" / "data" / "arc").resolve()
    if not (path / "arc-agi_evaluation_challenges.json").is_file():
        pytest.fail(f"ARC data not found: looked for {path} (repo root/../shared/data/arc)")
    return path


@pytest.fixture(scope="module")
def store(data_dir: Path, tmp_path_factory) -> Path:
    """4 training + 4 concept + 4 evaluation tasks, 4 augmentations each."""
    out = tmp_path_factory.mktemp("arc") / "ds"
    build(data_dir, out, subsets=["training", "concept"], aug=4, limit=4, seed=0, log=lambda s: None)
    return out


def write_source(folder: Path, subset: str, challenges: dict, solutions: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"arc-agi_{subset}_challenges.json").write_text(json.dumps(challenges))
    (folder / f"arc-agi_{subset}_solutions.json").write_text(json.dumps(solutions))
    return folder


def real_tasks(data_dir: Path, subset: str, n: int) -> tuple[dict, dict]:
    challenges = json.loads((data_dir / f"arc-agi_{subset}_challenges.json").read_text())
    solutions = json.loads((data_dir / f"arc-agi_{subset}_solutions.json").read_text())
    ids = list(challenges)[:n]
    return {i: challenges[i] for i in ids}, {i: solutions[i] for i in ids}


def score(split, predict) -> ArcScorer:
    """Run every test batch through `predict(batch) -> (preds, q_halt)`."""
    scorer = ArcScorer(split)
    for batch in eval_batches(split, 7):
        scorer.add(batch, *predict(batch))
    return scorer


# ---------------------------------------------------------------- grids


def test_every_augmentation_is_undone() -> None:
    grid = np.random.default_rng(0).integers(0, 10, size=(3, 5)).astype(np.uint8)
    seen = set()
    for k in range(8):
        for perm in (tuple(range(10)), PERM):
            aug = Aug(k, perm)
            moved = aug.apply(grid)
            assert moved.shape in ((3, 5), (5, 3))
            np.testing.assert_array_equal(aug.invert(moved), grid)
            assert Aug.from_json(json.loads(json.dumps(aug.to_json()))) == aug
            seen.add(moved.tobytes() + bytes(moved.shape))
    assert len(seen) == 16  # all 8 symmetries x 2 colour maps differ on a random grid
    assert (Aug(0, PERM).apply(grid) == 0).sum() == (grid == 0).sum()  # black stays black


def test_encode_marks_the_end_and_decode_crops_there() -> None:
    grid = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8)
    canvas = encode(grid).reshape(30, 30)
    np.testing.assert_array_equal(canvas[:2, :3], grid + 2)
    assert canvas[2, :3].tolist() == [1, 1, 1] and canvas[:2, 3].tolist() == [1, 1]  # <eos> below and right
    assert canvas[2, 3] == 0 and canvas[3:].sum() == 0 and canvas[:, 4:].sum() == 0
    for shape in ((1, 1), (3, 5), (30, 30), (30, 4), (7, 30)):
        g = np.random.default_rng(sum(shape)).integers(0, 10, size=shape).astype(np.uint8)
        np.testing.assert_array_equal(decode(encode(g)), g)
    shifted = encode(grid, (4, 6)).reshape(30, 30)
    np.testing.assert_array_equal(shifted[4:6, 6:9], grid + 2)
    assert shifted[6, 6:9].tolist() == [1, 1, 1] and shifted[4:6, 9].tolist() == [1, 1]


def test_decode_follows_the_reference_crop() -> None:
    junk = encode(np.full((3, 3), 7, dtype=np.uint8)).reshape(30, 30).copy()
    junk[0, 5:9] = 4  # colours beyond the end marker are cut off
    junk[10:, :] = 5
    np.testing.assert_array_equal(decode(junk), np.full((3, 3), 7))
    ragged = np.zeros((30, 30), dtype=np.uint8)
    ragged[0, :5] = 3  # row 0 five wide, row 1 two wide: the largest rectangle is 1 x 5
    ragged[1, :2] = 3
    assert decode(ragged).shape == (1, 5)
    ragged[1:4, :2] = 3  # rows 1-3 two wide: 4 x 2 = 8 beats 1 x 5
    assert decode(ragged).shape == (4, 2)
    assert decode(np.zeros(900, dtype=np.uint8)) is None  # nothing at the corner: invalid
    starts_with_eos = encode(np.ones((2, 2), dtype=np.uint8)).copy()
    starts_with_eos[0] = EOS
    assert decode(starts_with_eos) is None


# ---------------------------------------------------------------- builder


def test_protocol_ids_translation_and_sidecar(store: Path) -> None:
    splits = open_store(store)
    train, test = splits["train"], splits["test"]
    assert train.meta.task == "arc" and train.meta.vocab_size == 12 and train.meta.seq_len == 900
    assert train.meta.num_puzzle_identifiers == 1 + 12 * 5  # id 0 blank; 12 tasks x (identity + 4)
    side_train, side_test = read_sidecar(train.path), read_sidecar(test.path)
    assert test.num_groups == 4 and train.num_groups == 12
    assert len(set(np.asarray(test.puzzle_identifiers).tolist())) == test.num_puzzles == 4 * 5
    for pid in np.asarray(test.puzzle_identifiers):  # test puzzles reuse their task's training ids
        assert side_test["puzzles"][str(pid)] == side_train["puzzles"][str(pid)]
        assert pid in np.asarray(train.puzzle_identifiers)
    assert {side_test["puzzles"][str(p)]["subset"] for p in test.puzzle_identifiers} == {"evaluation"}
    # eval tasks train on their demonstrations only: never on a test solution
    ids = np.asarray(train.puzzle_identifiers)
    sizes = np.diff(np.asarray(train.puzzle_indices))
    for task_id, info in side_test["tasks"].items():
        mine = [i for i, p in enumerate(ids) if side_train["puzzles"][str(p)]["task"] == task_id]
        assert len(mine) == 5
        demos = len(json.loads((Path(train.meta.build["source"]) / "arc-agi_evaluation_challenges.json")
                               .read_text())[task_id]["train"])
        assert all(sizes[i] == demos for i in mine)
    # the identity is augmentation 0 of every task
    firsts = np.asarray(train.puzzle_identifiers)[np.asarray(train.group_indices)[:-1]]
    assert all(side_train["puzzles"][str(p)]["k"] == 0 and side_train["puzzles"][str(p)]["perm"] == "0123456789"
               for p in firsts)
    # translation: train examples shifted except one per puzzle; test examples never
    corner = np.asarray(train.inputs)[:, 0] >= 2  # a colour at (0, 0): not shifted
    starts = np.asarray(train.puzzle_indices)
    assert all(corner[a:b].any() for a, b in zip(starts[:-1], starts[1:]))
    assert not corner.all()
    assert (np.asarray(test.inputs)[:, 0] >= 2).all() and (np.asarray(test.labels)[:, 0] >= 2).all()


def test_build_refuses_training2_while_evaluating_arc1(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="training2") as err:
        build(data_dir, tmp_path / "ds", subsets=["training2"], aug=1, limit=2, log=lambda s: None)
    assert "--allow-overlap" in str(err.value) and "--eval-subset evaluation2" in str(err.value)
    assert not (tmp_path / "ds").exists()
    lines: list[str] = []
    build(data_dir, tmp_path / "ds", subsets=["training2"], aug=1, limit=2, allow_overlap=True, log=lines.append)
    assert any(line.startswith("WARNING (--allow-overlap)") for line in lines)
    overlap = open_store(tmp_path / "ds")["train"].meta.build["overlap"]
    assert overlap["allowed"] is True and overlap["found"]


def test_build_refuses_shared_task_ids(data_dir: Path, tmp_path: Path) -> None:
    challenges, solutions = real_tasks(data_dir, "evaluation", 2)
    source = write_source(tmp_path / "src", "evaluation", challenges, solutions)
    write_source(source, "mine", challenges, solutions)  # a training subset holding the eval tasks
    with pytest.raises(ValueError, match="2 task id"):
        build(source, tmp_path / "ds", subsets=["mine"], aug=0, log=lambda s: None)


def test_the_eval_subset_listed_in_subsets_is_not_trained_on(data_dir: Path, tmp_path: Path) -> None:
    """The reference's README lists evaluation among --subsets; its test pairs must still stay out of train."""
    for name, subsets in (("a", ["concept"]), ("b", ["concept", "evaluation"])):
        build(data_dir, tmp_path / name, subsets=subsets, aug=1, limit=2, log=lambda s: None)
    a, b = open_store(tmp_path / "a")["train"], open_store(tmp_path / "b")["train"]
    np.testing.assert_array_equal(a.inputs, b.inputs)
    assert b.meta.build["subsets"] == ["concept"]


def test_command_line_options_reach_the_builder(data_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """The options as `trmkit data arc` parses them; --source defaults to ../shared/data/arc from the cwd."""
    parser = argparse.ArgumentParser()
    add_data_arguments(parser, arc.TASK)  # the common options, then the task's own
    monkeypatch.chdir(Path(__file__).parents[2])  # the repo root, where data_dir is ../shared/data/arc
    args = parser.parse_args(["--out", str(tmp_path / "ds"), "--subsets", "training, concept", "--aug", "2",
                              "--limit", "2", "--seed", "3"])
    summary = run_build(data_options(arc.TASK, args), log=lambda s: None)
    assert summary["subsets"] == ["training", "concept"] and summary["seed"] == 3 and summary["aug"] == 2
    assert summary["tasks"] == {"training": 2, "concept": 2, "evaluation": 2}
    assert summary["test_fraction"] == 0.1 and set(open_store(tmp_path / "ds")) == {"train", "test"}
    assert arc.TASK.build is run_build and arc.TASK.scorer is ArcScorer


def test_missing_file_names_it_and_the_flag(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="arc-agi_training_challenges.json.*--source"):
        build(tmp_path, tmp_path / "ds", subsets=["training"], log=lambda s: None)


def test_bad_tasks_are_counted_not_fatal(data_dir: Path, tmp_path: Path) -> None:
    challenges, solutions = real_tasks(data_dir, "evaluation", 1)
    good = next(iter(challenges.values()))
    pair = good["train"][0]
    bad = {
        "ragged": [[1, 2], [3]], "bad_colour": [[1, 10]], "too_large": [[0] * 31] * 2,
        "bad_grid": [[1, "2"]], "empty": [],
    }
    for name, grid in bad.items():
        challenges[name] = {"train": [{"input": grid, "output": pair["output"]}], "test": good["test"]}
        solutions[name] = next(iter(solutions.values()))
    challenges["unsolved"] = good
    challenges["short"] = good
    solutions["short"] = []
    challenges["no_train"] = {"train": [], "test": good["test"]}
    solutions["no_train"] = next(iter(solutions.values()))
    source = write_source(tmp_path / "src", "evaluation", challenges, solutions)
    build(source, tmp_path / "ds", subsets=[], aug=2, log=lambda s: None)
    meta = open_store(tmp_path / "ds")["test"].meta
    assert meta.build["read"] == 9 and meta.build["accepted"] == 1 and meta.build["skipped"] == 8
    assert meta.build["skipped_by_reason"] == {"ragged": 1, "bad_colour": 1, "too_large": 1, "bad_grid": 2,
                                               "no_solution": 2, "bad_task": 1}
    assert "arc-agi_evaluation_challenges.json: ragged: ragged: rows of lengths [1, 2]" in \
        meta.build["skipped_examples"]


def test_test_fraction_one_gives_a_test_only_store_with_the_same_ids(data_dir: Path, store: Path,
                                                                      tmp_path: Path) -> None:
    build(data_dir, tmp_path / "ds", subsets=["training", "concept"], aug=4, limit=4, seed=0, test_fraction=1.0,
          log=lambda s: None)
    only = open_store(tmp_path / "ds")
    full = open_store(store)
    assert list(only) == ["test"]
    assert only["test"].meta.num_puzzle_identifiers == full["test"].meta.num_puzzle_identifiers
    for name in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"):
        np.testing.assert_array_equal(getattr(only["test"], name), getattr(full["test"], name))


# ---------------------------------------------------------------- scoring


def test_an_oracle_scores_one(store: Path) -> None:
    test = open_store(store)["test"]
    scorer = score(test, lambda b: (np.asarray(b.labels), np.zeros(len(b))))
    result = scorer.result()
    assert result["pass@1"] == 1.0 and result["pass@2"] == 1.0 and result["arc_tasks"] == 4
    assert result["arc_invalid"] == 0
    for task_id, outputs in scorer.truth.items():  # every augmented copy, inverted, gives the same grid
        assert all(len(scorer.ranked(task_id, i)) == 1 for i in range(len(outputs)))
        assert all(scorer.votes[(task_id, i)][d].count == 5 for i in range(len(outputs))
                   for d in scorer.votes[(task_id, i)])


def test_predicting_the_input_scores_the_identity_baseline(data_dir: Path, tmp_path: Path) -> None:
    challenges, solutions = real_tasks(data_dir, "evaluation", 4)
    demo = challenges[next(iter(challenges))]["train"][0]["input"]
    challenges["copy"] = {"train": [{"input": demo, "output": demo}], "test": [{"input": demo}]}
    solutions["copy"] = [demo]
    challenges["half"] = {"train": [{"input": demo, "output": demo}], "test": [{"input": demo}, {"input": [[1]]}]}
    solutions["half"] = [demo, [[2]]]  # one of two test outputs is the input: not a solved task
    source = write_source(tmp_path / "src", "evaluation", challenges, solutions)
    build(source, tmp_path / "ds", subsets=[], aug=3, log=lambda s: None)
    baseline = np.mean([all(t["input"] == s for t, s in zip(challenges[i]["test"], solutions[i]))
                        for i in challenges])
    test = open_store(tmp_path / "ds")["test"]
    assert (np.asarray(test.inputs)[:, 0] >= 2).all()  # test examples are never shifted ("half" has two)
    result = score(test, lambda b: (np.asarray(b.inputs), np.zeros(len(b)))).result()
    assert baseline == 1 / 6
    assert result["pass@1"] == result["pass@2"] == baseline
    assert result["pass@1_fractional"] == pytest.approx(1.5 / 6)  # the reference's per-output credit


def test_voting_takes_the_majority_and_breaks_ties_by_q_halt(data_dir: Path, tmp_path: Path) -> None:
    challenges, solutions = real_tasks(data_dir, "evaluation", 1)
    task_id = next(iter(challenges))
    challenges[task_id]["test"] = challenges[task_id]["test"][:1]
    solutions[task_id] = solutions[task_id][:1]
    source = write_source(tmp_path / "src", "evaluation", challenges, solutions)
    build(source, tmp_path / "ds", subsets=[], aug=5, test_fraction=1.0, log=lambda s: None)
    test = open_store(tmp_path / "ds")["test"]
    batch = next(eval_batches(test, 100))
    assert len(batch) == 6  # one test input x (identity + 5 augmentations)
    truth = np.asarray(solutions[task_id][0], dtype=np.uint8)
    wrong = (truth + 1) % 10

    def run(grids: list, q: list) -> ArcScorer:
        scorer = ArcScorer(test)
        preds = [np.zeros(900, np.uint8) if g is None else encode(scorer.augs[int(p)].apply(g))
                 for g, p in zip(grids, batch.puzzle_ids)]
        scorer.add(batch, np.stack(preds), np.array(q, dtype=np.float32))
        return scorer

    majority = run([wrong, wrong, wrong, truth, truth, None], [5, 5, 5, -5, -5, 9])
    assert [g.tolist() for g in majority.ranked(task_id, 0)] == [wrong.tolist(), truth.tolist()]
    assert majority.invalid == 1  # the empty crop did not vote
    assert (majority.result()["pass@1"], majority.result()["pass@2"]) == (0.0, 1.0)
    tie = run([wrong, wrong, truth, truth, None, None], [3, 3, 4, 4, 0, 0])
    assert (tie.result()["pass@1"], tie.result()["pass@2"]) == (1.0, 1.0)
    tie = run([wrong, wrong, truth, truth, None, None], [4, 4, 3, 3, 0, 0])
    assert (tie.result()["pass@1"], tie.result()["pass@2"]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="rows"):
        ArcScorer(test).add(Batch(batch.inputs, batch.labels, batch.puzzle_ids), batch.labels, np.zeros(6))


def test_submission_has_the_arc_prize_shape(store: Path, tmp_path: Path) -> None:
    test = open_store(store)["test"]
    scorer = score(test, lambda b: (np.asarray(b.labels), np.zeros(len(b))))
    sub = submission(scorer)
    side = read_sidecar(test.path)
    assert list(sub) == list(side["tasks"])
    for task_id, attempts in sub.items():
        assert len(attempts) == len(side["tasks"][task_id]["test_outputs"])
        for i, entry in enumerate(attempts):
            assert set(entry) == {"attempt_1", "attempt_2"}
            assert entry["attempt_1"] == side["tasks"][task_id]["test_outputs"][i]
            assert all(type(v) is int for row in entry["attempt_2"] for v in row)
    empty = submission(ArcScorer(test))  # no predictions: still one entry per test input
    assert all(e == {"attempt_1": [[0]], "attempt_2": [[0]]} for v in empty.values() for e in v)
    path = write_submission(sub, tmp_path / "out" / "submission.json")
    assert json.loads(path.read_text()) == sub
    assert [p.name for p in path.parent.iterdir()] == ["submission.json"]
