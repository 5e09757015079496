"""Naive Bayes by EM over labelled and unlabelled bags (email/nb_em.py), and its place in the fit."""
import numpy as np
import pytest
import torch

from trmkit.config import ConfigError
from trmkit.email import linear_fit, nb_em
from trmkit.email.config import EmailModelConfig
from trmkit.email.parts import model_of

from tests.email.test_selftrain import CLASSES, VOCAB, _accuracy, _bags  # the same toy bags


def test_em_on_unlabelled_bags_beats_naive_bayes_on_the_labels_alone(monkeypatch):
    rng = np.random.default_rng(0)
    y_l = np.array([0, 1, 2])  # one label per class
    y_u, y_t = (rng.integers(0, CLASSES, n) for n in (600, 600))
    x_l, x_u, x_t = (linear_fit.multi_hot(_bags(rng, y), VOCAB) for y in (y_l, y_u, y_t))
    said = []
    monkeypatch.setattr(nb_em, "ITERATIONS", 0)
    alone = _accuracy(*nb_em.fit(x_l, torch.from_numpy(y_l), x_u, CLASSES, VOCAB, said.append), x_t, y_t)
    monkeypatch.setattr(nb_em, "ITERATIONS", 10)
    weight, bias = nb_em.fit(x_l, torch.from_numpy(y_l), x_u, CLASSES, VOCAB, said.append)  # y_u never passed
    assert _accuracy(weight, bias, x_t, y_t) >= alone + 0.2, (alone, _accuracy(weight, bias, x_t, y_t))
    assert "3 labelled and 600 unlabelled messages" in said[-1] and "10 rounds" in said[-1]


def test_em_logits_are_centred_and_the_pad_id_reads_nothing():
    rng = np.random.default_rng(1)
    y = np.array([0, 1, 2, 0])
    x = linear_fit.multi_hot(_bags(rng, y), VOCAB)
    weight, bias = nb_em.fit(x, torch.from_numpy(y), x, CLASSES, VOCAB, lambda s: None)
    assert torch.allclose(weight.sum(1), torch.zeros(VOCAB), atol=1e-4) and abs(float(bias.sum())) < 1e-5
    assert weight[0].abs().max() == 0  # stablemax reads levels, not only differences: logits near 0


def test_unlabelled_option_is_checked_and_em_refuses_folds():
    with pytest.raises(ConfigError, match="email.input_linear_unlabelled='yes': use one of off, em, self_train"):
        EmailModelConfig(input_linear_unlabelled="yes")
    model = model_of(dict(vocab_size=VOCAB, num_classes=CLASSES, seq_len=10, part_positions=8, num_puzzle_ids=1,
                          hidden_size=16, num_heads=2, L_layers=1),
                     dict(input_linear=True, input_linear_folds=2, input_linear_unlabelled="em"))
    ids = np.array([[11, 12, 0, 0, 0, 0, 0, 0]] * 4)
    with pytest.raises(ConfigError, match="has no folds"):
        linear_fit._fit_em(model, ids, torch.tensor([0, 1, 2, 0]), ids, print, 0.0)
