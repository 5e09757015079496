"""KV-cache rollouts: reproducible from a generator, stopped at eos, scored as the update scores them."""

import pytest
import torch

from trmkit.rl.lm.generate import encode_prompts, rollout
from trmkit.rl.lm.load import build_random
from trmkit.rl.lm.logprobs import response_logprobs_unchunked
from trmkit.rl.lm.tokenizer import ByteTokenizer, batch_encode

PROMPTS = ["def f(x):\n    return x[::-1]", "x", "Predict f([1, 2])"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny shape's ops are too small for threads; on a loaded machine their barriers cost seconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_random("tiny", dtype="float32")
    # raise the eos logit so that random weights end some responses early (p(eos) ~ 4% a token)
    eos_bias = torch.zeros(model.config.vocab_size)
    eos_bias[tok.eos_token_id] = 3.0
    model.get_output_embeddings().register_forward_hook(lambda m, i, out: out + eos_bias.to(out.dtype))
    return model, tok


def sample(model, tok, seed=0, **kw):
    args = dict(samples=3, max_new_tokens=40, max_prompt_tokens=64, temperature=0.8, micro_batch=4)
    args.update(kw)
    return rollout(model, tok, PROMPTS, generator=torch.Generator().manual_seed(seed), **args)


def test_same_generator_state_same_tokens_and_layout(tiny):
    model, tok = tiny
    a, b, c = sample(model, tok, 0), sample(model, tok, 0), sample(model, tok, 1)
    assert torch.equal(a.response_ids, b.response_ids) and a.texts == b.texts
    assert not torch.equal(a.response_ids, c.response_ids)
    n = len(PROMPTS) * 3
    assert a.prompt_ids.shape[0] == a.response_ids.shape[0] == len(a.texts) == n
    assert a.response_mask.dtype == torch.bool and a.old_logp.dtype == torch.float32
    for i in range(n):  # prompt-major: rows 3i..3i+2 hold prompt i
        assert a.prompt_ids[i][a.prompt_mask[i].bool()].tolist() == tok.encode(PROMPTS[i // 3])
    assert (a.old_logp[~a.response_mask] == 0).all() and (a.old_logp[a.response_mask] < 0).all()


def test_rows_stop_at_eos_and_padding_follows(tiny):
    model, tok = tiny
    ro = sample(model, tok, 0)
    lengths = ro.response_mask.sum(1)
    ended = [i for i in range(ro.rows) if tok.eos_token_id in ro.response_ids[i].tolist()]
    assert ended and lengths.min() < 40  # some rows ended early on eos
    for i in ended:
        first = ro.response_ids[i].tolist().index(tok.eos_token_id)
        assert lengths[i] == first + 1  # the mask covers the tokens up to and including eos
        assert (ro.response_ids[i, first + 1:] == tok.pad_token_id).all()
        assert ro.texts[i] == tok.decode(ro.response_ids[i, :first].tolist())


def test_old_logp_is_the_samplers_and_the_unchunked_rescoring(tiny):
    model, tok = tiny
    ro = sample(model, tok, 2, micro_batch=2)
    assert (ro.old_logp - ro.sampled_logp).abs().max() <= 1e-5  # the cached steps score as one full pass
    ids = torch.cat([ro.prompt_ids, ro.response_ids], 1)
    mask = torch.cat([ro.prompt_mask, torch.ones_like(ro.response_ids)], 1)
    with torch.no_grad():
        truth = response_logprobs_unchunked(model, ids, mask, ro.prompt_ids.shape[1], temperature=0.8)
    assert (truth * ro.response_mask - ro.old_logp).abs().max() <= 1e-5


def test_greedy_matches_transformers_generate(tiny):
    model, tok = tiny
    ro = rollout(model, tok, PROMPTS, samples=1, max_new_tokens=12, max_prompt_tokens=64, temperature=1.0,
                 micro_batch=2, greedy=True)
    ids, mask = batch_encode(tok, PROMPTS)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    theirs = out[:, ids.shape[1]:]
    assert torch.equal(ro.response_ids[:, :theirs.shape[1]], theirs)


def test_long_prompts_keep_bos_and_their_end_and_bad_arguments_are_named():
    tok = ByteTokenizer(vocab_size=512)
    (row,) = encode_prompts(tok, ["abcdefgh"], max_prompt_tokens=4)
    assert row == [tok.bos_token_id, *tok.encode("fgh", add_bos=False)]
    with pytest.raises(ValueError, match="micro_batch"):
        rollout(None, tok, ["x"], samples=1, max_new_tokens=1, max_prompt_tokens=4, temperature=1.0, micro_batch=0)
    with pytest.raises(ValueError, match="temperature"):
        rollout(None, tok, ["x"], samples=1, max_new_tokens=1, max_prompt_tokens=4, temperature=0.0, micro_batch=1)
