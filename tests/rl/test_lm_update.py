"""The memory-efficient TR-RPG update: the same gradients as one unchunked pass, ratio 1 at the first epoch, and
out-of-memory (predicted or raised) halving the micro-batch and redoing the step from the same state."""

import copy
import functools

import pytest
import torch

from trmkit.rl.lm.generate import rollout
from trmkit.rl.lm.load import build_random
from trmkit.rl.lm.logprobs import k3_kl, response_logprobs_unchunked
from trmkit.rl.lm.lora import LoraSettings, apply_lora, checkpoint_layers, trainable_params
from trmkit.rl.lm.update import MicroBatch, RoleRows, UpdateSettings, is_oom, update
from trmkit.rl.loss import trrpg_loss

PROMPTS = ["def f(x):\n    return x * 2", "x", "Predict f([1, 2])"]
TEMPERATURE = 0.9


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny shape's ops are too small for threads; on a loaded machine their barriers cost seconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    base()  # the shared tiny model, built once for the module
    yield
    torch.set_num_threads(before)


@functools.lru_cache(maxsize=1)
def base():
    return build_random("tiny", dtype="float32")


def policy(seed=0):
    """The tiny shape with LoRA; B perturbed so that the policy differs from its adapters-off reference."""
    model, tok = copy.deepcopy(base()[0]), base()[1]
    torch.manual_seed(seed)
    model = apply_lora(model, LoraSettings(rank=4))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return model, tok


def roles_of(model, tok, perturb=0.0):
    """Two roles (propose 3 x 2 rows, solve 3 x 3 rows) with their own weights, betas and advantages."""
    gen = torch.Generator().manual_seed(7)
    out = []
    for name, samples, weight, beta in (("propose", 2, 0.5, 0.05), ("solve", 3, 1.0, 0.1)):
        ro = rollout(model, tok, PROMPTS, samples=samples, max_new_tokens=10, max_prompt_tokens=32,
                     temperature=TEMPERATURE, micro_batch=4, generator=gen)
        ro.old_logp = ro.old_logp + perturb * torch.randn(ro.old_logp.shape, generator=gen) * ro.response_mask
        out.append(RoleRows(ro, torch.randn(ro.rows, generator=gen), weight, beta, name))
    return out


def settings(micro=2, chunk=5, kl=0.2):
    return UpdateSettings(micro_batch=micro, chunk_tokens=chunk, log_ratio_clip=0.3, kl_reference=kl,
                          max_grad_norm=0.0)


class Recorder(torch.optim.SGD):
    """Keeps the gradients it is asked to step with, and leaves the parameters alone."""

    def step(self, closure=None):
        self.seen = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]


def whole_batch_grads(model, roles, kl_weight, clip=0.3):
    """The step's loss through whole (rows, tokens, vocab) logits of each role at once, no checkpointing."""
    model.zero_grad()
    tokens = sum(r.rollout.response_mask.sum() for r in roles)
    for role in roles:
        ro = role.rollout
        ids = torch.cat([ro.prompt_ids, ro.response_ids], 1)
        mask = torch.cat([ro.prompt_mask, torch.ones_like(ro.response_ids)], 1)
        m = ro.response_mask.float()
        logp = response_logprobs_unchunked(model, ids, mask, ro.prompt_ids.shape[1], TEMPERATURE) * m
        loss, _ = trrpg_loss(logp.sum(1), (ro.old_logp * m).sum(1), role.advantages, role.beta, clip)
        total = loss.sum() * role.weight / ro.rows
        with model.disable_adapter(), torch.no_grad():
            ref = response_logprobs_unchunked(model, ids, mask, ro.prompt_ids.shape[1], TEMPERATURE)
        (total + kl_weight * (k3_kl(logp, ref) * m).sum() / tokens).backward()
    return [p.grad.detach().clone() for p in trainable_params(model)]


def test_chunked_checkpointed_accumulated_update_has_the_whole_batch_gradients():
    model, tok = policy()
    roles = roles_of(model, tok, perturb=0.05)
    truth = whole_batch_grads(model, roles, kl_weight=0.2)
    checkpoint_layers(model, range(4))
    opt = Recorder(trainable_params(model), lr=1.0)
    metrics = update(model, opt, roles, settings(micro=2, chunk=5), MicroBatch(2), log=lambda *a: None)
    assert len(opt.seen) == len(truth) == 4 * 7 * 2  # A and B of 7 projections in 4 layers
    worst = max((a - b).abs().max().item() for a, b in zip(truth, opt.seen))
    assert worst <= 1e-5
    assert max(g.abs().max().item() for g in truth) > 1e-3  # the gradients are not all ~0
    assert metrics["kl_reference"] > 0 and metrics["tokens_updated"] == sum(r.rollout.response_mask.sum()
                                                                             for r in roles)


