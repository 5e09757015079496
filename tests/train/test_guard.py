"""The memory guard: shrink before the budget is hit, retry failed allocations, grow back."""

import torch

from trmkit import hardware
from trmkit.config import Config, TrainConfig
from trmkit.model.trm import TRM
from trmkit.train.guard import GiB, MemoryGuard, PeakReader, Reading, divisors_upto
from trmkit.train.session import build_optimizers
from trmkit.train.step import new_state, train_step
from tests.train.test_step import CountingStream, ctx, tiny

MiB = 2**20


def guard(mb=64, **kw):
    return MemoryGuard(budget=4 * GiB, batch_size=256, micro_batch=mb, max_micro_batch=64,
                       log=lambda m: None, **kw)


def test_divisors_upto():
    assert divisors_upto(256, 50) == 32
    assert divisors_upto(768, 100) == 96
    assert divisors_upto(7, 6) == 1
    assert divisors_upto(12, 0) == 1


def test_shrinks_over_threshold_and_keeps_the_effective_batch():
    g = guard()
    # 2 GiB at rest, +2.5 GiB during the step at micro-batch 64: 4.5 GiB > the 4 GiB budget
    mb = g.observe(10, Reading(rss=2 * GiB, step_peak=4.5 * GiB, headroom=20 * GiB))
    # room for 4 - 2 = 2 GiB of transient at 40 MiB per slot -> 51 slots -> divisor 32
    assert mb == 32 and 256 % mb == 0
    assert g.adjustments[0]["from"] == 64 and g.adjustments[0]["to"] == 32
    assert g.adjustments[0]["accumulation"] == 8


def test_shrinks_when_headroom_is_low_even_under_budget():
    g = guard()
    mb = g.observe(3, Reading(rss=1 * GiB, step_peak=1 * GiB + 640 * MiB, headroom=500 * MiB))
    assert mb < 64 and 10 * mb * 0.8 <= 400  # 10 MiB per slot must fit in 80% of 500 MiB


def test_no_change_when_comfortable_and_grows_back_when_calm():
    g = guard(mb=16, grow_after=3)
    calm = Reading(rss=1 * GiB, step_peak=1 * GiB + 16 * MiB, headroom=20 * GiB)
    assert [g.observe(i, calm) for i in range(2)] == [16, 16]
    assert g.observe(2, calm) == 32
    assert g.observe(3, calm) == 32 and g.observe(4, calm) == 32 and g.observe(5, calm) == 64
    for i in range(6, 20):
        assert g.observe(i, calm) == 64  # never beyond the plan's micro-batch


def test_oom_halves_and_gives_up_at_one():
    g = guard(mb=2)
    assert g.on_oom(1, MemoryError("x")) == 1
    try:
        g.on_oom(2, MemoryError("x"))
    except MemoryError as err:
        assert "laptop-8gb" in str(err)
    else:
        raise AssertionError("expected MemoryError at micro-batch 1")


def guarded_steps(model, cfg, start_mb):
    """Three guarded steps of batch 8 from micro-batch start_mb: (model, state, micro-batch, adjustments)."""
    opts = build_optimizers(model, cfg)
    state, stream, c = new_state(model, 8, 9, "cpu"), CountingStream(9), ctx(start_mb)
    g = MemoryGuard(budget=GiB, batch_size=8, micro_batch=start_mb, max_micro_batch=start_mb, log=lambda m: None)
    torch.manual_seed(2)
    for _ in range(3):
        train_step(model, state, stream, opts, cfg.train, c, on_oom=lambda e: g.on_oom(state.step, e))
    return model, state, c.micro_batch, g.adjustments


