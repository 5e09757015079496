"""Loggers, the progress line, throughput drops and the run summary."""

from __future__ import annotations

import json
import re

import pytest

from trmkit.monitor import loggers as monitor_loggers
from trmkit.monitor import (
    JsonlLogger, MultiLogger, Progress, RunFacts, SystemSampler, ThroughputWatch,
    format_duration, format_status, format_summary, make_loggers, read_metrics, summarize,
)


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_jsonl_round_trip_and_append_on_resume(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    clock = FakeClock(1000.0)
    logger = JsonlLogger(path, clock=clock)
    logger.log_config({"model": {"hidden_size": 64}})
    clock.t = 1002.5
    logger.log(1, {"train/loss": 2.5, "train/accuracy": 0.25})
    clock.t = 1005.0
    logger.log(2, {"train/loss": 2.0})
    logger.close()
    # Resumed an hour later: the file continues and wall does not count the gap.
    clock.t = 4600.0
    resumed = JsonlLogger(path, clock=clock)
    clock.t = 4601.0
    resumed.log(3, {"train/loss": 1.5})
    resumed.close()

    records = read_metrics(path)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[0] == {"step": 1, "time": 1002.5, "wall": 2.5, "train/loss": 2.5, "train/accuracy": 0.25}
    assert records[2]["wall"] == pytest.approx(6.0)
    assert records[2]["time"] == 4601.0
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["config"]["model"]["hidden_size"] == 64


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "wall": 1.0}\n{"step": 2, "wa')
    assert [r["step"] for r in read_metrics(path)] == [1]


def test_make_loggers_without_tensorboard_says_so_once(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor_loggers, "tensorboard_available", lambda: False)
    said = []
    loggers = make_loggers(tmp_path, tensorboard=True, log=said.append)
    loggers.log(1, {"train/loss": 1.0})
    loggers.close()
    assert len(said) == 1 and "TensorBoard requested but not installed" in said[0]
    assert len(loggers.loggers) == 1
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["train/loss"] == 1.0


def test_multilogger_fans_out(tmp_path):
    a, b = JsonlLogger(tmp_path / "a.jsonl"), JsonlLogger(tmp_path / "b.jsonl")
    multi = MultiLogger([a, b])
    multi.log(7, {"eval/exact_accuracy": 0.5})
    multi.close()
    assert read_metrics(tmp_path / "a.jsonl")[0]["step"] == read_metrics(tmp_path / "b.jsonl")[0]["step"] == 7


def test_format_duration():
    assert [format_duration(s) for s in (45, 552, 3720, None, float("inf"))] == \
        ["45s", "9m12s", "1h02m", "--", "--"]


def test_format_status_has_the_fields_and_eta():
    metrics = {
        "train/loss": 0.8123, "train/accuracy": 0.713, "perf/samples_per_second": 412.4,
        "sys/rss_gb": 1.93, "sys/available_gb": 5.2, "sys/cpu_percent": 760.0, "sys/temperature_c": 71.0,
    }
    line = format_status(1200, 5000, metrics, eta_seconds=552, cores=8)
    for part in ("step 1200/5000 (24%)", "loss 0.8123", "acc 71.3%", "412 samples/s",
                 "ETA 9m12s", "RSS 1.93 GB, 5.2 GB free", "CPU 760/800%", "71°C"):
        assert part in line
    assert "\n" not in line
    assert format_status(3, 10, {}, eta_seconds=None) == "step 3/10 (30%) | ETA --"
    assert len(format_status(1200, 5000, metrics, 552, 8, width=40)) == 39


def test_progress_eta_from_measured_rate():
    clock, lines = FakeClock(0.0), []
    progress = Progress(1000, is_tty=False, every_seconds=10, log=lines.append, clock=clock, smoothing=1.0)
    progress.update(0, {})
    clock.t = 10.0
    progress.update(100, {"train/loss": 1.0})  # 10 steps/s -> 900 steps left = 90 s
    assert "ETA 1m30s" in lines[-1]


def test_progress_eta_ends_with_the_time_budget_when_it_comes_first():
    clock, lines = FakeClock(0.0), []
    progress = Progress(100_000, is_tty=False, every_seconds=10, log=lines.append, clock=clock, smoothing=1.0,
                        time_limit_s=240)
    progress.update(0, {})
    clock.t = 60.0
    progress.update(100, {"train/loss": 1.0})  # 99,900 steps at 1.7/s would be 16 h; the budget ends in 3 min
    assert "ETA 3m00s" in lines[-1]


def test_progress_non_tty_prints_at_most_once_per_interval():
    clock, lines = FakeClock(0.0), []
    progress = Progress(10_000, is_tty=False, every_seconds=10, log=lines.append, clock=clock)
    shown_at = []
    for step in range(1, 401):  # 40 s of steps, 0.1 s each
        clock.t = step * 0.1
        before = len(lines)
        progress.update(step, {"train/loss": 1.0 / step})
        if len(lines) > before:
            shown_at.append(clock.t)
    gaps = [b - a for a, b in zip(shown_at, shown_at[1:])]
    assert len(shown_at) == 4 and min(gaps) >= 10 - 1e-9
    assert all("\r" not in line for line in lines)
    progress.close()  # shows the held-back last step
    assert lines[-1].startswith("step 400/10000")


def test_progress_tty_rewrites_one_line():
    clock, calls = FakeClock(0.0), []
    progress = Progress(100, is_tty=True, log=lambda *a, **k: calls.append((a, k)), clock=clock)
    progress.update(1, {"train/loss": 3.0, "train/accuracy": 0.1})
    clock.t = 1.0
    progress.update(2, {"train/loss": 2.0})
    progress.close()
    (first, k1), (second, k2), (end, _) = calls
    assert first[0].startswith("\rstep 1/100") and k1["end"] == "" and k2["end"] == ""
    assert len(second[0]) >= len(first[0])  # padded over the longer earlier line
    assert end == ("",)


def test_system_sampler_reads_this_process():
    sample = SystemSampler().sample()
    assert 0.001 < sample["sys/rss_gb"] < 1024 and sample["sys/available_gb"] > 0
    assert sample["sys/cpu_percent"] >= 0


def test_throughput_watch_warns_once_on_a_real_drop():
    watch = ThroughputWatch()
    noisy = [50.0] + [400 * (1 + 0.15 * ((-1) ** i)) for i in range(20)]  # warm-up, then +-15%
    assert [watch.check(v) for v in noisy] == [None] * len(noisy)
    warning = watch.check(150.0, step=900)
    assert warning is not None and "150 samples/s" in warning and "step 900" in warning
    assert "median 400" in warning and "38%" in warning
    assert watch.check(140.0) is None  # same drop: no second warning
    assert watch.check(410.0) is None  # recovered
    assert watch.check(100.0) is not None  # a new drop warns again


def _history(cpu: float, n: int = 20) -> list[dict]:
    return [
        {"step": 10 * i, "time": 1000.0 + 5 * i, "wall": 5.0 * i, "train/loss": 2.0 / i,
         "perf/samples_per_second": float(s), "perf/samples_seen": 100 * i, "sys/cpu_percent": cpu}
        for i, s in zip(range(1, n + 1), [100, 200, 300, 400] * (n // 4))
    ]


def test_summarize_low_cpu_gives_advice():
    summary = summarize(_history(cpu=150.0), RunFacts(cores=8, train_seconds=90, eval_seconds=10))
    assert summary["samples_per_second"]["mean"] == pytest.approx(250.0)
    assert summary["samples_per_second"]["median"] == pytest.approx(250.0)
    assert summary["wall_seconds"] == 100.0 and summary["samples_seen"] == 2000
    assert summary["samples_per_second"]["overall"] == pytest.approx(20.0)
    assert summary["started_at"] == pytest.approx(1000.0)
    assert summary["final_metrics"] == {"train/loss": pytest.approx(0.1)}
    assert len(summary["advice"]) == 1 and "CPU underused" in summary["advice"][0]
    assert "150% CPU of 800%" in summary["advice"][0]
    json.dumps(summary)  # JSON-able
    assert "advice: CPU underused" in format_summary(summary)


def test_a_gpu_run_gets_no_cpu_or_host_memory_advice():
    # seen on an H200: one busy core of 16 and 1.4 GB of host RSS said nothing about the GPU run
    facts = RunFacts(device="cuda", cores=16, train_seconds=90, eval_seconds=10, peak_rss_gb=1.4,
                     memory_budget_gb=1.5)
    summary = summarize(_history(cpu=100.0), facts)
    assert summary["device"] == "cuda" and summary["advice"] == []
    cpu_run = summarize(_history(cpu=100.0), RunFacts(cores=16, peak_rss_gb=1.4, memory_budget_gb=1.5))
    assert len(cpu_run["advice"]) == 2  # the same numbers on the CPU: underused, and near the budget


def test_summarize_good_run_has_no_advice():
    facts = RunFacts(cores=8, train_seconds=90, eval_seconds=10, peak_rss_gb=2.0,
                     memory_budget_gb=6.0, freq_ratio=0.97, max_temperature_c=75)
    summary = summarize(_history(cpu=720.0), facts)
    assert summary["advice"] == []
    assert "advice" not in format_summary(summary)


def test_summarize_memory_throttle_and_eval_advice():
    facts = RunFacts(cores=4, cpu_percent_mean=390, train_seconds=40, eval_seconds=60,
                     guard_adjustments=["micro_batch 64 -> 32 (RSS 5.8 of 6.0 GB)"], freq_ratio=0.6)
    advice = summarize(_history(cpu=390.0), facts)["advice"]
    assert [a.split(" ")[0] for a in advice] == ["Memory-bound:", "Throttled", "Evaluation"]
    assert "micro_batch 64 -> 32" in advice[0] and "60%" in advice[1]
    near = summarize([], RunFacts(peak_rss_gb=5.7, memory_budget_gb=6.0))["advice"]
    assert len(near) == 1 and re.search(r"95% of the 6.00 GB budget", near[0])


def test_the_final_line_shows_metrics_and_their_first_breakdown_only():
    final = {"eval/solve_rate": 0.5, "eval/solve_rate/se": 0.01, "eval/solve_rate/deduction": 0.25,
             "eval/solve_rate/deduction/depth2": 0.125, "eval/samples": 30, "eval/samples/deduction": 10}
    line = next(x for x in format_summary({"final_metrics": final}).splitlines() if x.startswith("final:"))
    assert line == ("final: eval/samples 30, eval/solve_rate 0.5, eval/solve_rate/deduction 0.25 "
                    "(3 more in summary.json)")
