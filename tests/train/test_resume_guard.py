"""Resume stays exact after the memory guard acted: the checkpoint records the micro-batch and the
dtype in use, and a resumed run continues with them."""

import json
import os
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train.checkpoint import list_checkpoints
from trmkit.train.execution import resume_micro_batch

CONFIG = """
run: {seed: 3, threads: 1, dtype: auto, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 2, L_cycles: 2, halt_max_steps: 3, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 4, lr: 3e-3, warmup_steps: 2, ema_decay: 0.9, checkpoint_every: 1,
        checkpoint_minutes: 0, keep_checkpoints: 5, log_every: 1}
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_guard")
    build_sudoku("generate", root / "data", num_generate=16, givens="40-45", test_fraction=0.25,
                 seed=5, log=lambda m: None)
    (root / "cfg.yaml").write_text(CONFIG)
    return root


def train(root, run_dir, *extra):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(root / "cache")}
    done = procs.run([sys.executable, "-m", "trmkit.cli", "train", str(root / "cfg.yaml"),
                      f"run.dir={run_dir}", f"data.path={root / 'data'}", *extra],
                     capture_output=True, text=True, env=env, timeout=SAFETY_TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_resume_continues_at_the_checkpoints_micro_batch_and_dtype_bit_for_bit(root):
    # the uninterrupted run at micro-batch 2 (as if the guard had shrunk it from 8)
    train(root, root / "whole", "train.micro_batch=2", "run.dtype=float32")
    # the same run stopped after step 2; then resumed with nothing pinned: the plan would pick
    # micro-batch 8 and measure the dtype again, but the checkpoint says 2 and float32
    train(root, root / "parts", "train.micro_batch=2", "run.dtype=float32", "train.max_steps=2")
    meta = json.loads((list_checkpoints(root / "parts")[-1] / "meta.json").read_text())
    assert meta["execution"] == {"micro_batch": 2, "dtype": "float32", "grad_checkpointing": False}
    out = train(root, root / "parts", "--resume", str(root / "parts"), "train.max_steps=4", "train.micro_batch=0",
                "run.dtype=auto")  # the run's config.yaml pins both: unpinned here, as the preset has them
    assert "resume: micro_batch=2" in out and "resume: dtype=float32" in out
    a, b = (load_file(str(root / name / "weights.safetensors")) for name in ("whole", "parts"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_larger_saved_micro_batch_than_the_budget_allows_is_said_plainly():
    lines = []
    assert resume_micro_batch(4, {"execution": {"micro_batch": 16}}, lines.append) == 4
    assert "not bitwise identical" in lines[0]
    assert resume_micro_batch(4, {}, lines.append) == 4 and len(lines) == 1


def test_evaluation_that_fails_to_allocate_is_retried_at_half_the_batch(root, monkeypatch):
    from trmkit import config as config_mod, hardware
    from trmkit.train import evaluate, session

    cfg = config_mod.load(root / "cfg.yaml", [f"data.path={root / 'data'}", f"run.dir={root / 'eval-run'}",
                                              "run.dtype=float32"])
    s = session.prepare(cfg, hardware.probe(), log=lambda m: None)
    s.run.meter.stop()
    assert int(s.run.plan.eval_batch.value) >= 4
    clean = evaluate.run_eval(s)
    real, sizes = evaluate.evaluate, []

    def small_only(model, batches, ctx, blank_id, scorer=None):
        batches = list(batches)
        sizes.append(len(batches[0].inputs))
        if sizes[-1] > 2:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes")
        return real(model, batches, ctx, blank_id, scorer)

    monkeypatch.setattr(evaluate, "evaluate", small_only)
    lines = []
    again = evaluate.run_eval(s, log=lines.append)
    assert s.run.eval_batch <= 2 and sizes[-1] <= 2 and len(lines) == len(sizes) - 1 >= 1
    assert again == pytest.approx(clean)