def test_failed_allocation_is_retried_at_half_and_matches_a_clean_run():
    def run(start_mb, fail_above):
        torch.manual_seed(1)
        cfg = Config(model=tiny(halt_max_steps=2), train=TrainConfig(batch_size=8, warmup_steps=1, lr=1e-3))
        model = TRM(cfg.model)

        def allocator(_module, args):
            if args[0].shape[0] > fail_above:
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")

        model.register_forward_pre_hook(allocator)
        model, _, mb, adjustments = guarded_steps(model, cfg, start_mb)
        return model, mb, adjustments

    guarded, mb, adjustments = run(8, fail_above=2)
    clean, _, _ = run(2, fail_above=2)
    assert mb == 2 and [a["to"] for a in adjustments] == [4, 2]
    for a, b in zip(guarded.parameters(), clean.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


class FixedReader:
    def __init__(self, reading):
        self.reading, self.released = reading, 0

    def read(self):
        return self.reading

    def release(self):
        self.released += 1


def test_preflight_shrinks_before_the_first_step_from_the_plan_estimate():
    reader = FixedReader(Reading(rss=1 * GiB, step_peak=1 * GiB, headroom=20 * GiB))
    g = guard(reader=reader, slot_bytes=64 * MiB)
    # the plan predicts 1 GiB + 64 x 64 MiB = 5 GiB at micro-batch 64: over the 4 GiB budget
    assert g.preflight(5 * GiB) == 32  # (4 - 1) GiB / 64 MiB = 48 slots -> divisor 32
    assert reader.released == 1  # freed heap goes back to the OS after a shrink


def test_other_programs_eating_shared_headroom_make_it_shrink():
    g = guard(mb=64)
    # 1 GiB resting, 0.5 GiB transient: fine under the 4 GiB budget, but a browser left only
    # 0.6 GiB of shared headroom: 80% of (1 + 0.6) GiB = 1.28 GiB < the 1.5 GiB peak
    r = Reading(rss=1 * GiB, step_peak=1.5 * GiB, headroom=8 * GiB, shared_headroom=0.6 * GiB)
    assert g.observe(7, r) < 64


def test_memory_kept_by_the_allocator_does_not_make_it_grow_back_past_the_budget():
    # Freed memory is kept in the process: the RSS after each step equals its peak, so the
    # step's growth over the resting RSS is zero. Growing back must use bytes per slot.
    g = guard(mb=64, grow_after=3, slot_bytes=40 * MiB)
    # step peak 4.2 GiB > the 4 GiB budget at micro-batch 64 -> shrink
    assert g.observe(1, Reading(rss=4.2 * GiB, step_peak=4.2 * GiB, headroom=20 * GiB)) == 32
    sizes = []
    for step in range(2, 400):  # a long run: 32 x 40 MiB less, 2.95 GiB per step, RSS = peak
        sizes.append(g.observe(step, Reading(rss=2.95 * GiB, step_peak=2.95 * GiB, headroom=20 * GiB)))
    assert set(sizes) == {32}  # never back to 64: the budget was the reason and it does not change
    assert [a["to"] for a in g.adjustments] == [32]


def test_grows_back_after_other_programs_leave_only_when_the_prediction_fits():
    g = guard(mb=64, grow_after=2, slot_bytes=16 * MiB)
    crowded = Reading(rss=1 * GiB, step_peak=1.5 * GiB, headroom=8 * GiB, shared_headroom=0.5 * GiB)
    assert g.observe(1, crowded) < 64
    shrunk = g.micro_batch
    calm = Reading(rss=1 * GiB, step_peak=1.2 * GiB, headroom=12 * GiB, shared_headroom=10 * GiB)
    sizes = [g.observe(step, calm) for step in range(2, 12)]
    assert sizes[-1] == 64 and sizes[0] == shrunk  # grew back in doublings, after calm steps
    assert all(b >= a for a, b in zip(sizes, sizes[1:]))  # no oscillation


def test_peak_reader_takes_the_step_peak_from_the_meter():
    from trmkit.hardware.memory import PeakMeter

    meter = PeakMeter(interval=0.001).start()
    reader = PeakReader(meter=meter)
    with meter.phase("train step"):
        big = torch.ones(96 * MiB // 4)  # 96 MiB, touched
        del big
        hardware.trim_heap()  # an earlier in-process run may have told glibc to keep freed memory
    r = reader.read()
    meter.stop()
    assert r.step_peak - r.rss > 64 * MiB  # seen although it was freed before the step ended
    assert r.headroom > 0


def test_an_allocation_failing_inside_backward_is_undone_and_the_step_stays_exact():
    """The failure hits after some parameters already received the micro-batch's gradient: the
    retried micro-batch must not add them twice (GradientUndo), and the carry of the micro-batches
    already done is kept (it was overwritten in place)."""
    def run(start_mb, fail_above):
        torch.manual_seed(1)
        cfg = Config(model=tiny(halt_max_steps=2), train=TrainConfig(batch_size=8, warmup_steps=1, lr=1e-3))
        model = TRM(cfg.model)

        def fail_in_backward(grad):  # the token embedding's gradient comes last: the heads' are in
            if grad.shape[0] and fail_at["n"] > fail_above:
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
            return grad

        fail_at = {"n": 0}
        model.register_forward_pre_hook(lambda _m, args: fail_at.update(n=args[0].shape[0]))
        model.embed_tokens.weight.register_hook(fail_in_backward)
        return guarded_steps(model, cfg, start_mb)

    guarded, state, mb, adjustments = run(8, fail_above=2)
    clean, clean_state, _, _ = run(2, fail_above=2)
    assert mb == 2 and [a["to"] for a in adjustments] == [4, 2]
    for a, b in zip(guarded.parameters(), clean.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert torch.allclose(state.carry.z_H, clean_state.carry.z_H, atol=1e-5)


def test_the_reserve_for_other_programs_is_wide_only_when_there_are_others():
    # alone in a cgroup whose limit is the budget (1.5 GiB): the plan's 1.24 GiB step is not shrunk
    g = MemoryGuard(budget=1.5 * GiB, batch_size=768, micro_batch=8, max_micro_batch=8, log=lambda m: None,
                    slot_bytes=60 * MiB)
    alone = Reading(rss=0.3 * GiB, step_peak=1.24 * GiB, headroom=1.19 * GiB, shared_headroom=1.19 * GiB, others=0)
    assert g.observe(0, alone) == 8
    # a browser holds 0.7 GiB beside it: 20% of what the trainer could hold stays free for its growth
    crowded = Reading(rss=0.3 * GiB, step_peak=1.24 * GiB, headroom=1.19 * GiB, shared_headroom=1.19 * GiB,
                      others=0.7 * GiB)
    assert g.observe(0, crowded) < 8
