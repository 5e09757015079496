"""TR-RPG: the autograd gradient equals the formula; chunked backward equals the full batch."""

import torch

from trmkit.config import ModelConfig
from trmkit.model.trm import TRM
from trmkit.rl import programs as P
from trmkit.rl.loss import sft_loss, trrpg_gradient_weight, trrpg_loss
from trmkit.rl.chunks import Group, chunked_backward
from trmkit.rl.policy import encode, response_logits, sample, token_logprobs
from trmkit.train.step import StepContext


def tiny_policy(seed=0) -> TRM:
    torch.manual_seed(seed)
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=2, L_cycles=1, halt_max_steps=2,
                      mixer="attention", puzzle_emb_len=0, vocab_size=len(P.VOCAB), seq_len=P.max_length(),
                      num_puzzle_ids=1)
    return TRM(cfg)


def rollout_group(model, role, kind, n, seed, beta=0.05):
    g = torch.Generator().manual_seed(seed)
    lay = P.layout(role, kind)
    rows = torch.randint(0, len(P.VOCAB), (n, lay.prompt), generator=g)
    inputs = torch.cat([rows, torch.full((n, lay.response), P.BLANK)], 1).to(torch.uint8)
    resp, logp, _ = sample(model, inputs, lay.response, 4, torch.no_grad, generator=g)
    adv = torch.randn(n, generator=g)
    return Group(role, kind, inputs, resp, 1.0 / n, logp_old=logp - 0.1 * torch.rand(n, generator=g),
                 advantages=adv, beta=beta)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_autograd_gradient_equals_the_trrpg_formula():
    model = tiny_policy()
    g = rollout_group(model, "solve", "deduction", 6, 1)
    # autograd of the surrogate (mean over samples)
    logits = response_logits(model, g.inputs, g.response_len)
    logp = token_logprobs(logits, g.responses).sum(-1)
    loss, _ = trrpg_loss(logp, g.logp_old, g.advantages, g.beta, clip=10.0)
    model.zero_grad()
    loss.mean().backward()
    auto = grads(model)
    # the formula: -(1/N) sum_i w_i (A_i - beta (log w_i + 1)) grad log pi(x_i)
    weight = trrpg_gradient_weight(logp.detach(), g.logp_old, g.advantages, g.beta)
    expected = {n: torch.zeros_like(v) for n, v in auto.items()}
    for i in range(6):
        model.zero_grad()
        logp_i = token_logprobs(response_logits(model, g.inputs[i:i + 1], g.response_len),
                                g.responses[i:i + 1]).sum()
        logp_i.backward()
        for n, p in model.named_parameters():
            if n in expected:
                expected[n] -= weight[i] * p.grad / 6
    assert any(v.abs().max() > 1e-4 for v in auto.values())
    for n in auto:
        torch.testing.assert_close(auto[n], expected[n], rtol=1e-4, atol=1e-6)


def test_log_ratio_clip_stops_the_gradient_outside_the_range():
    logp_new = torch.tensor([0.0, 5.0], requires_grad=True)
    loss, stats = trrpg_loss(logp_new, torch.zeros(2), torch.ones(2), 0.1, clip=1.0)
    loss.sum().backward()
    assert logp_new.grad[1] == 0 and logp_new.grad[0] != 0
    assert stats["clipped"].tolist() == [0.0, 1.0]
    # at w = 1 the surrogate is -A and its gradient weight A - beta
    assert torch.isclose(loss[0], torch.tensor(-1.0))
    assert torch.isclose(logp_new.grad[0], torch.tensor(-(1.0 - 0.1)))


def test_chunked_backward_equals_the_full_batch():
    model = tiny_policy(3)
    groups = [rollout_group(model, "propose", "induction", 5, 2, 0.01),
              rollout_group(model, "solve", "deduction", 7, 3, 0.05),
              rollout_group(model, "critique", "abduction", 4, 4, 0.1)]
    ctx = StepContext(micro_batch=100, ignore_label_id=-100, device=torch.device("cpu"))
    model.zero_grad()
    chunked_backward(model, groups, ctx, clip=1.0)
    full = grads(model)
    ctx.micro_batch = 2
    model.zero_grad()
    chunked_backward(model, groups, ctx, clip=1.0)
    chunked = grads(model)
    assert full.keys() == chunked.keys() and full
    for n in full:
        torch.testing.assert_close(chunked[n], full[n], rtol=0, atol=1e-5)


def test_sft_loss_weights_the_answer():
    tok = torch.log(torch.tensor([[0.5, 0.25, 1.0]]))
    w = torch.tensor([[1.0, 2.0, 1.0]])
    expected = -(torch.log(torch.tensor(0.5)) + 2 * torch.log(torch.tensor(0.25)))
    assert torch.isclose(sft_loss(tok, w), torch.tensor([expected]))


def test_sampled_log_probability_is_the_sum_of_the_positions():
    model = tiny_policy(5)
    lay = P.layout("critique", "deduction")
    inputs = encode([[P.TOKEN["<critique>"]] * lay.prompt + [P.BLANK] * lay.response] * 3, len(P.VOCAB), "cpu")
    resp, logp, ent = sample(model, inputs, lay.response, 2, torch.no_grad)
    with torch.no_grad():
        again = token_logprobs(response_logits(model, inputs, lay.response), resp).sum(-1)
    torch.testing.assert_close(logp, again)
    assert (ent > 0).all() and resp.shape == (3, lay.response)