def test_ratio_is_one_at_the_first_epoch():
    model, tok = policy()
    roles = roles_of(model, tok)
    micro = MicroBatch(3, ceiling=6, log=lambda *a: None)
    grow_at_once = UpdateSettings(3, 5, 0.3, 0.2, 0.0, grow_after=1)
    metrics = update(model, torch.optim.Adam(trainable_params(model), lr=1e-3), roles, grow_at_once, micro)
    assert abs(metrics["ratio"] - 1.0) <= 1e-5 and metrics["clipped"] == 0
    assert micro.size == 6  # one clean step with grow_after=1: doubled, up to its ceiling
    assert metrics["log_ratio_abs_max"] <= 1e-4  # a response's summed log-prob, rescored with other padding


def step_at(start_micro, guard=None, hook=None):
    model, tok = policy()
    roles = roles_of(model, tok, perturb=0.05)
    handle = model.get_decoder().layers[0].register_forward_pre_hook(hook) if hook else None
    opt = torch.optim.Adam(trainable_params(model), lr=1e-2)
    micro, logged = MicroBatch(start_micro, log=lambda m: logged.append(m)), []
    metrics = update(model, opt, roles, settings(micro=start_micro), micro, guard=guard, log=logged.append)
    if handle:
        handle.remove()
    steps = {int(s["step"]) for s in opt.state.values()}
    return [p.detach().clone() for p in trainable_params(model)], micro, metrics, logged, steps


def test_a_guard_refusing_large_micro_batches_halves_to_two_and_matches_a_step_at_two():
    params, micro, metrics, logged, steps = step_at(8, guard=lambda rows: rows <= 2)
    reference, _, _, _, _ = step_at(2)
    assert micro.size == 2 and micro.halvings == 2 and metrics["retries"] == 2 and metrics["micro_batch"] == 2
    assert steps == {1}  # the optimizer stepped once
    assert sum("warning" in m for m in logged) == 2
    assert max((a - b).abs().max().item() for a, b in zip(params, reference)) <= 1e-7


def test_an_out_of_memory_error_mid_step_zeroes_grads_halves_and_continues():
    calls = []

    def oom_on_second_micro_batch(module, args):
        if torch.is_grad_enabled():
            calls.append(1)
            if len(calls) == 2:  # the first micro-batch's gradients are already accumulated
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    params, micro, metrics, _, steps = step_at(4, hook=oom_on_second_micro_batch)
    reference, _, _, _, _ = step_at(2)
    assert micro.size == 2 and metrics["retries"] == 1 and steps == {1}
    assert max((a - b).abs().max().item() for a, b in zip(params, reference)) <= 1e-7


def test_which_errors_count_as_out_of_memory_and_the_micro_batch_grows_back():
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert not is_oom(RuntimeError("shape mismatch"))
    micro = MicroBatch(4, grow_after=2, log=lambda m: None)
    micro.halve("test")
    micro.clean_step()
    assert micro.size == 2
    saved = micro.state_dict()
    again = MicroBatch(1)
    again.load_state_dict(saved)
    again.clean_step()
    assert again.size == 4 and again.clean == 0
    with pytest.raises(MemoryError, match="one row does not fit"):
        MicroBatch(1).halve("test")


def test_a_non_memory_error_is_raised_not_retried():
    model, tok = policy()
    roles = roles_of(model, tok)
    roles[0].advantages = roles[0].advantages[:2]
    with pytest.raises(ValueError, match="advantages"):
        update(model, torch.optim.SGD(trainable_params(model), lr=0.1), roles, settings(), MicroBatch(2))
    plain = base()[0]
    with pytest.raises(ValueError, match="LoRA"):
        update(plain, torch.optim.SGD(plain.parameters(), lr=0.1), roles, settings(kl=0.1), MicroBatch(2))


def test_an_error_inside_the_step_that_is_not_out_of_memory_propagates_without_a_halving():
    model, tok = policy()
    roles = roles_of(model, tok)
    calls = []

    def broken(module, args):
        calls.append(1)
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    handle = model.get_decoder().register_forward_pre_hook(broken)
    micro = MicroBatch(4)
    try:
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            update(model, torch.optim.SGD(trainable_params(model), lr=0.1), roles, settings(), micro)
    finally:
        handle.remove()
    assert calls == [1] and micro.size == 4 and micro.halvings == 0  # raised at once, never retried
