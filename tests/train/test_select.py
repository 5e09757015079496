"""`eval --select N` (train/select.py): N trajectories, the halting head picks one, never the label."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trmkit.config import ConfigError, ModelConfig
from trmkit.data.stream import Batch
from trmkit.data.variants import Variants
from trmkit.model.trm import TRM
from trmkit.train import select
from trmkit.train.evaluate import think
from trmkit.train.select import Trajectory
from trmkit.train.step import StepContext

CTX = StepContext(micro_batch=4, ignore_label_id=0, device=torch.device("cpu"))


def tiny_trm(n_sup: int = 3) -> TRM:
    torch.manual_seed(0)
    model = TRM(ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=2, L_cycles=1, halt_max_steps=n_sup,
                            puzzle_emb_len=2, vocab_size=6, seq_len=5, num_puzzle_ids=2)).eval()
    with torch.no_grad():  # the trained head is not all zeros: let the halting logit depend on the state
        torch.nn.init.normal_(model.q_head.weight, std=1.0)
    return model


def batch(rows=(0, 1, 2, 3, 4, 5)) -> Batch:
    inputs = np.random.default_rng(1).integers(1, 6, (8, 5))[list(rows)]
    labels = np.random.default_rng(2).integers(1, 6, (8, 5))[list(rows)]
    return Batch(inputs=inputs, labels=labels, puzzle_ids=np.array(rows) % 2, rows=np.array(rows))


class NoLabels(Batch):
    """A batch whose labels cannot be read."""

    @property
    def labels(self):
        raise AssertionError("selection read the label")

    @labels.setter
    def labels(self, value):
        pass


def test_more_than_16_trajectories_are_refused_with_the_limit_named():
    assert select.parse_select(16) == 16 and select.parse_select(None) == 0
    for bad in (17, 0, "x"):
        with pytest.raises(ConfigError, match="from 1 to 16"):
            select.parse_select(bad)
    with pytest.raises(ConfigError, match="choose one of noise, variants, both"):
        select.plan(2, "dice")
    with pytest.raises(ConfigError, match="made only 2 variants"):
        select.plan(3, "variants", 2)


def test_trajectories_are_noise_then_variants_and_the_first_is_the_example_itself():
    assert select.plan(3, "noise") == [Trajectory(0, False), Trajectory(0, True), Trajectory(0, True)]
    assert select.plan(2, "variants", 4) == [Trajectory(0, False), Trajectory(1, False)]
    assert [(t.variant, t.noisy) for t in select.plan(4, "both", 2)] == [(0, False), (1, True), (0, True), (1, True)]


def test_the_chosen_answer_is_that_of_the_largest_halting_logit():
    answers = np.array([[[1, 1], [2, 2], [3, 3]],
                        [[4, 4], [5, 5], [6, 6]],
                        [[7, 7], [8, 8], [9, 9]]])  # (N=3, b=3, L=2)
    q = np.array([[0.5, -1.0, 2.0],
                  [0.1, 3.0, 2.0],
                  [0.9, -2.0, 1.0]])  # (N, b): example 2 ties between trajectories 0 and 1
    chosen, best = select.choose(answers, q)
    assert best.tolist() == [2, 1, 0]  # a tie keeps the earliest trajectory
    assert chosen.tolist() == [[7, 7], [5, 5], [3, 3]]


def test_plurality_counts_whole_answers_and_breaks_ties_by_the_halting_logit():
    answers = np.array([[[1, 2]], [[3, 4]], [[1, 2]], [[3, 4]], [[5, 6]]])  # (N=5, b=1, L=2)
    voted, distinct = select.plurality(answers, np.array([[0.0], [1.0], [0.2], [-3.0], [9.0]]))
    assert voted.tolist() == [[3, 4]] and distinct.tolist() == [3]  # 2 ballots each; [3, 4] has the larger best q
    voted, _ = select.plurality(answers[:3], np.zeros((3, 1)))
    assert voted.tolist() == [[1, 2]]  # 2 ballots against 1, whatever the logits


def test_plurality_compares_answers_only_on_the_cells_it_reads():
    answers = np.array([[[1, 7]], [[1, 8]], [[2, 9]]])  # (N=3, b=1, L=2): the last cell a given one (a wall)
    q = np.array([[0.0], [0.0], [5.0]])
    voted, distinct = select.plurality(answers, q, read=np.array([[True, False]]))
    assert voted[0, 0] == 1 and distinct.tolist() == [2]  # [1, *] has 2 ballots: the walls' flicker is not a vote
    voted, distinct = select.plurality(answers, q)
    assert voted.tolist() == [[2, 9]] and distinct.tolist() == [3]  # every cell read: three 1-ballot answers


def test_one_trajectory_is_the_plain_evaluation():
    model, b = tiny_trm(3), batch()
    answers, q, seconds = select.solve(model, CTX, b, select.plan(1, "noise"), 3)
    with torch.no_grad():
        logits, q_plain, _ = think(model, torch.from_numpy(b.inputs), torch.from_numpy(b.puzzle_ids), CTX)
    assert answers.shape == (1, 6, 5) and len(seconds) == 1
    assert np.array_equal(answers[0], logits.argmax(-1).numpy())
    assert np.allclose(q[0], q_plain.numpy())


def test_selection_never_reads_the_label():
    model, b = tiny_trm(3), batch()
    trajectories = select.plan(4, "noise")
    answers, q, _ = select.solve(model, CTX, b, trajectories, 3)
    blind = NoLabels(inputs=b.inputs, labels=None, puzzle_ids=b.puzzle_ids, rows=b.rows)
    again, q_again, _ = select.solve(model, CTX, blind, trajectories, 3)
    scrambled = Batch(inputs=b.inputs, labels=b.labels[::-1, ::-1].copy(), puzzle_ids=b.puzzle_ids, rows=b.rows)
    third, _, _ = select.solve(model, CTX, scrambled, trajectories, 3)
    assert np.array_equal(answers, again) and np.array_equal(q, q_again) and np.array_equal(answers, third)
    assert np.array_equal(select.choose(answers, q)[0], select.choose(third, q_again)[0])


def test_the_noise_moves_the_trajectories_and_depends_on_the_row_not_the_batch():
    model = tiny_trm(3)
    trajectories = select.plan(3, "noise")
    _, q, _ = select.solve(model, CTX, batch(), trajectories, 3)
    assert not np.allclose(q[0], q[1], atol=1e-3) and not np.allclose(q[1], q[2], atol=1e-3)
    _, q_part, _ = select.solve(model, CTX, batch(rows=(4, 5)), trajectories, 3)
    assert np.allclose(q_part, q[:, 4:], atol=1e-4)  # rows 4 and 5 alone: the same draws
    assert select.NOISE_STD == 0.5 and select.NOISE_SEED == 0
    noise = select.initial_noise(np.arange(200), 1, (7, 16))
    assert noise.shape == (200, 2, 7, 16) and abs(float(noise.std()) - 0.5) < 0.01


class CopyModel:
    """A fake step: answers its input, token t as t (an example's variant is answered in the variant's frame)."""

    def initial_carry(self, b, device):
        return SimpleNamespace(z_H=torch.zeros(b, 5, 1), z_L=torch.zeros(b, 5, 1))

    def __call__(self, z_H, z_L, inputs, pids):
        return z_H, z_L, torch.nn.functional.one_hot(inputs.long(), 6).float(), z_H[:, 0, 0] + 1

    def answer_logits(self, logits, inputs=None):
        return logits  # no trace tokens (data.trace)


def test_a_variants_answer_is_turned_back_to_the_examples_frame():
    reverse = Variants(cells=np.array([np.arange(5), np.arange(5)[::-1]]),
                       tokens=np.array([np.arange(6), [0, 2, 1, 3, 5, 4]]))
    b = batch()
    answers, q, _ = select.solve(CopyModel(), CTX, b, select.plan(2, "both", 2), 2, reverse)
    assert np.array_equal(answers[0], b.inputs) and np.array_equal(answers[1], b.inputs)
    assert not np.allclose(q[0], q[1])  # trajectory 1 started from a noised carry
