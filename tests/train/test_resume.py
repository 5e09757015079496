"""Never lose work: SIGKILL + resume equals an uninterrupted run, SIGINT saves, damage is survived.

These tests run the real `trmkit` command in subprocesses on a tiny Sudoku store.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.monitor import read_metrics
from trmkit.train.checkpoint import list_checkpoints, load_checkpoint

CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 2, L_cycles: 2, halt_max_steps: 3, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 14, lr: 3e-3, warmup_steps: 2, ema_decay: 0.9, checkpoint_every: 1,
        checkpoint_minutes: 0, keep_checkpoints: 3, log_every: 1, micro_batch: 8}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    build_sudoku("generate", root / "data", num_generate=24, givens="40-45", test_fraction=0.25,
                 aug=1, seed=5, log=lambda m: None)
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def trmkit(*args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return procs.start([sys.executable, "-m", "trmkit.cli", *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, **kw)


def train_args(setup, run_dir, *extra):
    return ["train", str(setup / "cfg.yaml"), f"run.dir={run_dir}", f"data.path={setup / 'data'}", *extra]


def wait_for_checkpoint(run_dir: Path, step: int, proc, timeout=SAFETY_TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = [int(p.name.split("-")[1]) for p in list_checkpoints(run_dir)]
        if done and max(done) >= step:
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early:\n{proc.stdout.read()}")
        time.sleep(0.02)
    raise AssertionError("no checkpoint in time")


def final_state(run_dir: Path) -> dict:
    ckpt = load_checkpoint(list_checkpoints(run_dir)[-1])
    assert ckpt.step == 14
    return {k: v for k, v in ckpt.tensors.items() if k.startswith(("model.", "ema.", "opt.", "carry."))}


def test_sigkill_and_resume_equals_an_uninterrupted_run(setup):
    whole, killed = setup / "whole", setup / "killed"
    # The uninterrupted run beside the one that is killed (one thread each, own run dirs): the whole one
    # is read only after it ends, and the pair takes about the wall time of one.
    reference, proc = trmkit(*train_args(setup, whole)), trmkit(*train_args(setup, killed))
    try:
        wait_for_checkpoint(killed, 6, proc)
    except BaseException:
        procs.kill_group(reference)  # no run left behind when the wait fails
        raise
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    out = procs.communicate(reference, SAFETY_TIMEOUT)[0]
    assert "final:" in out, out
    # the kill landed mid-run (measured: at step 6 in 30 of 30 tries, also beside 4 busy processes)
    assert proc.returncode == -signal.SIGKILL
    killed_at = load_checkpoint(list_checkpoints(killed)[-1]).step
    logged = [r["step"] for r in read_metrics(killed / "metrics.jsonl")]
    assert 6 <= killed_at < 14 and 6 <= max(logged) < 14, (killed_at, logged)
    assert not (killed / "summary.json").exists() and not (killed / "weights.safetensors").exists()
    out = procs.communicate(trmkit("train", "--resume", str(killed)), SAFETY_TIMEOUT)[0]
    assert "resumed from" in out and f"step-{killed_at:08d}" in out and "final:" in out, out
    assert (killed / "summary.json").is_file()
    a, b = final_state(whole), final_state(killed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key  # bitwise: deterministic float32 on one thread
    wa, wb = load_file(str(whole / "weights.safetensors")), load_file(str(killed / "weights.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sigint_finishes_the_step_saves_and_exits_130(setup):
    run = setup / "interrupted"
    proc = trmkit(*train_args(setup, run, "train.max_steps=100000", "train.checkpoint_every=0"))
    deadline = time.time() + SAFETY_TIMEOUT
    while not (run / "metrics.jsonl").exists() or len((run / "metrics.jsonl").read_text().splitlines()) < 4:
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
    assert proc.returncode == 130, out  # 128 + SIGINT: saved, but not finished
    assert "SIGINT received" in out and "trmkit train --resume" in out
    ckpts = list_checkpoints(run)
    assert len(ckpts) == 1 and load_checkpoint(ckpts[0]).step > 0


def test_corrupted_newest_checkpoint_falls_back_to_the_previous(setup):
    run = setup / "damaged"
    first = trmkit(*train_args(setup, run, "train.max_steps=5"))
    procs.communicate(first, SAFETY_TIMEOUT)
    assert first.returncode == 0
    newest = list_checkpoints(run)[-1]
    data = (newest / "tensors.safetensors").read_bytes()
    (newest / "tensors.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    out = procs.communicate(trmkit("train", "--resume", str(run), "train.max_steps=6"), SAFETY_TIMEOUT)[0]
    assert "step-00000005" in out and "resumed from" in out and "step-00000004" in out, out
    assert load_checkpoint(list_checkpoints(run)[-1]).step == 6


def test_resume_with_a_different_model_names_the_keys(setup):
    run = setup / "damaged"
    proc = trmkit("train", "--resume", str(run), "model.hidden_size=64")
    out = procs.communicate(proc, SAFETY_TIMEOUT)[0]
    assert proc.returncode == 2
    assert "model.hidden_size" in out and "32" in out and "64" in out, out


def test_report_from_a_real_run(setup):
    run = setup / "whole"
    proc = procs.run([sys.executable, "-m", "trmkit.cli", "report", str(run)], capture_output=True,
                     text=True, timeout=SAFETY_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    pngs = sorted((run / "report").glob("*.png"))
    assert len(pngs) >= 4
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    md = (run / "report" / "report.md").read_text()
    assert "loss.png" in md and "cell_accuracy" in md
