"""The classifier's inference dtype: no bf16 measurement on a CPU without native bf16; elsewhere
one measurement per machine and model, cached (the check cost ~55 s per predict)."""

import numpy as np
import pytest

from trmkit.config import ModelConfig
from trmkit.email.bundle import Classifier
from trmkit.model.trm import TRM


def classifier(tmp_path, native: bool) -> Classifier:
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2,
                      puzzle_emb_len=1, vocab_size=40, seq_len=8, num_puzzle_ids=1, num_classes=3)
    clf = Classifier(TRM(cfg), tokenizer=None, class_names=["a", "b", "c"], seq_len=8, tail=0,
                     temperature=1.0, dtype="auto")
    clf.native_bf16, clf.cache_dir = native, tmp_path
    return clf


def test_no_native_bf16_means_float32_without_measuring(tmp_path, monkeypatch):
    clf, lines = classifier(tmp_path, native=False), []
    monkeypatch.setattr(Classifier, "measure_dtype", lambda *a, **k: pytest.fail("measured bf16 on a CPU without it"))
    assert clf.choose_dtype(np.ones((4, 8), dtype=np.int64), lines.append) == "float32"
    assert "no native bf16" in lines[0]


def test_a_measured_choice_is_kept_per_machine_and_model(tmp_path, monkeypatch):
    calls = []

    def measure(self, inputs, log=None):
        calls.append(len(inputs))
        return "bfloat16"

    monkeypatch.setattr(Classifier, "measure_dtype", measure)
    inputs = np.ones((300, 8), dtype=np.int64)
    assert classifier(tmp_path, native=True).choose_dtype(inputs) == "bfloat16"
    assert calls == [32]  # a slice of the batch, not all of it
    lines = []
    assert classifier(tmp_path, native=True).choose_dtype(inputs, lines.append) == "bfloat16"
    assert calls == [32] and "measured on this machine before" in lines[0]  # the cache answered


def test_the_real_measurement_compares_both_dtypes_on_the_same_batch(tmp_path):
    clf = classifier(tmp_path, native=True)
    lines = []
    choice = clf.measure_dtype(np.random.default_rng(0).integers(1, 40, (8, 8)), lines.append)
    assert choice in ("float32", "bfloat16") and "float32" in lines[0] and "bf16" in lines[0]
    assert clf.steps_run == 0  # the measurement's steps are not the mailbox's work
