"""Self-training of the bag's linear model on unlabelled messages (email/selftrain.py)."""
import numpy as np
import pytest
import torch

from trmkit.email import linear_fit
from trmkit.email.selftrain import ROUNDS, balanced, self_train

VOCAB, CLASSES = 400, 3


def _bags(rng, y: np.ndarray) -> np.ndarray:
    """Each class leans on its own 30 ids (3 of them per message), plus 5 shared noise ids: two labels
    per class see a few of a class's ids, the unlabelled messages link them to the rest."""
    out = np.zeros((len(y), 8), dtype=np.int64)
    for i, c in enumerate(y):
        own = rng.choice(np.arange(10 + 30 * c, 40 + 30 * c), 3, replace=False)
        out[i] = np.concatenate([own, rng.choice(np.arange(200, 400), 5, replace=False)])
    return out


def _accuracy(weight, bias, x, y) -> float:
    return float(((torch.sparse.mm(x, weight) + bias).argmax(1) == torch.from_numpy(y)).float().mean())


def test_self_training_on_unlabelled_bags_beats_the_labelled_fit_alone():
    rng = np.random.default_rng(0)
    y_l = np.array([0, 0, 1, 1, 2, 2])  # two labels per class
    y_u, y_t = (rng.integers(0, CLASSES, n) for n in (600, 600))
    x_l, x_u, x_t = (linear_fit.multi_hot(_bags(rng, y), VOCAB) for y in (y_l, y_u, y_t))
    labels = torch.from_numpy(y_l)

    def fit(x, y, w):
        return linear_fit._fit_one(x, y, w, CLASSES, 10.0)

    weight, bias, _ = fit(x_l, labels, balanced(labels, CLASSES)[labels])
    alone = _accuracy(weight, bias, x_t, y_t)
    said = []
    weight2, bias2 = self_train(x_l, labels, x_u, weight, bias, CLASSES, fit, said.append)  # y_u is never passed
    assert _accuracy(weight2, bias2, x_t, y_t) >= alone + 0.1, (alone, _accuracy(weight2, bias2, x_t, y_t))
    assert f"self-trained on 600 unlabelled messages in {len(ROUNDS)} rounds" in said[0]


def test_balanced_weights_make_every_present_class_weigh_the_same():
    y = torch.tensor([0, 0, 0, 2])
    w = balanced(y, 3)
    assert w.tolist() == pytest.approx([4 / 6, 0.0, 2.0]) and float(w[y].sum()) == pytest.approx(4.0)
