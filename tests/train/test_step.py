"""The training step: refill of halted slots, persistence of the carry, exact accumulation."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trmkit.config import ModelConfig, TrainConfig
from trmkit.model.trm import TRM
from trmkit.train import step as step_mod
from trmkit.train.session import build_optimizers
from trmkit.train.step import StepContext, exploration_draws, forward_backward, new_state, refill, train_step
from trmkit.config import Config


class CountingStream:
    """Sample i has every input cell = i % 7 + 1 and puzzle id i % 3."""

    def __init__(self, seq_len: int):
        self.seq_len, self.served = seq_len, 0

    def take(self, k):
        idx = np.arange(self.served, self.served + k)
        self.served += k
        inputs = np.repeat((idx % 7 + 1)[:, None], self.seq_len, 1).astype(np.uint8)
        labels = ((inputs + idx[:, None]) % 9 + 1).astype(np.uint8)
        return SimpleNamespace(inputs=inputs, labels=labels, puzzle_ids=(idx % 3).astype(np.uint8))


def tiny(**kw):
    base = dict(hidden_size=32, num_heads=2, L_layers=1, H_cycles=2, L_cycles=2, halt_max_steps=3,
                puzzle_emb_len=2, vocab_size=11, seq_len=9, num_puzzle_ids=3)
    base.update(kw)
    return ModelConfig(**base)


def ctx(micro_batch):
    return StepContext(micro_batch=micro_batch, ignore_label_id=0, device=torch.device("cpu"))


def test_refill_fills_only_halted_slots_in_order():
    torch.manual_seed(0)
    model = TRM(tiny())
    state = new_state(model, 4, 9, "cpu")
    stream = CountingStream(9)
    assert refill(model, state, stream, ctx(4)) == 4
    assert state.inputs[:, 0].tolist() == [1, 2, 3, 4]
    state.carry.halted = torch.tensor([False, True, False, True])
    state.carry.steps = torch.tensor([2, 3, 1, 3], dtype=torch.int32)
    state.carry.z_H = state.carry.z_H + 1.0
    assert refill(model, state, stream, ctx(4)) == 2
    assert state.inputs[:, 0].tolist() == [1, 5, 3, 6]  # samples 4 and 5 went to slots 1 and 3
    assert state.carry.steps.tolist() == [2, 0, 1, 0]
    assert torch.equal(state.carry.z_H[1], model.H_init.expand_as(state.carry.z_H[1]))
    assert not torch.equal(state.carry.z_H[0], model.H_init.expand_as(state.carry.z_H[0]))


def test_slots_halt_at_n_sup_and_are_refilled():
    torch.manual_seed(0)
    cfg = Config(model=tiny(halt_max_steps=3, halt_exploration_prob=0.0),
                 train=TrainConfig(batch_size=4, max_steps=10, warmup_steps=1, lr=1e-4))
    model = TRM(cfg.model)
    opts = build_optimizers(model, cfg)
    state, stream = new_state(model, 4, 9, "cpu"), CountingStream(9)
    served = []
    for _ in range(6):
        m = train_step(model, state, stream, opts, cfg.train, ctx(4))
        served.append(stream.served)
    # q_halt starts at -5: nobody halts early, so every sample takes exactly N_sup = 3 steps
    assert served == [4, 4, 4, 8, 8, 8]
    assert m["train/steps"] == 3.0


def test_stagger_start_spreads_the_slots_first_samples_over_n_sup():
    """Without a halt before N_sup every slot takes a sample at the same step, for ever; with
    train.stagger_start the first samples end N_sup / B steps apart, and the slots stay that far apart."""
    torch.manual_seed(0)
    steps_seen = {}
    for stagger in (False, True):
        cfg = Config(model=tiny(halt_max_steps=8, halt_exploration_prob=0.0),
                     train=TrainConfig(batch_size=4, max_steps=20, warmup_steps=1, lr=1e-4, stagger_start=stagger))
        model = TRM(cfg.model)
        opts = build_optimizers(model, cfg)
        state, stream = new_state(model, 4, 9, "cpu"), CountingStream(9)
        served = []
        for _ in range(12):
            train_step(model, state, stream, opts, cfg.train, ctx(4))
            served.append(stream.served)
        steps_seen[stagger] = state.carry.steps.tolist()
        if stagger:  # slot i's first sample ends at step 2 (i + 1): a new sample at steps 3, 5, 7, 9, 11
            assert served == [4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9]
        else:  # q_halt starts at -5: each sample takes N_sup = 8 steps, all slots together
            assert served == [4] * 8 + [8] * 4
    assert steps_seen[False] == [4, 4, 4, 4]
    assert steps_seen[True] == [2, 8, 6, 4]  # after step 12: four phases, 2 steps apart


def run_steps(micro_batch, n_steps=3):
    torch.manual_seed(1)
    cfg = Config(model=tiny(halt_max_steps=2, halt_exploration_prob=0.5),
                 train=TrainConfig(batch_size=8, max_steps=10, warmup_steps=1, lr=1e-3,
                                   puzzle_emb_lr=1e-2, ema_decay=0.9))
    model = TRM(cfg.model)
    opts = build_optimizers(model, cfg)
    state, stream = new_state(model, 8, 9, "cpu"), CountingStream(9)
    torch.manual_seed(2)
    for _ in range(n_steps):
        train_step(model, state, stream, opts, cfg.train, ctx(micro_batch))
    return model, state, opts


def test_gradient_accumulation_is_exact():
    """Weights, carry, halting and EMA after 3 steps. Blind to a constant loss scale (AdamAtan2 and
    sign-SGD are scale-invariant), which the gradient tests below check."""
    full_model, full_state, full_opts = run_steps(8)
    for mb in (4, 2, 1):
        model, state, opts = run_steps(mb)
        for (name, a), b in zip(full_model.named_parameters(), model.parameters()):
            assert torch.allclose(a, b, atol=1e-5, rtol=0), (mb, name, (a - b).abs().max())
        assert torch.allclose(full_model.puzzle_emb.weight, model.puzzle_emb.weight, atol=1e-5)
        assert torch.allclose(full_state.carry.z_H, state.carry.z_H, atol=1e-4)
        assert torch.equal(full_state.carry.halted, state.carry.halted)
        for k in full_opts.ema.shadow:
            assert torch.allclose(full_opts.ema.shadow[k], opts.ema.shadow[k], atol=1e-5)


def accumulated_gradients(micro_batch: int) -> dict[str, torch.Tensor]:
    """The gradients one step accumulates before the optimizer runs: .grad of every dense parameter,
    and the puzzle-embedding's pending row gradients summed per puzzle id (as SparseSignSGD sums them).

    One step first, so the carries are not the initial ones; then three slots are marked halted, so
    the step mixes refilled slots with continuing ones across the micro-batches.
    """
    torch.manual_seed(1)
    cfg = Config(model=tiny(halt_max_steps=3), train=TrainConfig(batch_size=8, max_steps=10, warmup_steps=1))
    model = TRM(cfg.model)
    opts = build_optimizers(model, cfg)
    state, stream = new_state(model, 8, 9, "cpu"), CountingStream(9)
    train_step(model, state, stream, opts, cfg.train, ctx(8))
    state.carry.halted = torch.tensor([False, True, False, False, True, False, False, True])
    refill(model, state, stream, ctx(micro_batch))
    u, min_steps = exploration_draws(8, model.cfg, "cpu")
    model.train()
    forward_backward(model, state, ctx(micro_batch), u, min_steps)
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    emb = model.puzzle_emb
    grads["puzzle_emb"] = torch.zeros_like(emb.weight)
    for ids, rows in emb.take_pending():
        grads["puzzle_emb"].index_add_(0, ids, rows.grad)
    return grads


def relative_errors(full: dict, other: dict) -> dict[str, float]:
    """Per tensor: max |difference| over max |full gradient|."""
    assert full.keys() == other.keys()
    return {k: float((full[k] - other[k]).abs().max() / full[k].abs().max()) for k in full}


def test_accumulated_gradients_equal_the_whole_batch_gradients():
    full = accumulated_gradients(8)
    assert all(float(g.abs().max()) > 1e-4 for g in full.values())  # every tensor takes part
    assert int((full["puzzle_emb"].abs().sum(1) > 0).sum()) == 3  # all three puzzle ids
    for micro_batch in (4, 2, 1):
        errors = relative_errors(full, accumulated_gradients(micro_batch))
        # measured: at most 5e-7 (float32 summation order); a wrong scale is off by 100% or more
        assert max(errors.values()) < 1e-5, (micro_batch, errors)


def test_the_gradient_check_catches_a_loss_divided_by_the_micro_batch(monkeypatch):
    """The mistake the 3-step weight comparison cannot see: each micro-batch's summed loss divided
    by its own size instead of the batch's makes every gradient 8 / micro_batch times too large."""
    full = accumulated_gradients(8)
    real_loss = step_mod.act_loss

    def mean_over_the_micro_batch(logits, labels, q_halt, halt_weight, weights=None, kind="stablemax",
                                  done_labels=None, fold=()):
        loss, stats = real_loss(logits, labels, q_halt, halt_weight, weights, kind, done_labels, fold)
        return loss * 8 / logits.shape[0], stats  # the step's own "/ 8" then leaves "/ micro-batch"

    monkeypatch.setattr(step_mod, "act_loss", mean_over_the_micro_batch)
    assert max(relative_errors(full, accumulated_gradients(8)).values()) < 1e-5  # the patch is a no-op at 8
    for micro_batch in (4, 2):
        errors = relative_errors(full, accumulated_gradients(micro_batch))
        assert min(errors.values()) == pytest.approx(8 / micro_batch - 1, rel=1e-4), (micro_batch, errors)


