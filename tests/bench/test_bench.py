"""The bench: FLOP counts checked by hand and by torch's counter, a tiny run, the regression check."""

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import trmkit
from tests import SAFETY_TIMEOUT
from trmkit import bench, hardware, procs
from trmkit import config as config_mod
from trmkit.bench import flops, memory, peak, results
from trmkit.hardware.cpu import native_bf16
from trmkit.config import ModelConfig
from trmkit.model.trm import TRM
from trmkit.plan.memory_model import estimate_memory

TINY_YAML = Path(__file__).resolve().parents[2] / "configs" / "bench-tiny.yaml"


def tiny(**kw) -> ModelConfig:
    base = dict(hidden_size=32, num_heads=2, L_layers=1, H_cycles=2, L_cycles=2, puzzle_emb_len=2,
                vocab_size=11, seq_len=9, num_puzzle_ids=3)
    base.update(kw)
    return ModelConfig(**base)


def test_flops_of_a_tiny_mlp_t_config_by_hand():
    # D=32, S=2+9=11, w(11)=w(32)=256 (expansion 4 rounds up to 256), V=11, one layer, T=2, n=2
    mix = 2 * 32 * 11 * 512 + 2 * 32 * 256 * 11  # (B*D, S)x(S, 2w) + (B*D, w)x(w, S) = 540_672
    channel = 2 * 11 * 32 * 512 + 2 * 11 * 256 * 32  # (B*S, D)x(D, 2w) + (B*S, w)x(w, D) = 540_672
    call = mix + channel  # 1_081_344
    heads = 2 * 9 * 32 * 11 + 2 * 32 * 2  # lm_head on the 9 token positions + q head = 6_464
    # 3 no-grad calls forward only, 3 grad calls forward + backward (3x), heads 3x
    assert 3 * call + 9 * call + 3 * heads == 12_995_520
    fc = flops.flops_per_sample(tiny())
    assert (fc.per_call, fc.calls_no_grad, fc.calls_grad, fc.heads) == (1_081_344, 3, 3, 6_464)
    assert fc.total == 12_995_520


def test_flops_of_a_tiny_attention_config_by_hand():
    qkv, scores, values, out = 2 * 11 * 32 * 96, 2 * 11 * 11 * 32, 2 * 11 * 11 * 32, 2 * 11 * 32 * 32
    channel = 540_672
    call = qkv + scores + values + out + channel  # 646_272
    assert flops.flops_per_sample(tiny(mixer="attention")).total == 12 * call + 3 * 6_464 == 7_774_656


def test_paper_sudoku_config_costs_42_7_gflop_per_sample_step():
    fc = flops.flops_per_sample(ModelConfig(vocab_size=11, seq_len=81, num_puzzle_ids=1))
    # per call: 2 layers x (6*512*97*512 + 6*97*512*1536) = 1.2205 GFLOP; 14 + 3*7 = 35 call-equivalents
    assert fc.per_call == 1_220_542_464
    assert fc.total == pytest.approx(42.7e9, rel=0.01)  # 42.72e9 exactly, see bench's docstring


@pytest.mark.parametrize("mixer", ["mlp_t", "attention"])
def test_count_equals_torch_flop_counter_on_a_real_step(mixer):
    """torch's own counter over forward + backward agrees; on CPU it does not count
    scaled_dot_product_attention, so the scores and values part is added back for attention."""
    cfg, B = tiny(mixer=mixer), 3
    torch.manual_seed(0)
    model = TRM(cfg)
    carry = model.initial_carry(B)
    counter = FlopCounterMode(display=False)
    with counter:
        inputs, ids = torch.randint(1, 11, (B, 9)), torch.zeros(B, dtype=torch.long)
        _, _, logits, q = model(carry.z_H, carry.z_L, inputs, ids)
        (logits.sum() + q.sum()).backward()
    S, D = 11, 32
    sdpa = 0 if mixer == "mlp_t" else B * (3 + 3 * 3) * 2 * (2 * S * S * D)
    assert counter.get_total_flops() + sdpa == flops.flops_per_sample(cfg).total * B


