"""The TRM as the paper specifies it: sizes, recursion, halting, losses."""

import math

import pytest
import torch

from trmkit.config import ModelConfig
from trmkit.model.layers import swiglu_width
from trmkit.model.losses import IGNORE, act_loss, log_stablemax, stablemax_cross_entropy
from trmkit.model.trm import TRM, Carry, halt_decision


def sudoku_cfg(**kw) -> ModelConfig:
    return ModelConfig(vocab_size=11, seq_len=81, num_puzzle_ids=1, **kw)


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(hidden_size=32, num_heads=2, L_layers=1, H_cycles=3, L_cycles=2, halt_max_steps=4,
                puzzle_emb_len=2, vocab_size=11, seq_len=9, num_puzzle_ids=5)
    base.update(kw)
    return ModelConfig(**base)


def test_paper_sudoku_parameter_counts():
    assert TRM(sudoku_cfg(mixer="mlp_t")).num_parameters() == 5_028_866
    assert TRM(sudoku_cfg(mixer="attention")).num_parameters() == 6_828_034


def test_swiglu_width_rounds_up_to_256():
    assert swiglu_width(512, 4.0) == 1536  # 1365.3 -> 1536
    assert swiglu_width(97, 4.0) == 512  # 258.7 -> 512


def test_q_head_starts_at_minus_five():
    model = TRM(tiny_cfg())
    assert torch.all(model.q_head.weight == 0) and torch.all(model.q_head.bias == -5)


@pytest.mark.parametrize("mixer", ["mlp_t", "attention"])
def test_gradients_flow_only_through_the_last_cycle(mixer):
    cfg = tiny_cfg(mixer=mixer)
    torch.manual_seed(0)
    model = TRM(cfg)
    grad_flags = []
    model.net.register_forward_hook(lambda *_: grad_flags.append(torch.is_grad_enabled()))
    carry = model.initial_carry(3)
    z_H = carry.z_H.clone().requires_grad_(True)
    z_L = carry.z_L.clone().requires_grad_(True)
    inputs = torch.randint(1, 11, (3, 9))
    _, _, logits, q = model(z_H, z_L, inputs, torch.tensor([0, 1, 2]))
    (logits.sum() + q.sum()).backward()
    per_cycle = cfg.L_cycles + 1
    assert len(grad_flags) == cfg.H_cycles * per_cycle
    assert grad_flags == [False] * (cfg.H_cycles - 1) * per_cycle + [True] * per_cycle
    # the carried state enters only the no-grad cycles, so no gradient reaches it
    assert z_H.grad is None and z_L.grad is None
    assert model.lm_head.weight.grad is not None


@pytest.mark.parametrize("mixer", ["mlp_t", "attention"])
def test_grad_checkpointing_recomputes_each_block_and_gives_the_same_gradients(mixer):
    cfg = tiny_cfg(mixer=mixer, L_layers=2)
    grads, block_calls = {}, {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = TRM(cfg)
        model.grad_checkpointing = ckpt
        calls = []
        model.net.blocks[0].register_forward_pre_hook(lambda *_: calls.append(1))
        carry = model.initial_carry(3)
        _, _, logits, q = model(carry.z_H, carry.z_L, torch.randint(1, 11, (3, 9)), torch.tensor([0, 1, 2]))
        (logits.square().sum() + q.sum()).backward()
        grads[ckpt] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        block_calls[ckpt] = len(calls)
    assert grads[True].keys() == grads[False].keys() and len(grads[True]) > 5
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, rtol=1e-5, atol=1e-6, msg=name)
    # the gradient cycle's n+1 calls start each block once more, in backward (a pre-hook: the
    # recompute stops early, once it has what backward needs, so a forward hook would not see it)
    assert block_calls[True] == block_calls[False] + cfg.L_cycles + 1


