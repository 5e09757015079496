"""The task seam: a toy task declared in this file builds, trains and is scored through the CLI,
with no change to the trainer or the planner; the built-in tasks are registered; eval-only stores
and the vocabulary check."""

import json
from dataclasses import dataclass

import numpy as np
import pytest

from trmkit import cli, registry
from trmkit.data.store import SplitArrays, write_store
from trmkit.tasks.base import Task
from trmkit.tasks.options import BuildOptions, option

VOCAB = ("<pad>", "0", "1", "2", "3")
TINY = """
run: {seed: 0, threads: 1, compile: "off"}
model: {mixer: mlp_t, hidden_size: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 16, max_steps: 6, lr: 1.0e-3, warmup_steps: 2, eval_every: 0, log_every: 2,
        checkpoint_minutes: 0, ema_decay: 0.0}
"""


def _arrays(rng, n):  # the label is the input shifted by one symbol: a per-position task
    inputs = rng.integers(1, 5, size=(n, 6))
    return SplitArrays(inputs=inputs, labels=(inputs % 4) + 1, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


@dataclass(frozen=True, kw_only=True)
class ToyOptions(BuildOptions):
    count: int = option(20, "examples in the test split")


def _build(args: ToyOptions, log) -> None:
    rng = np.random.default_rng(args.seed)
    splits = {"test": _arrays(rng, args.count)}
    if args.test_fraction < 1:
        splits["train"] = _arrays(rng, 4 * args.count)
    write_store(args.out, splits, {"task": "toy-shift", "vocab": list(VOCAB), "pad_id": 0, "ignore_label_id": 0,
                                   "blank_id": None, "num_puzzle_identifiers": 1, "source": "toy", "build": {}})


class CountingScorer:
    """Counts the examples it was shown and the rows it saw (so the test can check both)."""

    def __init__(self, split):
        self.rows = []

    def add(self, batch, preds, q_halt):
        assert preds.shape == batch.inputs.shape and q_halt.shape == (len(batch),)
        self.rows.extend(int(r) for r in batch.rows)

    def result(self):
        return {"toy_examples": len(self.rows), "toy_rows_in_order": float(self.rows == sorted(self.rows))}


TOY = Task(name="toy-shift", shape="grid", summary="a toy task from a test file",
           options=ToyOptions, build=_build, scorer=CountingScorer)


@pytest.fixture
def toy():
    registry.register(TOY)
    yield TOY
    registry.TASKS.pop(TOY.name, None)


def test_builtin_tasks_are_registered_with_presets_that_exist():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for name in ("sudoku", "maze", "arc"):
        task = registry.get(name)
        assert task.shape == "grid"
        for preset in task.presets.values():
            assert (root / preset).is_file(), preset
    email = registry.get("email")  # the e-mail task lives in trmkit/email/ and brings its report plots
    assert email.shape == "classify" and email.plots is not None and email.scorer is not None
    with pytest.raises(KeyError, match="known tasks are"):
        registry.get("chess")
    with pytest.raises(ValueError, match="shape"):
        Task(name="x", shape="video", summary="", options=BuildOptions, build=lambda a, log: None)


def test_a_toy_task_trains_and_is_scored_without_touching_the_trainer(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli.main(["data", "toy-shift", "--out", str(tmp_path / "d"), "--count", "12"]) == 0
    (tmp_path / "toy.yaml").write_text(TINY)
    monkeypatch.chdir(tmp_path)  # a relative data.path, resolved once and stored absolute
    assert cli.main(["train", "toy.yaml", "run.dir=run", "data.path=d"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["toy_examples"] == 12 and summary["toy_rows_in_order"] == 1.0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert f"path: {tmp_path / 'd'}" in saved
    assert json.loads((tmp_path / "run" / "data_meta.json").read_text())["task"] == "toy-shift"

    # evaluation from another directory, on a store built for evaluation only: clean JSON on stdout
    monkeypatch.chdir(tmp_path / "d")
    assert cli.main(["data", "toy-shift", "--out", str(tmp_path / "e"), "--count", "5", "--test-fraction", "1",
                     "--seed", "3"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "e")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["toy_examples"] == 5 and result["samples"] == 5


def test_eval_refuses_a_store_of_another_shape(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli.main(["data", "toy-shift", "--out", str(tmp_path / "d"), "--count", "12"]) == 0
    (tmp_path / "toy.yaml").write_text(TINY)
    assert cli.main(["train", str(tmp_path / "toy.yaml"), f"run.dir={tmp_path / 'run'}",
                     f"data.path={tmp_path / 'd'}", "train.max_steps=1"]) == 0
    assert cli.main(["data", "maze", "--size", "5", "--num", "3", "--min-path", "2", "--test-fraction", "1",
                     "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "does not fit run" in err and "task 'maze'" in err and "seq_len 25" in err


def test_training_on_an_eval_only_store_is_refused_with_the_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli.main(["data", "sudoku", "--num", "6", "--givens", "40", "--test-fraction", "1",
                     "--out", str(tmp_path / "s")]) == 0
    (tmp_path / "t.yaml").write_text(TINY)
    capsys.readouterr()
    assert cli.main(["train", str(tmp_path / "t.yaml"), f"run.dir={tmp_path / 'run'}",
                     f"data.path={tmp_path / 's'}"]) == 2
    assert "holds only a test split" in capsys.readouterr().err