def test_model_gemms_hold_all_linear_flops():
    cfg, B = tiny(), 5
    fc = flops.flops_per_sample(cfg)
    gemm_flops = sum(g.flops * g.count for g in flops.model_gemms(cfg, B))
    assert gemm_flops == B * (fc.total - 3 * fc.heads)


# run_bench in a fresh process, as a user runs it: its numbers do not depend on what this pytest
# process holds (a child's ru_maxrss starts at its parent's peak; the probes now read their own VmHWM,
# see the test below).
_FRESH_BENCH = r"""
import json, sys
import torch
from trmkit import bench, config
cfg = config.load(sys.argv[1], ["train.batch_size=16"])
threads = torch.get_num_threads()
r = bench.run_bench(cfg, steps=2, warmup=1, peak_sizes=(256,), peak_seconds=0.1, gemm_seconds=0.02,
                    log=lambda _: None)
print(json.dumps({"result": r, "threads": [threads, torch.get_num_threads()],
                  "round_trip": json.loads(json.dumps(r)) == r}))
"""


def test_run_bench_on_the_tiny_config():
    # batch 16, not the preset's 4: the memory probes then differ by 8 slots (~6 MB), well above the
    # ~0.3 MB run-to-run noise of peak RSS (MB per slot measured 0.47-0.93 at batch 4, 0.61-0.91 at 16)
    done = procs.run([sys.executable, "-c", _FRESH_BENCH, str(TINY_YAML)], capture_output=True, text=True,
                     timeout=SAFETY_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    r = out["result"]
    assert out["threads"][0] == out["threads"][1]  # run.threads=1 applied for the run only
    for key in ("samples_per_s", "s_per_step", "flops_per_step", "achieved_gflops", "peak_gflops", "mfu",
                "mfu_best", "mfu_best_float32", "mfu_best_bfloat16", "peak_rss_mb", "mb_per_slot", "memory",
                "gemm_ceiling", "compile_seconds", "comparable", "bench_format"):
        assert key in r, key
    assert r["samples_per_s"] > 0 and 0 < r["mfu"] < 1.5
    assert r["s_per_step"]["n"] == 2 and r["s_per_step"]["min"] <= r["s_per_step"]["median"]
    model = config_mod.load(TINY_YAML).model
    assert r["flops_per_step"] == 16 * flops.flops_per_sample(model).total
    mem = r["memory"]
    assert mem["batches"] == [8, 16] and r["mb_per_slot"] == mem["mb_per_slot"] > 0
    small, big = mem["peak_rss_mb"]
    assert big - small == pytest.approx(8 * r["mb_per_slot"])  # the 8 extra slots account for the growth
    assert 150 < small < big < 2000  # a Python process with torch: hundreds of MB
    # the planner's model of the same config: 0.70 MiB of activations per slot (the carry adds 0.006);
    # bench measured 0.61-0.91 in 20 runs. Half or double it means one of the two is broken.
    per_slot = estimate_memory(model, 16, 16).micro_per_slot / memory.MB
    assert 0.5 < r["mb_per_slot"] / per_slot < 2.0, (r["mb_per_slot"], per_slot)
    sampled = peak.peak_dtypes(r["comparable"]["dtype"], native_bf16(hardware.probe().cpu.features))
    assert set(r["peak_gflops"]) == set(sampled) and all(r["peak_gflops"][dt] > 0 for dt in sampled)
    assert len(r["peak_samples"]) == 3 and len(r["mfu_steps"]) == 2
    assert r["mfu"] == pytest.approx(sum(r["mfu_steps"]) / 2)  # the median of two steps' own ratios
    # what is not matrix products, shown beside MFU: the rest of the fastest step
    assert 0 <= r["non_gemm_share"] < 1 and r["non_gemm_share"] == pytest.approx(max(0.0, 1 - r["gemm_share"]))
    assert out["round_trip"]
    assert any(line.startswith("speed:") for line in bench.format_lines(r))


# A parent that once held 512 MB, then a child that only imports trmkit.bench (~230 MB) and reports
# memory.peak_rss_bytes(): the value the memory probes return.
_PARENT_THEN_CHILD = r"""
import subprocess, sys
held = bytearray(b"x") * (512 << 20)  # written, so resident
del held
child = "from trmkit.bench.memory import peak_rss_bytes; print(peak_rss_bytes())"
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss across exec: Linux semantics")
def test_a_memory_probe_child_reports_its_own_peak_not_its_parents():
    done = procs.run([sys.executable, "-c", _PARENT_THEN_CHILD], capture_output=True, text=True,
                     timeout=SAFETY_TIMEOUT, check=True)
    reported = int(done.stdout.strip().splitlines()[-1]) / memory.MB
    assert 100 < reported < 450, reported


def test_bench_needs_sizes_or_a_store():
    cfg = config_mod.load(TINY_YAML, ["model.vocab_size=0"])
    with pytest.raises(config_mod.ConfigError, match="data.path"):
        bench.run_bench(cfg, steps=1, warmup=0, memory=False, log=lambda _: None)


def result(mfu: float, mb: float | None = 100.0, batch: int = 32) -> dict:
    return {"bench_format": results.BENCH_FORMAT, "mfu": mfu, "mb_per_slot": mb,
            "comparable": {"model": {"hidden_size": 512}, "batch_size": batch, "dtype": "float32"}}


def test_compare_flags_a_30_percent_mfu_drop_and_passes_5():
    ok, lines = bench.compare(result(0.07), result(0.10))
    assert not ok and "REGRESSION" in lines[0]
    ok, lines = bench.compare(result(0.095), result(0.10))
    assert ok and lines[0].endswith("ok")
    assert bench.compare(result(0.20), result(0.10))[0]  # faster is fine


def test_compare_flags_memory_growth_and_skips_what_is_missing():
    assert not bench.compare(result(0.1, mb=130.0), result(0.1, mb=100.0))[0]
    assert bench.compare(result(0.1, mb=80.0), result(0.1, mb=100.0))[0]
    ok, lines = bench.compare(result(0.1, mb=None), result(0.1))
    assert ok and "skipped" in lines[1]


def test_compare_refuses_different_configs():
    ok, lines = bench.compare(result(0.1, batch=64), result(0.1, batch=32))
    assert not ok and "batch_size" in lines[0]


def test_each_step_is_divided_by_the_peak_around_it():
    peaks = [{"float32": 100.0}, {"float32": 50.0}, {"float32": 50.0}]
    # 10 GFLOP steps: 0.2 s while the peak fell from 100 to 50, 0.4 s at 50
    assert results.paired_mfu(10 * 10**9, [0.2, 0.4], peaks, "float32") == pytest.approx([50 / 75, 0.5])


def test_per_slot_mb_and_spread():
    assert memory.per_slot_mb(1000 * memory.MB, 1640 * memory.MB, 16, 32) == 40.0
    with pytest.raises(ValueError):
        memory.per_slot_mb(1, 2, 4, 4)
    st = results.spread([3.0, 1.0, 2.0, 10.0, 2.0])
    assert (st["median"], st["min"], st["max"], st["q1"], st["q3"]) == (2.0, 1.0, 10.0, 2.0, 3.0)


def test_only_the_cli_imports_the_bench():
    root = Path(trmkit.__file__).resolve().parent
    importers = []
    for path in root.rglob("*.py"):
        if path.parent == root / "bench":
            continue  # the bench's own rooms
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "trmkit.bench" or n.startswith("trmkit.bench.") for n in names):
                importers.append(str(path.relative_to(root)))
    assert set(importers) <= {"cli.py"}


def test_the_bench_samples_only_the_peaks_the_run_can_use():
    assert peak.peak_dtypes("float32", native_bf16=False) == ("float32",)  # no emulated bf16 matmuls
    assert peak.peak_dtypes("float32", native_bf16=True) == ("float32", "bfloat16")
    assert peak.peak_dtypes("bfloat16", native_bf16=False) == ("bfloat16",)  # asked for it: it is the run's
    assert peak.peak_dtypes("float32", native_bf16=False, every=True) == ("float32", "bfloat16")
    assert set(peak.machine_peak((64,), 0.01, ("float32",))) == {"float32"}