# --------------------------------------------------------------------------- train.progressive_loss


def three_losses(**train) -> tuple[list[float], float]:
    """The train/loss of 3 steps on a fixed batch and seed, and the next random number after them."""
    torch.manual_seed(1)
    cfg = Config(model=tiny(halt_max_steps=2),
                 train=TrainConfig(batch_size=4, max_steps=10, warmup_steps=1, lr=1e-3, **train))
    model = TRM(cfg.model)
    opts = build_optimizers(model, cfg)
    state, stream = new_state(model, 4, 9, "cpu"), CountingStream(9)
    torch.manual_seed(2)
    losses = [train_step(model, state, stream, opts, cfg.train, ctx(4))["train/loss"] for _ in range(3)]
    return losses, torch.rand(1).item()


def test_progressive_loss_off_is_the_step_as_it_was():
    """Measured with the step before train.progressive_loss existed (same numbers on main's code)."""
    losses, after = three_losses(progressive_loss=0.0)
    assert losses == pytest.approx([2.601236652703565, 2.5133919147145116, 2.6154095865496427], rel=1e-5)
    assert after == pytest.approx(0.4524652361869812)  # off draws no random number


def test_progressive_start_takes_the_drawn_steps_without_gradients_from_a_detached_carry():
    torch.manual_seed(0)
    model = TRM(tiny(halt_max_steps=3)).train()
    state, stream = new_state(model, 4, 9, "cpu"), CountingStream(9)
    refill(model, state, stream, ctx(4))
    state.carry.halted = torch.tensor([True, False, True, True])  # slot 1 goes on with its sample
    state.carry.z_H[1] += 1.0
    before = state.carry.z_H.clone(), state.carry.z_L.clone()
    cfg = TrainConfig(batch_size=4, progressive_loss=0.5)
    torch.manual_seed(4)  # u = 0.56, 0.56, 0.09, 0.21: slots 2 and 3 start deeper, slot 0 does not
    u, depth = torch.rand(4), torch.randint(1, 4, (4,))  # the draws progressive_start makes
    torch.manual_seed(4)
    taken = step_mod.progressive_start(model, state, cfg, ctx(2))
    depth = torch.where(state.carry.halted & (u < 0.5), depth, 0)
    assert depth.tolist() == [0, 0, 3, 2] and taken == 5
    carry = state.carry
    assert carry.z_H.grad_fn is None and not carry.z_H.requires_grad and not carry.z_L.requires_grad
    with torch.no_grad():
        for i, n in enumerate(depth.tolist()):  # each slot: exactly n steps from where it was
            z_H, z_L = before[0][i:i + 1], before[1][i:i + 1]
            for _ in range(n):
                z_H, z_L, _, _ = model(z_H, z_L, state.inputs[i:i + 1], state.puzzle_ids[i:i + 1])
            assert torch.allclose(carry.z_H[i], z_H[0], atol=1e-5) and torch.allclose(carry.z_L[i], z_L[0], atol=1e-5)
    assert carry.steps.tolist() == [0, 0, 0, 0]  # every sample still gets its N_sup supervised steps


def test_no_gradient_reaches_the_steps_before_a_progressive_start():
    """The step's gradients are those of one supervised step from the carry it starts from, held as a
    plain tensor: the steps before the start contribute nothing."""
    torch.manual_seed(0)
    model = TRM(tiny(halt_max_steps=3)).train()
    state, stream = new_state(model, 4, 9, "cpu"), CountingStream(9)
    refill(model, state, stream, ctx(4))
    torch.manual_seed(3)
    assert step_mod.progressive_start(model, state, TrainConfig(batch_size=4, progressive_loss=1.0), ctx(4)) > 0
    start = state.carry.z_H.clone(), state.carry.z_L.clone()
    u, min_steps = exploration_draws(4, model.cfg, "cpu")
    forward_backward(model, state, ctx(4), u, min_steps)
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.puzzle_emb.take_pending()
    _, _, logits, q = model(*start, state.inputs, state.puzzle_ids)
    loss, _ = step_mod.act_loss(logits, state.labels, q, model.cfg.halt_loss_weight)
    (loss / 4).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-7, rtol=1e-5), name
