"""Several processes train one run (torchrun, gloo): equal to one process at the same global batch,
disjoint data shares, exact resume after SIGKILL of a rank, resume at another world size, SIGINT.

The runs are real `torchrun -m trmkit train` launches on a tiny Sudoku store, one thread per rank.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit import config as config_mod
from trmkit.config import ConfigError
from trmkit.data.store import BUILDER_META_KEYS, SplitArrays, open_split, write_store
from trmkit.data.stream import SampleStream, eval_batches
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train import distributed
from trmkit.train.checkpoint import list_checkpoints, load_checkpoint

CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off", dist_timeout: 60}
model: {hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 2, L_cycles: 2, halt_max_steps: 1, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 6, lr: 3e-3, warmup_steps: 2, ema_decay: 0.0, checkpoint_every: 0,
        checkpoint_minutes: 0, keep_checkpoints: 3, log_every: 1, micro_batch: 2, puzzle_emb_lr: 1e-2}
"""


STOPPED_WITHIN = 300  # seconds after a rank's SIGKILL for the whole run to stop (dist_timeout 60 + teardown)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    build_sudoku("generate", root / "sudoku", num_generate=24, givens="40-45", test_fraction=0.25,
                 aug=1, seed=5, log=lambda m: None)
    own_identifiers(root / "sudoku", root / "data")
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def own_identifiers(src: Path, out: Path) -> None:
    """The store again, every puzzle with its own identifier (as ARC's augmented tasks have), so
    that a step trains many rows of the sparse puzzle embedding (18 training groups)."""
    splits, first = {}, 1
    for name in ("train", "test"):
        s = open_split(src / name)
        n = len(s.puzzle_identifiers)
        splits[name] = SplitArrays(inputs=np.array(s.inputs), labels=np.array(s.labels),
                                   puzzle_identifiers=np.arange(first, first + n),
                                   puzzle_indices=np.array(s.puzzle_indices), group_indices=np.array(s.group_indices))
        first += n
    meta = json.loads((src / "train" / "meta.json").read_text())
    keys = {k: meta[k] for k in BUILDER_META_KEYS}
    write_store(out, splits, {**keys, "num_puzzle_identifiers": first})


def launch(nproc: int, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, "-m", "trmkit.cli", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "trmkit", *args]
    return procs.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def train_args(setup: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["train", str(setup / "cfg.yaml"), f"run.dir={run_dir}", f"data.path={setup / 'data'}", *extra]


def finish(proc: subprocess.Popen) -> str:
    out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
    assert proc.returncode == 0, out
    return out


def last_checkpoint(run_dir: Path):
    return load_checkpoint(list_checkpoints(run_dir)[-1])


def test_world_from_env_and_the_global_batch():
    assert not distributed.world_from_env({}).active
    w = distributed.world_from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (w.rank, w.size, w.local_rank, w.local_size, w.main) == (3, 4, 1, 2, False)
    with pytest.raises(ConfigError, match="RANK=5"):
        distributed.world_from_env({"WORLD_SIZE": "2", "RANK": "5"})
    cfg = config_mod.replace(config_mod.from_dict({}), "train", batch_size=10)
    assert distributed.local_config(cfg, distributed.World(0, 2, 0, 2)).train.batch_size == 5
    with pytest.raises(ConfigError, match=r"multiple of 4 \(e\.g\. train\.batch_size=8"):
        distributed.local_config(cfg, distributed.World(0, 4, 0, 4))
    with pytest.raises(ConfigError, match=r"e\.g\. train\.batch_size=4\)"):  # fewer slots than processes
        distributed.local_config(config_mod.replace(cfg, "train", batch_size=1), distributed.World(0, 4, 0, 4))


def test_rank_shares_are_disjoint_and_make_up_the_epoch(setup):
    split = open_split(setup / "data" / "train")
    G = split.num_groups
    whole = SampleStream(split, seed=7).take(2 * G)
    for world in (2, 3, 4):
        rows = []
        for rank in range(world):
            s = SampleStream(split, seed=7, rank=rank, world=world)
            rows.append(s.take(s.share).inputs)  # one epoch of this rank's share
        got = np.concatenate(rows)
        assert len(got) == G
        assert sorted(map(bytes, got)) == sorted(map(bytes, whole.inputs[:G])), world
    # a position moves to another world size without skipping a sample nobody had served
    old = [SampleStream(split, seed=7, rank=r, world=2) for r in range(2)]
    old[0].take(5), old[1].take(3)  # served: old rank 0 positions 0..8 (even), rank 1 positions 1, 3, 5
    for rank in range(3):  # position 7 is the first nobody served: each new rank starts at its first >= 7
        new = SampleStream(split, seed=7, rank=rank, world=3)
        position = new.position_for([o.state_dict() for o in old])
        first = position["index"] * 3 + rank
        assert position["epoch"] == 0 and 7 <= first < 7 + 3, (rank, position)
        new.load_state_dict(position)
    one = SampleStream(split, seed=7)
    one.take(G - 1)  # served every position of epoch 0 but the last, G - 1 (odd: G = 18)
    after = [SampleStream(split, seed=7, rank=r, world=2).position_for([one.state_dict()]) for r in range(2)]
    assert after[0] == {"epoch": 1, "index": 0, "seed": 7, "rank": 0, "world": 2}  # its share was all served
    assert after[1]["epoch"] == 0 and after[1]["index"] * 2 + 1 == G - 1


def test_two_ranks_equal_one_process_at_the_same_global_batch(setup):
    one, two = setup / "one", setup / "two"
    out1 = finish(launch(1, *train_args(setup, one)))
    out2 = finish(launch(2, *train_args(setup, two)))
    assert "distributed: 2 processes" in out2 and "backend gloo" in out2, out2
    assert "keeps the global batch of 8: 2 processes x 4 slots each" in out2, out2
    assert "peak RSS per rank" in out2
    a, b = last_checkpoint(one), last_checkpoint(two)
    assert a.step == b.step == 6
    for key in a.tensors:
        if key.startswith("model."):  # sparse puzzle embeddings included (model.puzzle_emb.weight)
            assert torch.allclose(a.tensors[key], b.tensors[key], atol=1e-5, rtol=0), key
    emb = "model.puzzle_emb.weight"
    moved = (a.tensors[emb] != 0).any(1).sum()
    assert moved >= 8, "the sparse embedding rows must have been trained for the test to mean anything"
    # the logged loss is every slot's, not rank 0's alone
    assert "final:" in out1 and "final:" in out2


def rank_pid(launcher: subprocess.Popen, rank: int, timeout: float = SAFETY_TIMEOUT) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank) and "trmkit" in " ".join(child.cmdline()):
                    return child.pid
            except psutil.Error:
                continue
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} not found")


