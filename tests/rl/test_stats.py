"""Standard errors and the critique's balanced accuracy on small hand cases."""

import math

import pytest

from trmkit.rl.stats import balanced_accuracy, paired_bootstrap, rate_se


def test_paired_bootstrap_se_is_the_se_of_the_mean_difference():
    """d = b - a = (1, 0, 0, 0): mean 0.25; resampling 4 tasks gives sd(d) / sqrt(4) = sqrt(3/16) / 2."""
    diff, se = paired_bootstrap([0, 1, 1, 0], [1, 1, 1, 0], resamples=40000)
    assert diff == 0.25
    assert se == pytest.approx(math.sqrt(3 / 16) / 2, rel=0.02)


def test_pairing_cancels_what_both_runs_share():
    """Two runs with the same outcomes differ by exactly 0; unpaired, each rate alone has an SE of 0.25."""
    a = [1, 0, 1, 0]
    assert paired_bootstrap(a, a) == (0.0, 0.0)
    assert rate_se(a) == 0.25 and rate_se([]) == 0.0
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1])


def test_balanced_accuracy_weighs_right_and_wrong_answers_alike():
    truth = [True, False, False, False]  # one right answer of four
    assert balanced_accuracy([False] * 4, truth) == 0.5  # always <no>: plain agreement would say 0.75
    assert balanced_accuracy([True, False, True, None], truth) == pytest.approx((1 + 1 / 3) / 2)
    assert balanced_accuracy([True, True], [True, True]) is None  # no wrong answer: undefined
