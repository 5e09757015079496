"""`eval --steps auto` (train/halting.py): stop once the answer is stable, freeze it, run to the cap otherwise."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from trmkit.config import ConfigError, ModelConfig
from trmkit.model.trm import TRM
from trmkit.train import halting
from trmkit.train.halting import StableAnswer, think_until_stable
from trmkit.train.step import StepContext

CTX = StepContext(micro_batch=4, ignore_label_id=0, device=torch.device("cpu"))


class SettlingModel:
    """A fake step function: example i answers min(t, settle_i) in every cell at step t (stable from step
    settle_i on); settle_i = 0 never settles (it answers t % 2). Records the rows it is called on."""

    vocab, cells = 40, 3

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def initial_carry(self, batch, device):
        return SimpleNamespace(z_H=torch.zeros(batch, self.cells, 1), z_L=torch.zeros(batch, self.cells, 1))

    def __call__(self, z_H, z_L, inputs, pids):
        self.calls.append(pids.tolist())
        t = z_H[:, 0, 0] + 1  # (b,) the step this is: the carry counts them
        settle = inputs[:, 0].float()
        value = torch.where(settle > 0, torch.minimum(t, settle), t % 2)
        logits = F.one_hot(value.long(), self.vocab).float()[:, None, :].expand(-1, self.cells, -1)
        return t.view(-1, 1, 1).expand_as(z_H).clone(), z_L, logits, torch.full_like(t, -1.0)


def test_each_example_stops_once_its_answer_is_stable_or_at_the_cap():
    model = SettlingModel()
    inputs = torch.tensor([[3] * 3, [5] * 3, [0] * 3])  # settles at step 3, at step 5, never
    logits, q, first_halt, used = think_until_stable(model, inputs, torch.arange(3), CTX, StableAnswer(cap=10))
    assert halting.STABLE_STEPS == 2
    assert used.tolist() == [5, 7, 10]  # settle + 2 unchanged steps; the one that never settles runs to the cap
    assert logits.argmax(-1)[:, 0].tolist() == [3, 5, 0]  # frozen at their answers (10 % 2 = 0 at the cap)
    assert first_halt.tolist() == used.tolist()  # q_halt never > 0: the last step
    assert [len(c) for c in model.calls] == [3] * 5 + [2] * 2 + [1] * 3  # a stopped example costs nothing more
    assert model.calls[-1] == [2]


def test_patience_counts_consecutive_unchanged_steps():
    model = SettlingModel()
    inputs = torch.tensor([[4] * 3])
    _, _, _, used = think_until_stable(model, inputs, torch.arange(1), CTX, StableAnswer(cap=20, patience=5))
    assert used.tolist() == [9]
    _, _, _, used = think_until_stable(model, inputs, torch.arange(1), CTX, StableAnswer(cap=6, patience=5))
    assert used.tolist() == [6]


class FlickeringGivenCell(SettlingModel):
    """SettlingModel whose last cell answers t % 2 at every step: it never settles there."""

    def __call__(self, z_H, z_L, inputs, pids):
        z_H, z_L, logits, q = super().__call__(z_H, z_L, inputs, pids)
        t = z_H[:, 0, 0]
        logits = logits.clone()
        logits[:, -1] = F.one_hot((t % 2).long(), self.vocab).float()
        return z_H, z_L, logits, q


def test_cells_given_by_the_input_are_not_read_by_the_rule():
    inputs = torch.tensor([[3, 3, 7]])  # settles at step 3 except the last cell, a given token (7)
    masked = dataclasses.replace(CTX, given_tokens=torch.tensor([7]))
    _, _, _, used = think_until_stable(FlickeringGivenCell(), inputs, torch.arange(1), masked, StableAnswer(cap=12))
    assert used.tolist() == [5]  # a maze's walls carry no loss (train.mask_given): their flicker is not the answer
    _, _, _, used = think_until_stable(FlickeringGivenCell(), inputs, torch.arange(1), CTX, StableAnswer(cap=12))
    assert used.tolist() == [12]  # without train.mask_given every cell is an answer: it never settles


def tiny_trm(n_sup: int) -> TRM:
    torch.manual_seed(0)
    return TRM(ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=2, L_cycles=1, halt_max_steps=n_sup,
                           puzzle_emb_len=2, vocab_size=6, seq_len=5, num_puzzle_ids=2)).eval()


@torch.no_grad()
def test_a_stopped_example_keeps_the_logits_of_its_last_step():
    model = tiny_trm(3)
    inputs = torch.randint(1, 6, (4, 5), generator=torch.Generator().manual_seed(1))
    pids = torch.tensor([0, 1, 0, 1])
    logits, q, _, used = think_until_stable(model, inputs, pids, CTX, StableAnswer(cap=6, patience=1))
    assert used.min() < 6  # some stopped early: seed 1 here
    carry, per_step = model.initial_carry(4), {}
    z_H, z_L = carry.z_H, carry.z_L
    for k in range(1, 7):  # the whole batch, every step, as `--steps k` would
        z_H, z_L, per_step[k], _ = model(z_H, z_L, inputs, pids)
    for i, k in enumerate(used.tolist()):  # a smaller batch moves float32 sums by ~1e-4; a step by ~1
        assert torch.allclose(logits[i], per_step[k][i], atol=2e-3)
        assert not torch.allclose(logits[i], per_step[min(6, k + 1)][i], atol=2e-3) or k == 6


def test_parse_auto_and_the_default_cap():
    assert halting.parse_auto(None) is None and halting.parse_auto("8,16") is None
    assert halting.parse_auto("auto") == 0 and halting.parse_auto("auto:64") == 64
    with pytest.raises(ConfigError, match="auto:CAP"):
        halting.parse_auto("auto:0")
    rule, why = halting.rule_for(0, 16)
    assert rule.cap == 64 and "4 x the trained N_sup 16" in why
    assert halting.rule_for(30, 16)[0].cap == 30
