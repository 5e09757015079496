"""predict stops a message early when its answer is sure: the level is fitted without labels, the
rule stops exactly the messages at or over it, and fitting costs the mailbox no counted steps."""

import numpy as np
import torch

from trmkit.config import ModelConfig
from trmkit.email import halting
from trmkit.email.bundle import Classifier
from trmkit.model.trm import TRM
from trmkit.tasks.classify.metrics import stablemax_probs


def probs(top: list[float], answers: list[int]) -> np.ndarray:
    """(n, 3) probabilities with the given top probability on the given class."""
    out = np.tile((1 - np.array(top))[:, None] / 2, (1, 3))
    out[np.arange(len(top)), answers] = top
    return out


def test_the_fitted_level_is_the_lowest_at_which_no_answer_changed_after_it():
    final = probs([0.9, 0.9, 0.9, 0.9], [0, 1, 2, 0])
    first = probs([0.97, 0.75, 0.6, 0.85], [0, 2, 1, 0])  # the two changed answers were at 0.75 and 0.6
    assert halting.fit_probability([first, final]) == 0.8
    assert halting.fit_probability([final, final]) == 0.5  # nothing changes: any answer may stop
    assert halting.fit_probability([probs([0.9999, 0.9, 0.9, 0.9], [1, 1, 2, 0]), final]) is None


def classifier(halt_probability=None) -> Classifier:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=3,
                      puzzle_emb_len=1, vocab_size=40, seq_len=8, num_puzzle_ids=1, num_classes=3)
    clf = Classifier(TRM(cfg), tokenizer=None, class_names=["a", "b", "c"], seq_len=8, tail=0, temperature=0.05)
    clf.halt_probability = halt_probability
    return clf


def test_a_message_stops_at_the_first_step_whose_answer_is_sure():
    rows = np.random.default_rng(0).integers(1, 40, (64, 8))
    steps: list[np.ndarray] = []
    every = classifier(None)
    every.halt = False
    every.logits(rows, every_step=steps)
    assert len(steps) == 3 and every.steps_run == 3 * 64
    top = np.stack([stablemax_probs(s.astype(np.float64), 0.05).max(1) for s in steps])  # (steps, n)
    level = float(np.median(top[0]))
    stop = np.where((top >= level).any(0), (top >= level).argmax(0), 2)  # each message's last step (0-based)
    assert 0 < (stop == 0).sum() < 64  # some stop at once, some go on
    sure = classifier(level)
    np.testing.assert_allclose(sure.logits(rows), np.stack(steps)[stop, np.arange(64)], rtol=1e-5, atol=1e-6)
    assert sure.steps_run == (stop + 1).sum()
    never = classifier(None)  # the halting head alone, at its initial bias of -5: every step
    np.testing.assert_allclose(never.logits(rows), steps[-1], rtol=1e-5, atol=1e-6)
    assert never.steps_run == 3 * 64


def test_fitting_reads_rows_not_labels_and_counts_no_work(tmp_path):
    clf = classifier(None)
    (tmp_path / "val").mkdir()
    np.save(tmp_path / "val" / "inputs.npy", np.random.default_rng(1).integers(1, 40, (halting.MIN_MESSAGES, 8)))
    clf.fit_halting(tmp_path)  # no labels.npy in the split: labels are never read
    assert clf.halt_probability in (*halting.GRID, None) and clf.steps_run == 0
    assert f"the {halting.MIN_MESSAGES} messages of" in clf.halt_fitted_on and clf.halt
    small = classifier(None)
    np.save(tmp_path / "val" / "inputs.npy", np.ones((halting.MIN_MESSAGES - 1, 8), dtype=np.int64))
    small.fit_halting(tmp_path)
    assert small.halt_probability is None and "not fitted" in small.halt_fitted_on
