"""LoRA through peft: the reference is the adapters-off base, exactly; selective checkpointing changes no gradient."""

import pytest
import torch

from trmkit.config import ConfigError
from trmkit.rl.lm.load import build_random
from trmkit.rl.lm.logprobs import response_logprobs
from trmkit.rl.lm.lora import (LoraSettings, apply_lora, checkpoint_layers, checkpointed_layers, lora_param_count,
                               reference_logprobs, trainable_params, uncheckpoint_layers)
from trmkit.rl.lm.memory import lora_count
from trmkit.rl.lm.shapes import SHAPES
from trmkit.rl.lm.tokenizer import batch_encode

# peft asks transformers 5 for a renamed attribute; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def batch(tok, response_len=6):
    ids, mask = batch_encode(tok, ["def f(x):", "return sorted(x)"])
    response = torch.randint(3, 259, (2, response_len), generator=torch.Generator().manual_seed(1))
    return torch.cat([ids, response], 1), torch.cat([mask, torch.ones_like(response)], 1), ids.shape[1]


def test_adapters_off_give_the_base_log_probs_exactly_after_an_update():
    model, tok = build_random("tiny")
    ids, mask, prompt_len = batch(tok)
    with torch.no_grad():
        base = response_logprobs(model, ids, mask, prompt_len, use_checkpoint=False)
    adapters = lora_param_count(model, LoraSettings(rank=4))
    policy = apply_lora(model, LoraSettings(rank=4))
    optimizer = torch.optim.Adam(trainable_params(policy), lr=1e-2)
    for _ in range(2):
        optimizer.zero_grad()
        (-response_logprobs(policy, ids, mask, prompt_len).mean()).backward()
        optimizer.step()
    with torch.no_grad():
        moved = response_logprobs(policy, ids, mask, prompt_len)
    assert (moved - base).abs().max() > 1e-3  # the adapters did change the policy
    assert torch.equal(reference_logprobs(policy, ids, mask, prompt_len), base)
    assert sum(p.numel() for p in policy.parameters()) == 279_616 + adapters  # no second copy


@pytest.mark.parametrize("targets", [("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                                     ("q_proj", "v_proj")])
def test_the_trainable_parameters_are_what_lora_says(targets):
    model, _ = build_random("tiny")
    settings = LoraSettings(rank=8, targets=targets)
    expected = lora_param_count(model, settings)
    policy = apply_lora(model, settings)
    trained = sum(p.numel() for p in trainable_params(policy))
    # r (in + out) per projection per layer: q 64 -> 64, k and v 64 -> 32, o 64 -> 64, gate/up 64 -> 256, down 256 -> 64
    per_layer = {"q_proj": 8 * 128, "k_proj": 8 * 96, "v_proj": 8 * 96, "o_proj": 8 * 128, "gate_proj": 8 * 320,
                 "up_proj": 8 * 320, "down_proj": 8 * 320}
    assert trained == expected == lora_count(SHAPES["tiny"], 8, targets) == 4 * sum(per_layer[t] for t in targets)
    assert all("lora_" in n for n, p in policy.named_parameters() if p.requires_grad)


def test_a_target_the_model_lacks_is_named_with_the_closest():
    model, _ = build_random("tiny")
    with pytest.raises(ConfigError, match="rl.lora.targets: .* no linear layer 'q_prj'; did you mean 'q_proj'"):
        apply_lora(model, LoraSettings(targets=("q_prj",)))
    with pytest.raises(ConfigError, match="rl.lora.rank"):
        LoraSettings(rank=0)


def saved_bytes(model, ids, mask, prompt_len):
    """Bytes autograd saves for backward during one forward, and the loss."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = response_logprobs(model, ids, mask, prompt_len, chunk_tokens=4).sum()
    return total[0], loss


def test_selective_checkpointing_keeps_gradients_and_saves_less():
    model, tok = build_random("tiny")
    policy = apply_lora(model, LoraSettings(rank=4))
    torch.nn.init.normal_(policy.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight)
    ids, mask, prompt_len = batch(tok, response_len=32)
    grads = []
    kept = []
    for layers in ([], [1, 3], [0, 1, 2, 3]):
        uncheckpoint_layers(policy)
        assert checkpoint_layers(policy, layers) == checkpointed_layers(policy) == layers
        policy.zero_grad()
        nbytes, loss = saved_bytes(policy, ids, mask, prompt_len)
        loss.backward()
        kept.append(nbytes)
        grads.append([p.grad.clone() for p in trainable_params(policy)])
    for other in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other))
    assert kept[0] > kept[1] > kept[2] and kept[2] < kept[0] / 3
    assert any(g.abs().max() > 0 for g in grads[0])


def test_a_layer_out_of_range_is_named():
    model, _ = build_random("tiny")
    with pytest.raises(ConfigError, match=r"checkpoint_layers: layer 4 is out of range; .* 4 decoder layers \(0-3\)"):
        checkpoint_layers(model, [0, 4])