def test_single_cycle_lets_gradient_reach_the_carry():
    model = TRM(tiny_cfg(H_cycles=1))
    carry = model.initial_carry(2)
    z_H = carry.z_H.clone().requires_grad_(True)
    _, _, logits, _ = model(z_H, carry.z_L, torch.ones(2, 9, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    logits.sum().backward()
    assert z_H.grad is not None and z_H.grad.abs().sum() > 0


def test_carry_is_detached_and_reset_restores_init():
    model = TRM(tiny_cfg())
    carry = model.initial_carry(4)
    z_H, z_L, _, _ = model(carry.z_H, carry.z_L, torch.ones(4, 9, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    assert not z_H.requires_grad and not z_L.requires_grad
    halted = torch.tensor([True, False, True, False])
    reset = model.reset(Carry(z_H, z_L, torch.tensor([3, 2, 4, 1], dtype=torch.int32), halted))
    assert torch.equal(reset.z_H[0], model.H_init.expand_as(reset.z_H[0]))
    assert torch.equal(reset.z_L[2], model.L_init.expand_as(reset.z_L[2]))
    assert torch.equal(reset.z_H[1], z_H[1])
    assert reset.steps.tolist() == [0, 2, 0, 1]


def test_halting_in_training_and_evaluation():
    cfg = tiny_cfg(halt_max_steps=4, halt_exploration_prob=0.0)
    steps = torch.tensor([1, 2, 4, 3], dtype=torch.int32)
    q = torch.tensor([2.0, -1.0, -3.0, 0.5])
    train = halt_decision(steps, q, cfg, training=True)
    assert train.tolist() == [True, False, True, True]  # q > 0 or at N_sup
    evaluation = halt_decision(steps, q, cfg, training=False)
    assert evaluation.tolist() == [False, False, True, False]  # only at N_sup


def test_exploration_sets_a_minimum_number_of_steps():
    cfg = tiny_cfg(halt_max_steps=8, halt_exploration_prob=0.1)
    steps = torch.tensor([2, 2, 5, 8], dtype=torch.int32)
    q = torch.full((4,), 3.0)  # all want to halt
    u = torch.tensor([0.05, 0.5, 0.05, 0.05])  # slots 0, 2, 3 explore
    min_steps = torch.tensor([4, 4, 5, 8], dtype=torch.int32)
    halted = halt_decision(steps, q, cfg, True, u, min_steps)
    assert halted.tolist() == [False, True, True, True]


def test_exploration_probability_matches_config():
    cfg = tiny_cfg(halt_max_steps=16, halt_exploration_prob=0.1)
    torch.manual_seed(0)
    n = 20000
    u = torch.rand(n)
    min_steps = torch.randint(2, 17, (n,), dtype=torch.int32)
    halted = halt_decision(torch.ones(n, dtype=torch.int32), torch.ones(n), cfg, True, u, min_steps)
    # at step 1 every exploring slot (min >= 2) is held back
    assert abs((~halted).float().mean().item() - 0.1) < 0.01


def test_stablemax_matches_its_definition():
    x = torch.tensor([[-3.0, -0.5, 0.0, 0.7, 2.0]], dtype=torch.float64)
    s = torch.tensor([[1 / 4, 1 / 1.5, 1.0, 1.7, 3.0]], dtype=torch.float64)
    expected = torch.log(s / s.sum())
    assert torch.allclose(log_stablemax(x), expected, atol=1e-12)
    logits = x.float().expand(2, 5).reshape(2, 1, 5)
    labels = torch.tensor([[3], [IGNORE]])
    loss = stablemax_cross_entropy(logits, labels)
    assert loss.dtype == torch.float64
    assert math.isclose(loss[0, 0].item(), -expected[0, 3].item(), rel_tol=1e-6)
    assert loss[1, 0].item() == 0.0


def test_stablemax_gradient_is_finite_where_logits_hit_one():
    logits = torch.tensor([[[1.0, 0.0, -1.0, 2.0]]], requires_grad=True)  # bf16 often rounds to 1.0
    stablemax_cross_entropy(logits, torch.tensor([[0]])).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_act_loss_targets_exactness():
    logits = torch.zeros(2, 3, 4)
    logits[0, :, 1] = 5  # sample 0 predicts 1 everywhere
    labels = torch.tensor([[1, 1, 1], [1, 2, IGNORE]])
    q = torch.zeros(2, requires_grad=True)
    loss, stats = act_loss(logits, labels, q, 0.5)
    assert stats["exact"].tolist() == [True, False]
    assert stats["valid"].tolist() == [3, 2]
    loss.backward()
    # d BCE / d q = sigmoid(q) - target = 0.5 - 1 and 0.5 - 0, times weight 0.5
    assert torch.allclose(q.grad, torch.tensor([-0.25, 0.25]))



def test_rms_norm_backward_matches_its_formula():
    """The hand-written backward of RMSNorm against finite differences, for contiguous and
    transposed inputs (the mlp_t mixer normalises a transposed view)."""
    from trmkit.model.layers import rms_norm
    x = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rms_norm(t, 1e-5), (x,))
    assert torch.autograd.gradcheck(lambda t: rms_norm(t.transpose(1, 2), 1e-5), (x,))
    xb = torch.randn(5, 8).to(torch.bfloat16).requires_grad_()
    y = rms_norm(xb, 1e-5)
    y.float().sum().backward()
    assert y.dtype == xb.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("mixer", ["mlp_t", "attention"])
def test_fused_inference_matches_the_plain_network_under_bf16(mixer):
    """Calls without gradients under bf16 autocast take the oneDNN path: bf16 output within bf16
    tolerance of the plain path; in float32 (no autocast) the same path in float32; with gradients
    nothing changes."""
    from trmkit.model.layers import fused_inference_works
    if fused_inference_works():
        pytest.skip(fused_inference_works())
    torch.manual_seed(0)
    model = TRM(tiny_cfg(mixer=mixer, hidden_size=64, L_layers=2))
    net, rope = model.net, model._positions(model.seq_total)
    h, inj = torch.randn(4, model.seq_total, 64), torch.randn(4, model.seq_total, 64)
    calls = []
    for block in net.blocks:
        block.forward_fused = (lambda f: lambda *a: calls.append(1) or f(*a))(block.forward_fused)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            plain = net(h, inj, rope)
            net.fused_inference = True
            fused = net(h, inj, rope)
        assert len(calls) == 2 and fused.dtype == torch.bfloat16
        rel = ((fused.float() - plain.float()).norm() / plain.float().norm()).item()
        assert rel < 0.02, rel
        with_grad = net(h, inj, rope)  # gradients on: the plain path, bit for bit
    net.fused_inference = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(with_grad, net(h, inj, rope))
    with torch.no_grad():  # float32 without autocast: the fused path in float32, to float32 rounding
        plain32 = net(h, inj, rope)
        net.fused_inference = True
        fused32 = net(h, inj, rope)
    assert len(calls) == 4 and fused32.dtype == torch.float32
    assert ((fused32 - plain32).norm() / plain32.norm()).item() < 1e-5
    assert torch.equal(net(h, inj, rope), plain32) and len(calls) == 4  # float32 with gradients: the plain path


def test_fused_inference_recasts_weights_after_an_update():
    """The bf16 weight copies follow in-place updates (optimizer steps, EMA swaps)."""
    from trmkit.model.layers import SwiGLU, fused_inference_works
    if fused_inference_works():
        pytest.skip(fused_inference_works())
    torch.manual_seed(0)
    mlp = SwiGLU(64, 256)
    x = torch.randn(8, 64).to(torch.bfloat16)
    with torch.no_grad():
        before = mlp.fused_residual(x)
        assert mlp.fused_residual(x) is not before and mlp.bf16_weights()[0] is mlp.bf16_weights()[0]
        mlp.up.weight.mul_(2.0)
        after = mlp.fused_residual(x).float()
        plain = x.float() + mlp(x.float())
    assert not torch.equal(before.float(), after)
    assert ((after - plain).norm() / plain.norm()).item() < 0.02


def test_fused_inference_probe_leaves_the_random_state_alone():
    from trmkit.model.layers import fused_inference_works
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    fused_inference_works()
    assert torch.equal(torch.rand(3), expected)


def conv_cfg(side: int = 5, **kw) -> ModelConfig:
    return tiny_cfg(mixer="conv", puzzle_emb_len=0, seq_len=side * side, grid_height=side, grid_width=side, **kw)


@pytest.mark.parametrize("dense", [False, True])
def test_the_conv_mixer_mixes_only_grid_neighbours_and_trains(dense):
    torch.manual_seed(0)
    model = TRM(conv_cfg(conv_dense=dense, L_cycles=1, H_cycles=1))
    conv = model.net.blocks[0].mix
    assert conv.weight.shape == (32, 1 if not dense else 32, 3, 3)
    h = torch.zeros(1, 25, 32, requires_grad=True)
    out = conv(h, (5, 5))
    assert out.shape == (1, 25, 32)
    out[0, 12].sum().backward()  # the centre cell of the 5 x 5 grid
    touched = (h.grad[0].abs().sum(-1) > 0).view(5, 5)
    assert touched.tolist() == [[r in (1, 2, 3) and c in (1, 2, 3) for c in range(5)] for r in range(5)]
    carry = model.initial_carry(3)
    x = torch.randint(1, 11, (3, 25))
    z_H, z_L, logits, q = model(carry.z_H, carry.z_L, x, torch.zeros(3, dtype=torch.long))
    assert logits.shape == (3, 25, 11) and q.shape == (3,) and z_H.shape == (3, 25, 32)
    logits.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad and p is not model.q_head.weight
               and p is not model.q_head.bias)


def test_a_conv_model_runs_on_a_larger_grid_with_the_same_weights():
    torch.manual_seed(0)
    small = TRM(conv_cfg(5))
    big = TRM(conv_cfg(9))
    big.load_state_dict(small.state_dict())  # no positions, no prefix: nothing depends on the grid's size
    carry = big.initial_carry(2)
    _, _, logits, q = big(carry.z_H, carry.z_L, torch.randint(1, 11, (2, 81)), torch.zeros(2, dtype=torch.long))
    assert logits.shape == (2, 81, 11) and torch.isfinite(q).all()


def test_conv_needs_its_grid_and_no_prefix():
    with pytest.raises(Exception, match="puzzle_emb_len=0"):
        tiny_cfg(mixer="conv")
    with pytest.raises(ValueError, match="grid_shape"):
        TRM(tiny_cfg(mixer="conv", puzzle_emb_len=0))
