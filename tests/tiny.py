"""Tiny inputs and configs that several test files build runs from: a pairs task, an e-mail CSV, and the
smallest configs that train on them in a second."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

PAIRS_TINY = """
run: {seed: 0, threads: 1, compile: "off"}
model: {mixer: mlp_t, hidden_size: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 4, lr: 1.0e-3, warmup_steps: 1, eval_every: 0, log_every: 2,
        checkpoint_minutes: 0, ema_decay: 0.0}
"""
EMAIL_TINY = """
run: {seed: 0, threads: 1, compile: "off", dtype: float32}
model: {mixer: attention, hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2,
        puzzle_emb_len: 0}
train: {batch_size: 16, max_steps: 2, lr: 2.0e-3, warmup_steps: 1, eval_every: 0, log_every: 1,
        checkpoint_minutes: 0, ema_decay: 0.0}
"""


def mail_csv(path: Path) -> Path:
    """60 messages, spam and ham alternating, each of 12 words from its class's 8: separable in a few steps."""
    rng = random.Random(0)
    words = {"spam": "win money prize offer cheap click free cash".split(),
             "ham": "meeting report project team lunch schedule notes draft".split()}
    rows = [f"{' '.join(rng.choice(words[label]) for _ in range(12))},{label}" for label in ("spam", "ham") * 30]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def pairs_jsonl(path: Path) -> list[dict]:
    """24 pairs of 2 x 3 grids of 0..3, the output each cell's 3 - x; written as JSONL, returned."""
    rng = np.random.default_rng(0)
    pairs = [{"input": g.tolist(), "output": (3 - g).tolist()} for g in rng.integers(0, 4, size=(24, 2, 3))]
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return pairs
