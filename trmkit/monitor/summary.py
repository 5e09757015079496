"""The run summary: what a finished run did, what held it back (advice), and its printed form."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from trmkit.monitor.progress import format_duration


@dataclass
class RunFacts:
    """What the training loop knows beyond metrics.jsonl; fill it as the run goes.

    Every field is optional: summarize() uses what is there.
    """

    device: str = "cpu"  # where the steps ran: the CPU advice and RSS-vs-budget apply to "cpu" only
    cores: int | None = None  # cores the run could use (100% CPU each)
    threads: int | None = None  # torch intra-op threads actually set
    peak_rss_gb: float | None = None
    memory_budget_gb: float | None = None  # what the planner allowed the process
    cpu_percent_mean: float | None = None  # else the mean of sys/cpu_percent in the history
    guard_adjustments: list[str] = field(default_factory=list)  # memory guard actions, as printed
    final_metrics: dict[str, float] = field(default_factory=dict)  # else the last value of each key
    train_seconds: float | None = None
    eval_seconds: float | None = None
    wall_seconds: float | None = None  # else the last record's "wall"
    samples_seen: int | None = None  # else the last perf/samples_seen
    freq_ratio: float | None = None  # lowest current/max CPU clock seen (1.0 = full speed)
    max_temperature_c: float | None = None
    throughput_warnings: list[str] = field(default_factory=list)


# Thresholds for advice; one place, with the reason.
CPU_UNDERUSED = 0.5  # mean process CPU below half the cores: threads or batch too small
MEMORY_NEAR_BUDGET = 0.9  # peak RSS above 90% of the budget leaves no room for spikes
FREQ_THROTTLED = 0.8  # clock below 80% of maximum for a sustained read
TEMPERATURE_HOT_C = 90.0  # most laptop CPUs throttle from about 95-100 °C
EVAL_DOMINANT = 0.5  # evaluation above half the (train + eval) time


def _series(history: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    out = []
    for record in history:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(float(value))
    return out


def _last_values(history: Sequence[Mapping[str, Any]], prefixes: tuple[str, ...]) -> dict[str, float]:
    final: dict[str, float] = {}
    for record in history:
        for key, value in record.items():
            if key.startswith(prefixes) and isinstance(value, (int, float)):
                final[key] = value
    return final


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def summarize(history: Sequence[Mapping[str, Any]], facts: RunFacts | None = None) -> dict[str, Any]:
    """A JSON-able summary of a run: timings, throughput, resources, final metrics, advice."""
    facts = facts or RunFacts()
    walls, times = _series(history, "wall"), _series(history, "time")
    rates, cpu = _series(history, "perf/samples_per_second"), _series(history, "sys/cpu_percent")
    seen = _series(history, "perf/samples_seen")
    wall = _first(facts.wall_seconds, walls[-1] if walls else None)
    samples = _first(facts.samples_seen, int(seen[-1]) if seen else None)
    temps, freqs, rss, peaks = (_series(history, k) for k in ("sys/temperature_c", "sys/freq_ratio", "sys/rss_gb",
                                                                "sys/peak_rss_gb"))
    summary: dict[str, Any] = {
        "steps": int(history[-1]["step"]) if history else 0,
        "started_at": times[0] - walls[0] if times and walls else None,
        "finished_at": times[-1] if times else None,
        "wall_seconds": wall,
        "train_seconds": facts.train_seconds,
        "eval_seconds": facts.eval_seconds,
        "samples_seen": samples,
        "samples_per_second": {
            "mean": statistics.fmean(rates) if rates else None,
            "median": statistics.median(rates) if rates else None,
            "overall": samples / wall if samples and wall else None,  # includes eval and pauses
        },
        "device": facts.device,
        "cores": facts.cores,
        "threads": facts.threads,
        "cpu_percent_mean": _first(facts.cpu_percent_mean, statistics.fmean(cpu) if cpu else None),
        "peak_rss_gb": _first(facts.peak_rss_gb, max(peaks) if peaks else None, max(rss) if rss else None),
        "memory_budget_gb": facts.memory_budget_gb,
        "guard_adjustments": list(facts.guard_adjustments),
        "freq_ratio": _first(facts.freq_ratio, min(freqs) if freqs else None),
        "max_temperature_c": _first(facts.max_temperature_c, max(temps) if temps else None),
        "throughput_warnings": list(facts.throughput_warnings),
        "final_metrics": {**_last_values(history, ("train/", "eval/")), **facts.final_metrics},
    }
    summary["advice"] = advise(summary)
    return summary


def advise(summary: Mapping[str, Any]) -> list[str]:
    """Plain-language advice for what held the run back; empty when nothing did."""
    advice = []
    on_cpu = summary.get("device", "cpu") == "cpu"  # on a GPU the CPU mostly waits; RSS is not its memory
    cpu, cores = summary.get("cpu_percent_mean"), summary.get("cores")
    if on_cpu and cpu is not None and cores and cpu < CPU_UNDERUSED * 100 * cores:
        advice.append(
            f"CPU underused: the process averaged {cpu:.0f}% CPU of {100 * cores}% ({cores} cores). "
            f"Use more threads (run.threads) or a larger micro-batch; a very small model can be "
            f"limited by Python overhead, where torch.compile helps."
        )
    peak, budget = summary.get("peak_rss_gb"), summary.get("memory_budget_gb")
    adjustments = summary.get("guard_adjustments") or []
    if adjustments:
        advice.append(
            f"Memory-bound: the memory guard stepped in {len(adjustments)} time(s) "
            f"({'; '.join(adjustments[:3])}). Close other programs or set a smaller train.micro_batch "
            f"up front so the run does not shrink mid-way."
        )
    elif on_cpu and peak is not None and budget and peak > MEMORY_NEAR_BUDGET * budget:
        advice.append(
            f"Memory-bound: peak RSS {peak:.2f} GB is {100 * peak / budget:.0f}% of the "
            f"{budget:.2f} GB budget, leaving little headroom."
        )
    freq, temp = summary.get("freq_ratio"), summary.get("max_temperature_c")
    if (freq is not None and freq < FREQ_THROTTLED) or (temp is not None and temp >= TEMPERATURE_HOT_C):
        seen = []
        if freq is not None:
            seen.append(f"clock at {100 * freq:.0f}% of maximum")
        if temp is not None:
            seen.append(f"up to {temp:.0f}°C")
        advice.append(
            f"Throttled ({', '.join(seen)}): plug the laptop in, leave it on a hard surface, "
            f"or use fewer threads for a cooler, steadier clock."
        )
    train_s, eval_s = summary.get("train_seconds"), summary.get("eval_seconds")
    if train_s is not None and eval_s and eval_s > EVAL_DOMINANT * (train_s + eval_s):
        advice.append(
            f"Evaluation took most of the time ({eval_s:.0f} s eval vs {train_s:.0f} s training): "
            f"evaluate less often (train.eval_every) or on fewer examples (data.eval_limit)."
        )
    return advice


def _headline(key: str) -> bool:
    """A metric and its first breakdown (eval/solve_rate/deduction), not its standard errors (".../se"),
    counts (eval/samples/...) or finer slices: those stay in summary.json."""
    return not key.endswith("/se") and not key.startswith("eval/samples/") and key.count("/") <= 2


def _fmt(value: Any, spec: str = ".4g", unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}{unit}"


def format_summary(summary: Mapping[str, Any], final_line: bool = True) -> str:
    """The summary as a few human-readable lines, advice last; final_line=False leaves the metrics'
    `final:` line to the caller (training prints its own, with the summary's path)."""
    rates = summary.get("samples_per_second_stats") or summary.get("samples_per_second") or {}
    rates = rates if isinstance(rates, Mapping) else {"overall": rates}
    lines = [
        f"steps {summary.get('steps', 0)} in {format_duration(summary.get('wall_seconds'))} "
        f"(training {format_duration(summary.get('train_seconds'))}, "
        f"evaluation {format_duration(summary.get('eval_seconds'))})",
        f"samples {_fmt(summary.get('samples_seen'), ',')} | samples/s mean {_fmt(rates.get('mean'), '.1f')}"
        f", median {_fmt(rates.get('median'), '.1f')}, overall {_fmt(rates.get('overall'), '.1f')}",
        f"CPU mean {_fmt(summary.get('cpu_percent_mean'), '.0f', '%')} of "
        f"{_fmt((summary.get('cores') or 0) * 100 or None, 'd', '%')} | peak RSS "
        f"{_fmt(summary.get('peak_rss_gb'), '.2f', ' GB')} "
        f"(budget {_fmt(summary.get('memory_budget_gb'), '.2f', ' GB')})",
    ]
    memory = summary.get("memory") or {}
    phases = {k: v for k, v in (memory.get("phases") or {}).items() if k != "process"}
    if phases:
        lines.append("peak RSS per phase (GiB): " + ", ".join(f"{k} {v['peak_gb']:.2f}" for k, v in phases.items()))
    for name, check in (memory.get("estimate_check") or {}).items():
        start = check.get("resident_at_start_gb") or 0
        kept = f"; {start:.2f} GiB was already resident when it began" if start >= check["estimate_gb"] else ""
        lines.append(f"plan estimate of {name}: {check['estimate_gb']:.2f} GiB, measured {check['peak_gb']:.2f} GiB "
                     f"({check['error']:+.0%}{kept})")
    final = summary.get("final_metrics") or {}
    evals = {k: v for k, v in final.items() if k.startswith("eval/")} or final
    shown = {k: v for k, v in evals.items() if _headline(k)}
    if shown and final_line:
        more = f" ({len(evals) - len(shown)} more in summary.json)" if len(shown) < len(evals) else ""
        lines.append("final: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items())) + more)
    lines += [f"warning: {w}" for w in summary.get("throughput_warnings") or []]
    lines += [f"advice: {a}" for a in summary.get("advice") or []]
    return "\n".join(lines)
