"""TR-RPG: the autograd gradient equals the formula; chunked backward equals the full batch."""

import torch

from trmkit.config import ModelConfig
from trmkit.model.trm import TRM
from trmkit.rl import programs as P
from trmkit.rl.loss import sft_loss, trrpg_gradient_weight, trrpg_loss
from trmkit.rl.chunks import Group, chunked_backward, group_loss
from trmkit.rl.policy import draw, encode, response_logits, sample, token_logprobs
from trmkit.rl.selfplay import credit_mask
from trmkit.train.step import StepContext


def tiny_policy(seed=0) -> TRM:
    torch.manual_seed(seed)
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=2, L_cycles=1, halt_max_steps=2,
                      mixer="attention", puzzle_emb_len=0, vocab_size=len(P.VOCAB), seq_len=P.max_length(),
                      num_puzzle_ids=1)
    return TRM(cfg)


def rollout_group(model, role, kind, n, seed, beta=0.05, k=2):
    g = torch.Generator().manual_seed(seed)
    lay = P.layout(role, kind)
    rows = torch.randint(0, len(P.VOCAB), (n, lay.prompt), generator=g)
    inputs = torch.cat([rows, torch.full((n, lay.response), P.BLANK)], 1).to(torch.uint8)
    d = draw(model, inputs, lay.response, k, 4, torch.no_grad, generator=g)
    adv = torch.randn(n, k, generator=g)
    return Group(role, kind, inputs, d.responses, 1.0 / n,
                 logp_old=d.token_logp - 0.1 * torch.rand(n, k, lay.response, generator=g) / lay.response,
                 advantages=adv, beta=beta, credit=credit_mask(role, kind))


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_autograd_gradient_equals_the_trrpg_formula():
    model = tiny_policy()
    g = rollout_group(model, "solve", "deduction", 6, 1, k=1)
    g.responses, g.advantages = g.responses[:, 0], g.advantages[:, 0]  # one sample per prompt
    g.logp_old = g.logp_old[:, 0].sum(-1)
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


def k_sample_group(model, kind, n, k, seed, temperature):
    g = torch.Generator().manual_seed(seed)
    lay = P.layout("solve", kind)
    rows = torch.randint(0, len(P.VOCAB), (n, lay.prompt), generator=g)
    inputs = torch.cat([rows, torch.full((n, lay.response), P.BLANK)], 1).to(torch.uint8)
    d = draw(model, inputs, lay.response, k, 100, torch.no_grad, temperature, generator=g)
    adv = torch.randn(n, k, generator=g)
    return Group("solve", kind, inputs, d.responses, 1.0 / (n * k), logp_old=d.token_logp - 0.01,
                 advantages=adv, beta=0.05, credit=credit_mask("solve", kind), temperature=temperature)


def test_k_samples_from_one_forward_give_the_gradient_of_k_copies():
    model = tiny_policy(7)
    n, k, T = 3, 4, 0.5
    grouped = k_sample_group(model, "abduction", n, k, 11, T)
    ctx = StepContext(micro_batch=100, ignore_label_id=-100, device=torch.device("cpu"))
    model.zero_grad()
    chunked_backward(model, [grouped], ctx, clip=1.0)
    one_forward = grads(model)
    # the same samples as k copies of each prompt, one response per row
    copies = Group("solve", "abduction", grouped.inputs.repeat_interleave(k, 0),
                   grouped.responses.reshape(n * k, 1, -1), grouped.scale,
                   logp_old=grouped.logp_old.reshape(n * k, 1, -1), advantages=grouped.advantages.reshape(n * k, 1),
                   beta=0.05, credit=grouped.credit, temperature=T)
    model.zero_grad()
    chunked_backward(model, [copies], ctx, clip=1.0)
    k_copies = grads(model)
    assert one_forward and one_forward.keys() == k_copies.keys()
    for name in one_forward:
        torch.testing.assert_close(one_forward[name], k_copies[name], rtol=1e-4, atol=1e-6)


def test_the_temperature_is_the_same_in_sampling_and_in_log_pi():
    model = tiny_policy(8)
    lay = P.layout("solve", "deduction")
    inputs = encode([[P.TOKEN["<solve>"]] * lay.prompt + [P.BLANK] * lay.response] * 2, len(P.VOCAB), "cpu")
    d = draw(model, inputs, lay.response, 3, 10, torch.no_grad, temperature=0.5)
    with torch.no_grad():
        logits = response_logits(model, inputs, lay.response)
    torch.testing.assert_close(d.token_logp, token_logprobs(logits, d.responses, 0.5))
    assert not torch.allclose(d.token_logp, token_logprobs(logits, d.responses, 1.0))
    # at temperature 0.5 the update's log pi_theta of the rollout's own samples equals log pi_old: w = 1
    g = Group("solve", "deduction", inputs, d.responses, 1.0, logp_old=d.token_logp,
              advantages=torch.zeros(2, 3), credit=credit_mask("solve", "deduction"), temperature=0.5)
    _, stats = group_loss(model, g, slice(0, 2), StepContext(100, -100, torch.device("cpu")), clip=1.0)
    torch.testing.assert_close(stats["ratio"], torch.ones(6))


def test_the_solvers_gradient_covers_its_answer_slots_only():
    mask = credit_mask("solve", "deduction")
    start, end = P.answer_span("deduction")
    assert mask.sum() == P.MAX_ITEMS and mask[start:end].all()
    row = P.solve_tokens([(1, 2)], P.list_tokens((3, 4)))
    assert [P.VOCAB[t] for t in row[start - 1:end + 1]] == ["<answer>", "3", "4", "<e>", "<e>", "<e>", "<e>",
                                                           "</answer>"]
    assert credit_mask("critique", "induction").tolist() == [True, False]  # the verdict, not the score
    model = tiny_policy(9)
    g = k_sample_group(model, "deduction", 2, 2, 5, 1.0)
    model.zero_grad()
    ctx = StepContext(micro_batch=100, ignore_label_id=-100, device=torch.device("cpu"))
    chunked_backward(model, [g], ctx, clip=1.0)
    before = grads(model)
    g.responses[..., :start] = (g.responses[..., :start] + 1) % len(P.VOCAB)  # other think slots and tags
    g.logp_old = g.logp_old.clone()
    model.zero_grad()
    chunked_backward(model, [g], ctx, clip=1.0)
    for name, value in grads(model).items():  # the think slots do not enter the policy gradient
        torch.testing.assert_close(value, before[name], rtol=1e-5, atol=1e-7)


def test_sampled_log_probability_is_the_sum_of_the_positions():
    model = tiny_policy(5)
    lay = P.layout("critique", "deduction")
    inputs = encode([[P.TOKEN["<critique>"]] * lay.prompt + [P.BLANK] * lay.response] * 3, len(P.VOCAB), "cpu")
    resp, logp, ent = sample(model, inputs, lay.response, 2, torch.no_grad)
    with torch.no_grad():
        again = token_logprobs(response_logits(model, inputs, lay.response), resp).sum(-1)
    torch.testing.assert_close(logp, again)
    assert (ent > 0).all() and resp.shape == (3, lay.response)
