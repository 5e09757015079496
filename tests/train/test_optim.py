"""Optimisers: sign-SGD touches only used rows, Adam-atan2, schedule, EMA."""

import math

import torch

from trmkit.config import ModelConfig, TrainConfig
from trmkit.model.trm import TRM
from trmkit.train.optim import EMA, AdamAtan2, SparseSignSGD, lr_at


def test_sign_sgd_changes_only_the_rows_used():
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, puzzle_emb_len=2,
                      vocab_size=5, seq_len=4, num_puzzle_ids=6)
    model = TRM(cfg)
    model.train()
    with torch.no_grad():
        model.puzzle_emb.weight.normal_()
    before = model.puzzle_emb.weight.clone()
    ids = torch.tensor([1, 3, 1])
    carry = model.initial_carry(3)
    _, _, logits, q = model(carry.z_H, carry.z_L, torch.randint(0, 5, (3, 4)), ids)
    logits.square().sum().backward()
    lr = 0.01
    changed = SparseSignSGD(model.puzzle_emb, lr=lr, weight_decay=0.0).step()
    after = model.puzzle_emb.weight
    assert changed == 2
    for row in (0, 2, 4, 5):
        assert torch.equal(after[row], before[row])
    for row in (1, 3):
        delta = (after[row] - before[row]).abs()
        assert torch.all((delta - lr).abs() < 1e-6) or torch.all(delta <= lr + 1e-6)
        assert (delta > 0).any()


def test_sign_sgd_sums_gradients_of_repeated_ids_before_the_sign():
    cfg = ModelConfig(hidden_size=8, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, puzzle_emb_len=1,
                      vocab_size=3, seq_len=2, num_puzzle_ids=2)
    emb = TRM(cfg).puzzle_emb
    emb.train()
    a = emb(torch.tensor([0]))
    b = emb(torch.tensor([0]))
    (a * 1.0).sum().backward()  # +1 per element
    (b * -3.0).sum().backward()  # -3 per element: the sum is negative
    SparseSignSGD(emb, lr=0.5, weight_decay=0.0).step()
    assert torch.allclose(emb.weight[0], torch.full((8,), 0.5))


def test_adam_atan2_first_step_matches_hand_computation():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = AdamAtan2([p], lr=0.1, betas=(0.9, 0.95), weight_decay=0.5)
    p.grad = torch.tensor([0.2, -0.4, 0.0])
    opt.step()
    # after bias correction m_hat = g, sqrt(v_hat) = |g|: atan2(g, |g|) = +-pi/4, atan2(0, 0) = 0
    expected = torch.tensor([1.0, -2.0, 0.5]) * (1 - 0.1 * 0.5) - 0.1 * torch.tensor([math.pi / 4, -math.pi / 4, 0.0])
    assert torch.allclose(p.detach(), expected, atol=1e-7)


def test_warmup_then_cosine():
    cfg = TrainConfig(lr=1.0, warmup_steps=10, max_steps=110, lr_min_ratio=0.1)
    assert math.isclose(lr_at(0, cfg, 1.0), 0.1)
    assert math.isclose(lr_at(9, cfg, 1.0), 1.0)
    assert math.isclose(lr_at(60, cfg, 1.0), 0.55, rel_tol=1e-9)  # halfway: mean of 1 and 0.1
    assert math.isclose(lr_at(110, cfg, 1.0), 0.1)


def test_ema_tracks_and_swaps():
    lin = torch.nn.Linear(2, 2)
    ema = EMA(lin, decay=0.5, warmup=False)
    start = lin.weight.detach().clone()
    with torch.no_grad():
        lin.weight.add_(2.0)
    ema.update(lin)
    assert torch.allclose(ema.shadow["weight"], start + 1.0)
    ema.swap(lin)
    assert torch.allclose(lin.weight, start + 1.0)
    ema.swap(lin)
    assert torch.allclose(lin.weight, start + 2.0)


def test_ema_warmup_starts_fast():
    ema = EMA(torch.nn.Linear(1, 1), decay=0.999, warmup=True)
    assert ema.current_decay() == 0.1
    ema.updates = 10_000
    assert ema.current_decay() == 0.999


def test_adam_atan2_state_exists_before_the_first_step():
    """Its memory is allocated at set-up, where it is measured, not inside the first step."""
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    opt = AdamAtan2(params, lr=1e-3)
    assert all(opt.state[p]["exp_avg"].shape == p.shape and float(opt.state[p]["step"]) == 0 for p in params)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert all(float(opt.state[p]["step"]) == 1 for p in params)
