"""Resume is explicit: a run.dir that holds a run is never silently resumed or overwritten, --resume needs a
checkpoint, a resume with nothing to train leaves the run's files alone, a changed store is refused, and a
run stopped by a signal saves and exits 128 + the signal's number.

Tiny Sudoku runs of a few steps, through the real command (`cli.main`, and one subprocess for SIGTERM)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import SAFETY_TIMEOUT
import trmkit
from trmkit import cli, procs
from trmkit.config import ConfigError
from trmkit.monitor import read_metrics
from trmkit.data.store import SplitArrays, open_split, write_store
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train.checkpoint import list_checkpoints
from trmkit.train.signals import exit_code

CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 2, lr: 3e-3, warmup_steps: 1, ema_decay: 0.0, checkpoint_every: 1,
        checkpoint_minutes: 0, keep_checkpoints: 2, log_every: 1, micro_batch: 8, eval_every: 0}
data: {eval_limit: 4}
"""


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build_sudoku("generate", tmp_path / "data", num_generate=12, givens="40-45", test_fraction=0.25,
                 aug=1, seed=5, log=lambda m: None)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    return tmp_path


def train(root: Path, run: Path, *extra: str) -> int:
    return cli.main(["train", str(root / "cfg.yaml"), f"run.dir={run}", f"data.path={root / 'data'}", *extra])


