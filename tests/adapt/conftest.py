"""The tiny run tests/adapt start from: a 76k-parameter model trained 4 steps on 16 generated Sudoku, and a new
source of 12 others (more givens)."""

import pytest

from trmkit import config as config_mod
from trmkit import hardware, registry
from trmkit.api import task_hooks
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train.run import run

CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 4, lr: 3e-3, warmup_steps: 1, ema_decay: 0.9, checkpoint_every: 0,
        checkpoint_minutes: 0, log_every: 1, micro_batch: 8, eval_every: 0}
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished tiny Sudoku run and a new source (other puzzles, more givens)."""
    root = tmp_path_factory.mktemp("adapt")
    build_sudoku("generate", root / "orig", num_generate=16, givens="40-45", test_fraction=0.25, aug=1, seed=5,
                 log=lambda m: None)
    build_sudoku("generate", root / "new", num_generate=12, givens="50-55", test_fraction=0.25, aug=1, seed=9,
                 log=lambda m: None)
    (root / "cfg.yaml").write_text(CONFIG)
    cfg = config_mod.load(root / "cfg.yaml", [f"data.path={root / 'orig'}", f"run.dir={root / 'run'}"],
                          registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    return root