def wait_for_checkpoint(run_dir: Path, step: int, proc, timeout: float = SAFETY_TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = [int(p.name.split("-")[1]) for p in list_checkpoints(run_dir)]
        if done and max(done) >= step:
            return
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError("no checkpoint in time")


ACT = ["model.halt_max_steps=3", "train.max_steps=10", "train.checkpoint_every=1", "train.ema_decay=0.9"]


def test_sigkill_of_a_rank_stops_the_run_and_resume_is_exact(setup):
    whole, killed = setup / "whole2", setup / "killed2"
    finish(launch(2, *train_args(setup, whole, *ACT)))
    proc = launch(2, *train_args(setup, killed, *ACT))
    wait_for_checkpoint(killed, 4, proc)
    os.kill(rank_pid(proc, 1), signal.SIGKILL)
    t0 = time.time()
    out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
    # the others stopped, not hung: well inside the group timeout (run.dist_timeout: 60 s here) plus
    # torchrun's own teardown, with room for a loaded machine
    assert proc.returncode != 0 and time.time() - t0 < STOPPED_WITHIN, out
    # a clear message: ours (a rank whose collective failed), or torchrun's naming the rank that died
    assert "another process of this run stopped" in out or "Signal 9 (SIGKILL)" in out, out
    at = last_checkpoint(killed).step  # the newest checkpoint still verifies
    assert 4 <= at < 10, at
    out = finish(launch(2, "train", "--resume", str(killed)))
    assert f"step-{at:08d}" in out and "resumed from" in out, out
    a, b = last_checkpoint(whole), last_checkpoint(killed)
    assert a.step == b.step == 10 and a.tensors.keys() == b.tensors.keys()
    assert any(k.startswith("rank1/carry.") for k in a.tensors)  # every rank's carry is in the checkpoint
    for key in a.tensors:
        assert torch.equal(a.tensors[key], b.tensors[key]), key  # bitwise: carries, RNG, optimizer, EMA


def test_resume_at_another_world_size_says_what_is_not_exact(setup):
    run = setup / "whole2"  # 2 ranks, 10 steps
    out = finish(launch(1, "train", "--resume", str(run), "train.max_steps=12"))
    assert "written by 2 process(es), this run has 1" in out and "Not bit-identical" in out, out
    assert last_checkpoint(run).step == 12


def test_sigint_on_the_launcher_saves_once_and_stops_every_rank(setup):
    run = setup / "interrupted"  # through the convenience: `trmkit train --nproc 2` becomes torchrun
    proc = launch(1, *train_args(setup, run, "--nproc", "2", "train.max_steps=100000", "model.halt_max_steps=3"))
    deadline = time.time() + SAFETY_TIMEOUT
    while not (run / "metrics.jsonl").exists() or (run / "metrics.jsonl").stat().st_size < 3000:
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
    assert "launch: -m torch.distributed.run --standalone --nproc-per-node=2" in out, out
    assert "distributed: 2 processes" in out and "SIGINT received" in out and "trmkit train --resume" in out, out
    ckpts = list_checkpoints(run)
    assert len(ckpts) == 1 and load_checkpoint(ckpts[0]).step > 0  # saved once
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])]


def test_evaluation_shares_read_every_batch_once(setup):
    split = open_split(setup / "data" / "test")
    whole = [b.rows.tolist() for b in eval_batches(split, 2)]
    shares = [[b.rows.tolist() for b in eval_batches(split, 2, None, r, 3)] for r in range(3)]
    assert sorted(sum(shares, [])) == sorted(whole) and shares[1][0] == whole[1]


EXIT_WITHIN = 60  # seconds from the summary to the last process gone (measured 0.4-0.6 s beside a hog)


def test_a_finished_run_leaves_at_once_beside_a_cpu_hog(setup):
    """A finished 2-rank run exits promptly while another program loads every core: no rank is left in
    interpreter teardown (DDP's Reducer freeing the gloo group could deadlock there; cli._leave_after ends
    a rank with os._exit once its files are written). One run: the suite's other 2-rank tests end the
    same way and fail on a rank that stays (tests/conftest.py), so a second run here cost 25-30 s of
    the suite's 10 minutes for little."""
    hog = [sys.executable, "-c", "while True: pass"]
    with procs.group(hog), procs.group(hog):
        run = setup / "leave"
        proc = launch(2, *train_args(setup, run, "train.max_steps=3"))
        deadline = time.time() + SAFETY_TIMEOUT
        while not (run / "summary.json").exists():
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
            time.sleep(0.05)
        written = time.time()
        out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
        assert proc.returncode == 0, out
        took = time.time() - written
        assert took < EXIT_WITHIN, f"the last process left {took:.0f} s after the summary"
        assert not procs.group_alive(proc.pid)  # torchrun and both ranks are gone