def test_train_into_a_run_dir_that_holds_a_run_is_refused_and_force_starts_afresh(root, capsys):
    run = root / "run"
    assert train(root, run) == 0
    (run / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert train(root, run) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and f"--resume {run}" in err and "--force" in err, err
    assert list_checkpoints(run)[-1].name == "step-00000002"  # nothing touched
    assert train(root, run, "--force", "train.max_steps=1") == 0
    assert "deleted" in capsys.readouterr().out
    assert [p.name for p in list_checkpoints(run)] == ["step-00000001"]  # the old run's checkpoints are gone
    assert max(r["step"] for r in read_metrics(run / "metrics.jsonl")) == 1  # new, not appended to the old
    assert (run / "notes.txt").read_text() == "mine"  # files the run did not write stay


def test_resume_without_a_checkpoint_is_refused(root, capsys):
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text((root / "cfg.yaml").read_text())  # a run stopped before its first save
    assert cli.main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint" in err and "--force" in err, err
    assert not (run / "metrics.jsonl").exists()


def test_a_resume_with_nothing_to_train_leaves_the_summary_byte_identical(root, capsys):
    run = root / "run"
    assert train(root, run) == 0
    before = (run / "summary.json").read_bytes(), (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "reached train.max_steps=2" in out and "train.max_steps=4" in out, out
    assert ((run / "summary.json").read_bytes(), (run / "metrics.jsonl").read_bytes()) == before
    assert list_checkpoints(run)[-1].name == "step-00000002"


def test_fit_mirrors_the_command_with_resume_and_force(root):
    said = []
    config, overrides = root / "cfg.yaml", {"data.path": root / "data", "run.dir": root / "run"}
    run = trmkit.fit(config, overrides, log=said.append)
    with pytest.raises(ConfigError, match="already holds a run.*force=True"):
        trmkit.fit(config, overrides, log=said.append)
    before = (run.dir / "summary.json").read_bytes()
    assert trmkit.fit(config, overrides, resume=True, log=said.append).dir == run.dir
    assert any("reached train.max_steps=2" in line for line in said)
    assert (run.dir / "summary.json").read_bytes() == before
    trmkit.fit(config, {**overrides, "train.max_steps": 1}, force=True, log=said.append)
    assert [p.name for p in list_checkpoints(run.dir)] == ["step-00000001"]


def _classify_split(rng, n):
    y = rng.integers(0, 2, size=n)
    x = rng.integers(4, 40, size=(n, 6))
    x[:, 0] = y + 1
    labels = np.full((n, 6), 2)
    labels[:, 0] = y
    return SplitArrays(inputs=x, labels=labels, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


def test_an_early_stopped_run_says_so_and_does_not_train_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    data = write_store(tmp_path / "d", {s: _classify_split(rng, n) for s, n in (("train", 64), ("val", 16),
                                                                              ("test", 16))},
                       {"task": "email", "vocab": [f"t{i}" for i in range(40)], "pad_id": 0, "ignore_label_id": 2,
                        "blank_id": None, "num_puzzle_identifiers": 1, "classes": ["a", "b"], "source": "synthetic",
                        "build": {}})
    (tmp_path / "c.yaml").write_text(CONFIG.replace("puzzle_emb_len: 2", "puzzle_emb_len: 0"))
    run = tmp_path / "run"
    stop = ["train.lr=0", "train.eval_every=1", "train.early_stop_evals=1", "train.max_steps=50",
            "train.best_metric=macro_f1", "train.restore_best=false"]
    assert cli.main(["train", str(tmp_path / "c.yaml"), f"run.dir={run}", f"data.path={data}", *stop]) == 0
    assert "early stop:" in capsys.readouterr().out
    stopped_at = json.loads((run / "summary.json").read_text())["steps"]
    assert stopped_at < 50
    before = (run / "summary.json").read_bytes()
    assert cli.main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"stopped early at step {stopped_at}" in out and "train.early_stop_evals=3" in out, out
    assert (run / "summary.json").read_bytes() == before
    assert list_checkpoints(run)[-1].name == f"step-{stopped_at:08d}"  # not one step more


def test_a_changed_store_is_refused_on_resume_and_eval_naming_the_split(root, capsys):
    run = root / "run"
    assert train(root, run) == 0
    capsys.readouterr()
    build_sudoku("generate", root / "data", num_generate=20, givens="40-45", test_fraction=0.25,
                 aug=1, seed=6, force=True, log=lambda m: None)  # rebuilt in place with other settings
    assert cli.main(["train", "--resume", str(run), "train.max_steps=4"]) == 2
    err = capsys.readouterr().err
    assert "the store changed since run" in err and "split test had 3 examples, now 5" in err, err
    assert "Rebuild the store as it was" in err and "--force" in err
    assert list_checkpoints(run)[-1].name == "step-00000002"  # nothing trained on the new store
    assert cli.main(["eval", str(run)]) == 2
    assert "split train had 18 examples, now 30" in capsys.readouterr().err


def test_a_store_rebuilt_with_the_same_counts_is_refused_by_its_fingerprint(root, capsys):
    run = root / "run"
    assert train(root, run) == 0
    build_sudoku("generate", root / "data", num_generate=12, givens="40-45", test_fraction=0.25,
                 aug=1, seed=7, force=True, log=lambda m: None)
    capsys.readouterr()
    assert cli.main(["eval", str(run)]) == 2
    assert "has other contents" in capsys.readouterr().err


def test_a_run_or_store_from_before_fingerprints_is_warned_about_not_refused(root, capsys):
    run = root / "run"
    assert train(root, run) == 0
    identity = json.loads((run / "data_meta.json").read_text())
    del identity["splits"]
    (run / "data_meta.json").write_text(json.dumps(identity))
    for split in ("train", "test"):
        meta = json.loads((root / "data" / split / "meta.json").read_text())
        del meta["fingerprint"]
        (root / "data" / split / "meta.json").write_text(json.dumps(meta))
    assert open_split(root / "data" / "train").meta.fingerprint == ""
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "train.max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert "records no fingerprint of its store" in out
    assert list_checkpoints(run)[-1].name == "step-00000003"
    assert train(root, root / "new") == 0  # a new run on the old store: trained, with the warning
    assert "was built before stores carried fingerprints (split test, train)" in capsys.readouterr().out


def test_a_stop_signal_maps_to_its_exit_code():
    assert (exit_code("SIGINT"), exit_code("SIGTERM"), exit_code(None)) == (130, 143, 0)


def test_sigterm_saves_says_how_to_resume_and_exits_143(root):
    run, log = root / "run", root / "out.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as out:
        proc = procs.start([sys.executable, "-m", "trmkit.cli", "train", str(root / "cfg.yaml"), f"run.dir={run}",
                            f"data.path={root / 'data'}", "train.max_steps=100000"],
                           stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.time() + SAFETY_TIMEOUT
        while not list_checkpoints(run):  # bounded by steps: the first checkpoint is step 1's
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        procs.communicate(proc, SAFETY_TIMEOUT)
    except BaseException:
        procs.kill_group(proc)
        raise
    text = log.read_text()
    assert proc.returncode == 143, text
    assert "stopped by SIGTERM" in text and f"trmkit train --resume {run}" in text, text
    assert not (run / "summary.json").exists() and list_checkpoints(run)
