"""Chunked log-probabilities and the k3 KL: the same numbers and gradients as one unchunked pass."""

import pytest
import torch

from trmkit.rl.lm.load import build_random
from trmkit.rl.lm.logprobs import (k3_kl, masked_mean, response_logprobs, response_logprobs_unchunked)
from trmkit.rl.lm.lora import checkpoint_layers
from trmkit.rl.lm.tokenizer import batch_encode

PROMPTS = ["def f(x):", "return x[::-1]", "assert f([1, 2]) == [2, 1]", "x"]
R = 9  # response tokens per row


def rollout_batch(tok, seed=0):
    """Left-padded prompts + R random response bytes, the tail after a row's eos masked: ids, mask, response mask, P."""
    ids, mask = batch_encode(tok, PROMPTS)
    gen = torch.Generator().manual_seed(seed)
    response = torch.randint(3, 259, (len(PROMPTS), R), generator=gen)
    response[1, 4] = tok.eos_token_id
    response_mask = torch.ones_like(response)
    response_mask[1, 5:] = 0  # after its eos, row 1's tokens are padding
    return torch.cat([ids, response], 1), torch.cat([mask, torch.ones_like(response)], 1), response_mask, ids.shape[1]


def trrpg_like_loss(logp, ref_logp, response_mask, advantages, beta=0.1):
    """-A log pi + beta k3, summed over real tokens (a sum, so micro-batches add up to the whole batch's)."""
    per_token = -advantages[:, None] * logp + beta * k3_kl(logp, ref_logp)
    return (per_token * response_mask).sum()


@pytest.fixture(scope="module")
def tiny():
    return build_random("tiny", dtype="float32")


def test_chunked_logprobs_equal_the_whole_logits_ones(tiny):
    model, tok = tiny
    ids, mask, _, prompt_len = rollout_batch(tok)
    with torch.no_grad():
        whole = response_logprobs_unchunked(model, ids, mask, prompt_len)
        for chunk in (1, 5, 36, 4096):
            chunked = response_logprobs(model, ids, mask, prompt_len, chunk_tokens=chunk)
            assert chunked.shape == (4, R) and (chunked - whole).abs().max() <= 1e-6
    assert (whole <= 0).all() and whole.min() < -3.0  # real log-probs of random bytes under a random model


def test_a_row_scores_the_same_whatever_the_padding_of_its_batch(tiny):
    model, tok = tiny
    ids, mask, _, prompt_len = rollout_batch(tok)
    alone_ids, alone_mask = batch_encode(tok, [PROMPTS[3]])
    alone_ids = torch.cat([alone_ids, ids[3:, prompt_len:]], 1)
    with torch.no_grad():
        in_batch = response_logprobs(model, ids, mask, prompt_len)[3]
        alone = response_logprobs(model, alone_ids, torch.ones_like(alone_ids), alone_ids.shape[1] - R)[0]
    assert (in_batch - alone).abs().max() <= 1e-5


def grads_of(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_chunked_checkpointed_accumulated_gradients_equal_one_unchunked_pass(tiny):
    model, tok = tiny
    ids, mask, response_mask, prompt_len = rollout_batch(tok)
    advantages = torch.tensor([1.0, -0.5, 0.25, -0.75])
    with torch.no_grad():
        ref = response_logprobs(model, ids, mask, prompt_len) + 0.1  # a reference a little away from pi
    model.zero_grad()
    whole = response_logprobs_unchunked(model, ids, mask, prompt_len)
    trrpg_like_loss(whole, ref, response_mask, advantages).backward()
    truth = grads_of(model)

    model.zero_grad()
    checkpoint_layers(model, range(4))
    for rows in (slice(0, 3), slice(3, 4)):  # two micro-batches of rows, gradients accumulated
        logp = response_logprobs(model, ids[rows], mask[rows], prompt_len, chunk_tokens=5)
        assert (logp.detach() - whole[rows].detach()).abs().max() <= 1e-6
        trrpg_like_loss(logp, ref[rows], response_mask[rows], advantages[rows]).backward()
    chunked = grads_of(model)
    assert truth.keys() == chunked.keys() and len(truth) == 4 * 12 + 2  # every weight, bias and norm
    worst = max((truth[n] - chunked[n]).abs().max().item() for n in truth)
    assert worst <= 1e-5
    assert max(g.abs().max().item() for g in truth.values()) > 1e-3  # the gradients are not all ~0


def test_chunked_backward_never_keeps_all_logits(tiny):
    model, tok = tiny
    ids, mask, _, prompt_len = rollout_batch(tok)
    vocab = model.config.vocab_size
    kept = []

    def pack(t):
        if t.dim() >= 1 and t.shape[-1] == vocab:
            kept.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        response_logprobs(model, ids, mask, prompt_len, chunk_tokens=5).sum()
    assert sum(kept) == 0  # the checkpointed chunks save no vocab-wide tensor for backward
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        response_logprobs_unchunked(model, ids, mask, prompt_len).sum()
    assert sum(kept) >= 4 * R * vocab


def test_k3_is_zero_at_the_reference_positive_elsewhere_and_its_gradient_is_one_minus_the_ratio():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0, -2.0])
    kl = k3_kl(logp, ref)
    assert kl[0] == 0 and (kl[1:] > 0).all()
    kl.sum().backward()
    assert torch.allclose(logp.grad, 1 - torch.exp(ref - logp.detach()))  # d/dlogp of e^(r-l) - (r-l) - 1
    assert masked_mean(torch.tensor([[1.0, 3.0, 100.0]]), torch.tensor([[1, 1, 0]])) == 2.0


def test_scoring_a_rollout_gives_the_log_probs_generate_sampled_with(tiny):
    model, tok = tiny
    ids, mask = batch_encode(tok, ["def f(x):", "x"])  # left-padded, as rollouts are
    torch.manual_seed(0)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=True, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=tok.pad_token_id, eos_token_id=None)
    prompt_len = ids.shape[1]
    sampled = out.sequences[:, prompt_len:]  # (B, 8)
    with_cache = torch.stack([torch.log_softmax(z.float(), -1) for z in out.logits], 1)  # (B, 8, V)
    with_cache = with_cache.gather(-1, sampled[:, :, None]).squeeze(-1)
    with torch.no_grad():
        scored = response_logprobs(model, out.sequences, torch.cat([mask, torch.ones_like(sampled)], 1), prompt_len)
    assert (scored - with_cache).abs().max() <= 1e-5
