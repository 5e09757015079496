"""The planner: memory model against real peak RSS, micro-batch/accumulation, errors, dtype choice."""

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from trmkit import config, hardware, plan
from trmkit.config import Config, ConfigError, ModelConfig, RunConfig, TrainConfig
from trmkit.hardware import cpu as cpu_mod
from trmkit.hardware.allocator import KEEP_TRIM_THRESHOLD
from trmkit.model.layers import Network, rotary_tables
from trmkit.model.losses import act_loss
from trmkit.model.trm import TRM
from trmkit.bench.memory import measure_real_step
from trmkit.plan import cache, calibrate, choose, device, measure, memory_model

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(autouse=True)
def kernels_match_the_features(monkeypatch):
    """These tests set the CPU's features themselves: torch's kernels are taken to use them
    (hardware.cpu.native_bf16 also asks torch, which on an AVX2 machine would say no)."""
    monkeypatch.setattr(cpu_mod, "torch_kernels", lambda: "AVX512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)

SUDOKU = dict(vocab_size=11, seq_len=81, num_puzzle_ids=1)

# One real train_step (the second one, so Adam's m and v exist during backward) in a fresh
# process; prints the baseline RSS before the model and the peak RSS of the process. On Linux the
# peak is VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's peak (Linux keeps it
# across exec), and the pytest process may have grown past the smaller cases.
# H_cycles=1: the cycles without gradients cost time, not memory (measured: D=128, micro-batch 64,
# H_cycles 3 vs 1 peak at 2345 vs 2360 MiB), so the test runs them only once.
PAPER = ModelConfig(hidden_size=512, H_cycles=1, **SUDOKU)
LAPTOP = ModelConfig(hidden_size=128, H_cycles=1, **SUDOKU)
# (model, global batch, micro-batch): micro-batch 8 of the laptop model runs with accumulation 4,
# so the carry of the whole batch is measured too.
PEAK_CASES = {"paper-8": (PAPER, 8, 8), "laptop-8-of-32": (LAPTOP, 32, 8),
              "laptop-32": (LAPTOP, 32, 32), "laptop-64": (LAPTOP, 64, 64)}
# The documented error (docs/planning.md, "Estimate vs measured"; plan/calibrate.py: "within 10% of the
# measured peak for the Sudoku configs"). One micro-batch per step: the table's rows for these configs
# are -2.2% (paper 8), -0.7% (laptop 32), -0.2% (laptop 64, H_cycles 1), and every single-micro-batch
# row is within 6.7%: 6% here. Accumulation: freed activations fragment the heap, the table's worst
# row is -8.9% (16 micro-batches): the promised 10% here.
# Measured by this test (14-16 runs of each: 10 reading VmHWM, 4-6 ru_maxrss): paper-8 -1.9%..+2.6%,
# laptop-8-of-32 -2.3%..+0.4%, laptop-32 -2.7%..+2.2%, laptop-64 -3.5%..+1.3%. Before the carry was
# updated in place (trmkit at ff737d0), laptop-8-of-32 measured -10.2%..-3.5% in 12 runs.
TOLERANCE = {"paper-8": 0.06, "laptop-8-of-32": 0.10, "laptop-32": 0.06, "laptop-64": 0.06}
# Over-estimates waste memory but never break the budget. Since the sub-block's input is cast once
# and RMSNorm has its own backward (2026-11-27) the real steps need less than the model counts:
# measured paper-8 +5.1%, laptop-8-of-32 +11.7%..+13.1%, laptop-32 +4.3%, laptop-64 +0.4%.
# The same paper-8 step peaks differently from run to run: on an AMD EPYC (float32, 2 cores,
# 2026-11-29) five quiet runs peaked at 1,284-1,357 MiB (+4.3%..+10.3% over the estimate) and one
# CI run beside the rest of the suite at 1,232 MiB (+15.0%): 20% leaves room for that spread.
OVER_TOLERANCE = 0.20


@pytest.fixture(scope="module")
def measured_peaks() -> dict[str, dict]:
    """All real-step measurements, two fresh single-thread processes at a time (~20 s in all)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        longest_first = sorted(PEAK_CASES, key=lambda n: -PEAK_CASES[n][0].hidden_size ** 2 * PEAK_CASES[n][1])
        futures = {name: pool.submit(measure_real_step, *PEAK_CASES[name]) for name in longest_first}
        results = {name: f.result() for name, f in futures.items()}
    print(f"\nreal-step measurements took {time.perf_counter() - t0:.1f} s")
    return results


@pytest.mark.parametrize("name", list(PEAK_CASES))
def test_estimate_within_the_documented_error_of_measured_peak_rss(measured_peaks, name):
    model, batch, micro_batch = PEAK_CASES[name]
    measured = measured_peaks[name]
    est = memory_model.estimate_memory(model, batch, micro_batch, baseline=measured["baseline"])
    error = est.train_peak / measured["peak"] - 1
    print(f"{name}: est {est.train_peak / MiB:.0f} MiB, measured {measured['peak'] / MiB:.0f} MiB ({error:+.1%})")
    assert -TOLERANCE[name] < error < max(TOLERANCE[name], OVER_TOLERANCE)


@pytest.mark.parametrize("mixer", ["mlp_t", "attention", "conv"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_activation_formula_matches_what_autograd_saves(mixer, dtype):
    """net_call_bytes counts the tensors autograd keeps for one network call (weights excluded)."""
    grid = dict(puzzle_emb_len=0, grid_height=9, grid_width=9) if mixer == "conv" else {}
    m = ModelConfig(hidden_size=64, num_heads=4, mixer=mixer, **SUDOKU, **grid)
    S, B = memory_model.seq_total(m), 2
    net = Network(m, S)
    rope = rotary_tables(S, 16, m.rope_theta) if mixer == "attention" else (9, 9) if mixer == "conv" else None
    weights = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        is_weight_copy = dtype == "bfloat16" and t.dim() == 2 and t.shape[0] * t.shape[1] in {
            p.numel() for p in net.parameters()}
        if storage.data_ptr() not in weights and not is_weight_copy:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        net(torch.randn(B, S, 64), torch.randn(B, S, 64), rope)
    ratio = sum(saved.values()) / B / memory_model.net_call_bytes(m, 2 if dtype == "bfloat16" else 4)
    assert 0.9 < ratio < 1.1


def test_parameter_count_matches_the_model():
    conv = dict(mixer="conv", puzzle_emb_len=0, grid_height=9, grid_width=9, hidden_size=64)
    for kw in (dict(hidden_size=512), dict(hidden_size=96, mixer="attention", num_heads=4), conv,
               {**conv, "conv_dense": True, "mlp_width": 128}):
        m = ModelConfig(**kw, **SUDOKU)
        assert memory_model.count_parameters(m) == TRM(m).num_parameters()


def test_carry_is_counted_for_the_global_batch_and_activations_for_the_micro_batch():
    small = memory_model.estimate_memory(PAPER, 64, 8)
    large = memory_model.estimate_memory(PAPER, 768, 8)
    S, D = memory_model.seq_total(PAPER), PAPER.hidden_size
    # z_H and z_L of every slot (float32, updated in place: no second copy)
    assert large.parts["carry"] - small.parts["carry"] >= (768 - 64) * 2 * S * D * 4
    assert large.parts["activations"] == small.parts["activations"]
    ckpt = memory_model.estimate_memory(PAPER, 64, 8, grad_checkpointing=True)
    assert ckpt.micro_per_slot < small.micro_per_slot / 3


# ----------------------------------------------------------------------------- the planner

@pytest.fixture(scope="module")
def probed():
    return hardware.probe()


@pytest.fixture
def hw(probed):
    return plan.with_memory_limit(probed, 16 * GiB)


@pytest.fixture
def fake_speed(monkeypatch):
    """Fixed timings instead of measuring: bf16 1.5x faster; compile never measured."""
    calls = []

    def speed(m, micro_batch, dtype, threads, device="cpu", repeats=2):
        calls.append(dtype)
        factor = 1.0 if dtype == "float32" else 1 / 1.5
        return {"forward": 0.01 * factor, "train": 0.03 * factor}

    monkeypatch.setattr(measure, "measure_speed", speed)
    monkeypatch.setattr(measure, "measure_compile", lambda *a, **k: {"error": "not measured in tests"})
    monkeypatch.setattr(measure, "others_cpu_percent", lambda seconds=0.3: 0.0)
    return calls


def budgeted(cfg, budget):
    """cfg with run.memory_budget set, as --memory-budget does."""
    return config.replace(cfg, "run", memory_budget=str(int(budget)))


def sudoku_cfg(batch=768, hidden=512, **run) -> Config:
    return Config(run=RunConfig(**run), model=ModelConfig(hidden_size=hidden, **SUDOKU),
                  train=TrainConfig(batch_size=batch, max_steps=100))


@pytest.mark.parametrize("budget", [3 * GiB // 2, 3 * GiB, 6 * GiB, 12 * GiB])
@pytest.mark.parametrize("batch", [768, 96])
def test_micro_batch_divides_batch_fits_budget_and_is_the_largest(hw, fake_speed, budget, batch):
    cfg = sudoku_cfg(batch, dtype="float32")
    p = plan.make_plan(budgeted(cfg, budget), hw, log=lambda _: None)
    mb, ckpt = p.micro_batch.value, p.grad_checkpointing.value
    assert mb * p.accumulation.value == batch and batch % mb == 0
    planned = budget / (1 + memory_model.DEFAULT_MARGIN)  # no run of this config has measured the model yet
    assert p.estimate.train_peak <= planned and p.estimate.total <= planned
    larger = [d for d in memory_model.divisors(batch) if d > mb]
    if larger:
        est = memory_model.estimate_memory(cfg.model, batch, larger[0], grad_checkpointing=ckpt,
                                       baseline=p.estimate.parts["baseline"])
        assert est.train_peak > planned


def test_checkpointing_turns_on_when_micro_batch_1_does_not_fit_without(hw, fake_speed):
    cfg = sudoku_cfg(768, dtype="float32")
    baseline = max(hw.memory.rss, memory_model.DEFAULT_BASELINE // 2)
    without = memory_model.estimate_memory(cfg.model, 768, 1, baseline=baseline).train_peak
    planned = without - 8 * MiB  # what the steps are fitted into: the budget less the model's margin
    p = plan.make_plan(budgeted(cfg, int(planned * (1 + memory_model.DEFAULT_MARGIN))), hw, log=lambda _: None)
    assert p.grad_checkpointing.value is True and p.micro_batch.value >= 1
    assert "does not fit" in p.grad_checkpointing.reason
    roomy = plan.make_plan(budgeted(cfg, 12 * GiB), hw, log=lambda _: None)
    assert roomy.grad_checkpointing.value is False  # micro-batch 48+ fits: not worth recomputing


def test_tiny_budget_stops_with_a_suggestion(hw, fake_speed):
    # the baseline is this process's RSS, which grows as the suite runs: fix it as a fresh `trmkit` has it
    hw = dataclasses.replace(hw, memory=dataclasses.replace(hw.memory, rss=300 * MiB))
    with pytest.raises(ConfigError) as err:  # 750 MiB, 682 after the margin: batch 256 fits, 768 does not
        plan.make_plan(budgeted(sudoku_cfg(768, dtype="float32"), 750 * MiB), hw, log=lambda _: None)
    msg = str(err.value)
    assert "does not fit the memory budget of 750.0 MiB" in msg
    assert "set train.batch_size=" in msg and "est." in msg and "raise the budget" in msg
    assert "laptop-8gb.yaml" not in msg  # the presets hold the same model and batch: no help here
    with pytest.raises(ConfigError, match=r"model.hidden_size=(768|512) .*configs/laptop-8gb.yaml"):
        plan.make_plan(budgeted(sudoku_cfg(768, hidden=1024, dtype="float32"), 3 * GiB // 2), hw,
                       log=lambda _: None)


def test_set_micro_batch_that_does_not_fit_names_one_that_does(hw, fake_speed):
    cfg = sudoku_cfg(768, dtype="float32", grad_checkpointing="off")
    cfg = dataclasses.replace(cfg, train=TrainConfig(batch_size=768, micro_batch=384, max_steps=100))
    with pytest.raises(ConfigError, match=r"train.micro_batch=384 needs .* set train.micro_batch=\d+"):
        plan.make_plan(budgeted(cfg, 4 * GiB), hw, log=lambda _: None)


def test_budget_from_config_and_default(hw, fake_speed):
    p = plan.make_plan(sudoku_cfg(96, dtype="float32", memory_budget="3GiB"), hw, log=lambda _: None)
    assert p.budget.value == 3 * GiB and "run.memory_budget=3GiB" in p.budget.reason
    huge = plan.make_plan(budgeted(sudoku_cfg(96, dtype="float32"), 64 * GiB), hw, log=lambda _: None)
    assert "more than the" in huge.budget.reason and "free now" in huge.budget.reason
    default = plan.make_plan(sudoku_cfg(96, dtype="float32"), hw, log=lambda _: None)
    assert default.budget.value == int(0.8 * 16 * GiB)  # simulated limit, nothing else running
    assert "80% of the 16.0 GiB limit" in default.budget.reason


def test_every_choice_has_a_reason_and_is_logged(hw, fake_speed):
    logged = []
    p = plan.make_plan(sudoku_cfg(96), hw, cache_dir=None, log=logged.append)
    assert all(c.reason.strip() for c in p.choices().values())
    choices = [line for line in logged if line.startswith("plan: ") and not line.startswith("plan: time ~")]
    assert len(choices) == len(p.choices())
    assert [line for line in logged if line.startswith("plan: time ~")]  # and how long a step will take
    assert set(p.to_dict()) >= {"micro_batch", "dtype", "compile", "grad_checkpointing", "memory"}
    report = plan.plan_report(p)
    assert "activations" in report and "carry" in report and "training peak" in report


def test_bf16_choice_reads_the_cached_measurement_and_keeps_float32_when_slower(hw, monkeypatch, tmp_path):
    calls = []

    def slower_bf16(m, micro_batch, dtype, threads, device="cpu", repeats=2):
        calls.append(dtype)
        return {"forward": 0.01, "train": 0.03} if dtype == "float32" else {"forward": 0.02, "train": 0.05}

    monkeypatch.setattr(measure, "measure_speed", slower_bf16)
    monkeypatch.setattr(measure, "others_cpu_percent", lambda seconds=0.3: 0.0)
    features = dataclasses.replace(hw.cpu.features, avx512_bf16=True)
    hw = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, features=features))
    cfg = sudoku_cfg(96, compile="off")
    first = plan.make_plan(cfg, hw, cache_dir=tmp_path, log=lambda _: None)
    assert first.dtype.value == "float32" and "not at least" in first.dtype.reason
    assert set(calls) == {"bfloat16", "float32"}
    measured = len(calls)
    second = plan.make_plan(cfg, hw, cache_dir=tmp_path, log=lambda _: None)
    assert second.dtype.value == "float32" and len(calls) == measured  # from the cache, not measured again
    assert (tmp_path / cache.SPEED_FILE).is_file()


def test_bf16_chosen_when_measured_faster_and_never_assumed(hw, fake_speed):
    native = dataclasses.replace(hw.cpu.features, avx512_bf16=True, amx_bf16=False, arm_bf16=False)
    emulated = dataclasses.replace(native, avx512_bf16=False)
    fast = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, features=native))
    slow = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, features=emulated))
    assert plan.make_plan(sudoku_cfg(96, compile="off"), fast, log=lambda _: None).dtype.value == "bfloat16"
    fake_speed.clear()
    p = plan.make_plan(sudoku_cfg(96, compile="off"), slow, log=lambda _: None)
    assert p.dtype.value == "float32" and set(fake_speed) == {"float32"}  # bf16 not even measured


def test_compile_off_for_short_runs_and_weighed_for_long_ones(hw, fake_speed, monkeypatch):
    short = plan.make_plan(sudoku_cfg(96, dtype="float32"), hw, log=lambda _: None)
    assert short.compile.value is False and "short run" in short.compile.reason
    monkeypatch.setattr(measure, "measure_compile",
                        lambda *a, **k: {"compile_seconds": 60.0, "eager": 0.03, "compiled": 0.02})
    long_run = sudoku_cfg(96, dtype="float32")
    long_run = dataclasses.replace(long_run, train=TrainConfig(batch_size=96, max_steps=200_000))
    lines = []
    p = plan.make_plan(long_run, hw, log=lines.append)
    assert p.compile.value is True and "pays back" in p.compile.reason
    # the step estimate is that of compiled calls: the eager one scaled by the measured 0.02 / 0.03
    eager = plan.make_plan(dataclasses.replace(long_run, run=dataclasses.replace(long_run.run, compile="off")),
                           hw, log=lambda _: None)
    assert p.step_seconds == pytest.approx(eager.step_seconds * 2 / 3)
    assert any("one network call, compiled;" in line for line in lines if line.startswith("plan: time ~"))
    # the same run with a 4-minute wall-clock budget: the budget, not max_steps, is the run's length
    lines = []
    timed = dataclasses.replace(long_run, train=TrainConfig(batch_size=96, max_steps=200_000, max_minutes=4))
    p = plan.make_plan(timed, hw, log=lines.append)
    assert p.compile.value is False and "short run (train.max_minutes=4 ends it after" in p.compile.reason
    told = [line for line in lines if line.startswith("plan: time ~")]
    assert told and "s per optimizer step at batch 96" in told[0] and "train.max_minutes=4" in told[0]


def test_checkpoint_with_another_sequence_length_is_refused():
    cfg = sudoku_cfg(96)
    with pytest.raises(ConfigError, match="model.seq_len=81 .* trained with 100"):
        plan.check_sequence(cfg, {"model": {"seq_len": 100, "puzzle_emb_len": 16, "vocab_size": 11}})
    plan.check_sequence(cfg, {"model": {"seq_len": 81, "puzzle_emb_len": 16, "vocab_size": 11}})


def test_fit_calibration_recovers_overhead_and_scale():
    m = LAPTOP
    truth = memory_model.Calibration(runtime_overhead=123 * MiB, backward_calls=1.3)
    runs = [(n, {"baseline": 200 * MiB, "peak": memory_model.estimate_memory(
        m, n, n, baseline=200 * MiB, calibration=truth).train_peak}) for n in (2, 8)]
    fitted = calibrate.fit_calibration(m, "float32", runs[0], runs[1], "test")
    assert fitted.backward_calls == pytest.approx(1.3, abs=0.002)
    assert abs(fitted.runtime_overhead - 123 * MiB) < 2 * MiB


def test_calibration_measures_real_steps_in_fresh_processes_and_caches_the_fit(tmp_path, monkeypatch):
    """calibrate_memory runs calibrate.py's child (started by a code string naming the module) twice,
    fits the constants and caches them: a second call measures nothing. Each real step it measured
    is recorded here and checked (no third process to check one)."""
    m = ModelConfig(hidden_size=32, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, puzzle_emb_len=2, **SUDOKU)
    real, measured = calibrate.measure_step_peak, []
    monkeypatch.setattr(calibrate, "measure_step_peak",
                        lambda *a, **k: measured.append((a[1:3], real(*a, **k))) or measured[-1][1])
    logged = []
    fitted = calibrate.calibrate_memory(m, "float32", 1, tmp_path, log=logged.append)
    assert len(logged) == 1 and "calibrating" in logged[0]
    assert fitted.source.startswith("measured here") and fitted.runtime_overhead >= 0
    assert 0 <= fitted.backward_calls <= 3
    stored = json.loads((tmp_path / cache.CALIBRATION_FILE).read_text())
    assert list(stored.values()) == [dataclasses.asdict(fitted)]
    again = calibrate.calibrate_memory(m, "float32", 1, tmp_path, log=logged.append)
    assert again == fitted and len(logged) == 1  # from the cache, not measured again
    assert [sizes for sizes, _ in measured] == [(2, 2), (8, 8)]  # batch, micro-batch: two processes, not four
    for _, step in measured:
        assert 100 * MiB < step["baseline"] < step["peak"] and step["seconds"] > 0


def test_grad_checkpointing_gives_the_same_gradients():
    m = ModelConfig(hidden_size=32, num_heads=2, L_layers=2, H_cycles=2, L_cycles=2, puzzle_emb_len=2,
                    vocab_size=11, seq_len=9, num_puzzle_ids=3)
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = TRM(m)
        model.grad_checkpointing = ckpt
        carry = model.initial_carry(4)
        inputs = torch.randint(1, 11, (4, 9))
        _, _, logits, q = model(carry.z_H, carry.z_L, inputs, torch.tensor([0, 1, 2, 0]))
        loss, _ = act_loss(logits, inputs, q, 0.5)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-5)


def test_timings_taken_beside_other_work_are_flagged_and_not_cached(hw, fake_speed, monkeypatch, tmp_path):
    monkeypatch.setattr(measure, "others_cpu_percent", lambda seconds=0.3: 80.0)
    features = dataclasses.replace(hw.cpu.features, avx512_bf16=True)
    hw = dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, features=features))
    p = plan.make_plan(sudoku_cfg(96, compile="off"), hw, cache_dir=tmp_path, log=lambda _: None)
    assert "other processes used 80%" in p.dtype.reason and "not cached" in p.dtype.reason
    assert not (tmp_path / cache.SPEED_FILE).exists()


def test_freed_memory_is_kept_only_for_glibc_on_the_cpu_unless_set():
    def keep(*args):
        return choose.choose_keep_freed_memory(*args)[0]

    assert keep("auto", "glibc 2.36", "cpu").value is True
    assert keep("auto", "glibc 2.36", "cuda").value is False
    assert keep("auto", "", "cpu").value is False  # macOS, Windows, musl: nothing to tune
    assert keep("on", "", "cpu").value is False and "not glibc" in keep("on", "", "cpu").reason
    assert keep("on", "glibc 2.31", "cuda").value is True
    assert keep("off", "glibc 2.36", "cpu").value is False


def test_freed_memory_kept_at_the_heap_top_is_bounded_by_the_budgets_slack():
    keep = choose.choose_keep_freed_memory
    assert keep("auto", "glibc 2.36", "cpu", 300 * MiB)[1] == 300 * MiB
    assert keep("auto", "glibc 2.36", "cpu", 10 * GiB)[1] == KEEP_TRIM_THRESHOLD
    assert keep("auto", "glibc 2.36", "cpu", -5)[1] == choose.MIN_TRIM_THRESHOLD
    assert keep("off", "glibc 2.36", "cpu", 300 * MiB)[1] == 0


def test_a_tight_budget_returns_freed_memory_instead_of_keeping_it():
    choice, trim = choose.choose_keep_freed_memory("auto", "glibc 2.36", "cpu", 300 * MiB, tight=True)
    assert choice.value is False and trim == 0 and "go back to the OS" in choice.reason
    assert choose.choose_keep_freed_memory("on", "glibc 2.36", "cpu", tight=True)[0].value is True  # pinned


def test_evaluation_is_planned_for_the_heap_that_kept_freed_memory_fragments(hw, fake_speed, tmp_path):
    maze = ModelConfig(mixer="conv", hidden_size=96, mlp_width=192, puzzle_emb_len=0, vocab_size=6, seq_len=61 * 61,
                       num_puzzle_ids=1, grid_height=61, grid_width=61)
    live = memory_model.estimate_memory(maze, 64, 8, dtype="bfloat16", eval_batch=64)
    kept = memory_model.estimate_memory(maze, 64, 8, dtype="bfloat16", eval_batch=64, kept_memory=True)
    per_slot = memory_model.eval_slot_bytes(maze, 2)
    assert kept.eval_peak - live.eval_peak == 64 * int(per_slot * memory_model.KEPT_EVAL_FRAGMENTATION) - 64 * per_slot
    cfg = sudoku_cfg(96, compile="off", dtype="float32")
    plans = {k: plan.make_plan(config.replace(cfg, "run", keep_freed_memory=k), hw, cache_dir=tmp_path,
                               log=lambda _: None) for k in ("on", "off")}
    assert plans["on"].keep_freed_memory.value and not plans["off"].keep_freed_memory.value
    on, off = plans["on"].estimate, plans["off"].estimate
    assert on.train_peak == off.train_peak and on.eval_peak > off.eval_peak  # only evaluation's heap differs


def test_a_run_that_measured_more_raises_the_next_plans_estimate_and_narrows_the_margin(hw, fake_speed, tmp_path):
    cfg = sudoku_cfg(96, compile="off", dtype="float32")
    first = plan.make_plan(budgeted(cfg, 3 * GiB), hw, cache_dir=tmp_path, log=lambda _: None)
    assert "10% kept" in first.budget.reason
    deficit = 200 * MiB
    assert calibrate.learn_from_peaks(cfg.model, "float32", tmp_path, {"train step": deficit, "eval": 0.0}, "test")
    second = plan.make_plan(budgeted(cfg, 3 * GiB), hw, cache_dir=tmp_path, log=lambda _: None)
    assert "3% kept" in second.budget.reason
    raised = second.estimate.train_peak - first.estimate.train_peak
    assert deficit <= raised - (second.micro_batch.value - first.micro_batch.value) * first.estimate.micro_per_slot \
        <= deficit * 1.05
    # an estimate that was high is not learned downward; the run still counts as measured
    assert calibrate.learn_from_peaks(cfg.model, "float32", tmp_path, {"train step": -5e8}, "test")
    third = plan.make_plan(budgeted(cfg, 3 * GiB), hw, cache_dir=tmp_path, log=lambda _: None)
    assert third.estimate.parts["runtime overhead"] == second.estimate.parts["runtime overhead"]


def test_fused_inference_is_chosen_for_bf16_on_the_cpu_without_compile(monkeypatch):
    fused = choose.choose_fused_inference
    probed = []
    monkeypatch.setattr(choose, "fused_inference_works", lambda dtype: probed.append(dtype) or "")
    assert fused("auto", "cpu", "bfloat16", compiled=False).value is True
    assert "epilogue" in fused("auto", "cpu", "bfloat16", compiled=False).reason
    assert fused("on", "cpu", "bfloat16", compiled=False).value is True
    assert fused("off", "cpu", "bfloat16", compiled=False).value is False
    for where, dtype in (("cuda", "bfloat16"), ("cpu", "float16")):
        off = fused("on", where, dtype, compiled=False)
        assert off.value is False and f"{dtype} on {where}" in off.reason
    assert probed == [torch.bfloat16] * 3
    auto32 = fused("auto", "cpu", "float32", compiled=False)  # no gain measured on AVX2: opt-in
    assert auto32.value is False and "fused_ab" in auto32.reason
    assert fused("on", "cpu", "float32", compiled=False).value is True and probed[-1] == torch.float32
    assert "compile" in fused("auto", "cpu", "bfloat16", compiled=True).reason
    monkeypatch.setattr(choose, "fused_inference_works", lambda dtype: "oneDNN's fused matmul is not available")
    broken = fused("auto", "cpu", "bfloat16", compiled=False)
    assert broken.value is False and "not available" in broken.reason


def _with_cores(hw, cores: int):
    """The probed machine with `cores` usable cores (as CPU affinity would leave), whatever this one has."""
    return dataclasses.replace(hw, cpu=dataclasses.replace(hw.cpu, effective_cores=cores,
                                                           effective_source="CPU affinity"))


@pytest.mark.parametrize("cores", [2, 4])
def test_threads_leave_the_cores_other_processes_keep_busy(hw, cores):
    hw = _with_cores(hw, cores)  # the same on a one-core container (taskset -c 0) as on a laptop
    assert device.choose_threads(0, hw)[0].value == cores
    assert device.choose_threads(0, hw, others_busy=0.3)[0].value == cores  # a blip is not a busy core
    loaded = device.choose_threads(0, hw, others_busy=float(cores))  # every core busy: one thread, not a stall
    assert loaded[0].value == 1 and "busy" in loaded[0].reason
    assert device.choose_threads(3, hw, others_busy=float(cores))[0].value == 3  # the config's word stands


def test_one_usable_core_is_one_thread_busy_or_not(hw):
    alone = device.choose_threads(0, _with_cores(hw, 1), others_busy=1.0)[0]
    assert alone.value == 1 and alone.reason == "one per usable core (1, from CPU affinity)"
