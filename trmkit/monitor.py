"""Watching a run: metric loggers, the progress line, throughput drops, the run summary.

Metric names follow one convention everywhere: ``train/...`` (training batch),
``eval/...`` (held-out set), ``perf/...`` (speed) and ``sys/...`` (machine).
The keys read here are:

    train/loss, train/accuracy, train/exact_accuracy, eval/*,
    perf/samples_per_second, perf/samples_seen (cumulative),
    sys/rss_gb, sys/peak_rss_gb (the kernel's high-water mark of this process),
    sys/available_gb, sys/cpu_percent (this process, 100 = one core),
    sys/temperature_c, sys/freq_ratio (current / maximum CPU clock)

Loggers follow torchtune's ``metric_logging``: a three-method protocol with
small implementations, optional backends imported only when used.

This module imports only the standard library and psutil; tensorboard is
imported inside ``TensorBoardLogger``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import psutil

GB = 1024**3  # sizes are reported in GiB, printed as "GB" like most system monitors


# --------------------------------------------------------------------------- loggers


class Logger(Protocol):
    """Where metrics go. Every backend implements these three methods."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record the metrics of one optimizer step."""

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Record the resolved run config once, at the start (and on resume)."""

    def close(self) -> None:
        """Flush and release files; the logger is not used afterwards."""


def _json_value(value: Any) -> Any:
    """Plain floats/ints for JSON (numpy and torch scalars have .item())."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if hasattr(value, "item"):
        return value.item()
    return float(value)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSONL file; a torn last line (a crash mid-write) is skipped."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # only the last line can be torn; earlier ones are flushed whole
    return records


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The metric records of a metrics.jsonl (those with a "step"), in file order."""
    return [r for r in read_jsonl(path) if "step" in r]


class JsonlLogger:
    """One JSON object per line: {"step", "time" (unix), "wall" (s), **metrics}.

    The file is opened in append mode, so a resumed run continues it. "wall"
    counts seconds of running: on resume it continues from the last record's
    wall instead of restarting at 0, so time spent stopped is not counted
    (the unix "time" still shows the gap).
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._wall_offset = self._last_wall()
        self._start = clock()
        self._file = open(self.path, "a", encoding="utf-8")

    def _last_wall(self) -> float:
        if not self.path.is_file():
            return 0.0
        walls = [r["wall"] for r in read_metrics(self.path) if "wall" in r]
        return float(walls[-1]) if walls else 0.0

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        now = self._clock()
        record = {"step": int(step), "time": round(now, 3),
                  "wall": round(self._wall_offset + now - self._start, 3)}
        record.update({k: _json_value(v) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()  # a crash loses at most the line being written

    def log_config(self, config: Mapping[str, Any]) -> None:
        """A {"config": ...} line (no "step"; read_metrics skips it). Marks each (re)start."""
        record = {"time": round(self._clock(), 3), "config": config}
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def tensorboard_available() -> bool:
    """True when torch.utils.tensorboard can work (the tensorboard package is installed)."""
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardLogger:
    """Scalars to a TensorBoard event directory (needs `pip install tensorboard`)."""

    def __init__(self, log_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # optional backend: imported only here

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, _json_value(value), global_step=step)
        self._writer.flush()

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = json.dumps(config, indent=2, default=str)
        self._writer.add_text("config", "```\n" + text + "\n```")

    def close(self) -> None:
        self._writer.close()


class MultiLogger:
    """Sends every call to each of its loggers."""

    def __init__(self, loggers: Iterable[Logger]) -> None:
        self.loggers = list(loggers)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for logger in self.loggers:
            logger.log(step, metrics)

    def log_config(self, config: Mapping[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_config(config)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def make_loggers(
    run_dir: str | Path, tensorboard: bool | None = None, log: Callable[..., None] = print
) -> MultiLogger:
    """RUN_DIR/metrics.jsonl always; RUN_DIR/tensorboard/ when wanted and installed.

    tensorboard=None means "if installed", True means "wanted" (a missing
    package is reported, not fatal), False means off. Says once what it chose.
    """
    run_dir = Path(run_dir)
    loggers: list[Logger] = [JsonlLogger(run_dir / "metrics.jsonl")]
    if tensorboard is not False:
        if tensorboard_available():
            loggers.append(TensorBoardLogger(run_dir / "tensorboard"))
            log(f"logging: {run_dir / 'metrics.jsonl'} and TensorBoard in {run_dir / 'tensorboard'}")
            return MultiLogger(loggers)
        why = "requested but not installed" if tensorboard else "not installed"
        log(f"logging: {run_dir / 'metrics.jsonl'} (TensorBoard {why}: pip install tensorboard)")
        return MultiLogger(loggers)
    log(f"logging: {run_dir / 'metrics.jsonl'}")
    return MultiLogger(loggers)


# --------------------------------------------------------------------------- system sampling


class SystemSampler:
    """RSS, available RAM and CPU % of one process, read with psutil.

    CPU % is over the interval since the previous sample (100 = one core busy).
    `peak_bytes`, when given, reports the process's peak RSS as the kernel
    keeps it (trmkit.memory.PeakMeter.process_peak): samples taken here, at
    step boundaries, would miss the peaks inside steps, evaluation and saving.
    """

    def __init__(self, pid: int | None = None, peak_bytes: Callable[[], int] | None = None) -> None:
        self._proc = psutil.Process(pid)
        self._proc.cpu_percent(None)  # the first call only starts the interval
        self._peak_bytes = peak_bytes

    def sample(self) -> dict[str, float]:
        out = {
            "sys/rss_gb": self._proc.memory_info().rss / GB,
            "sys/available_gb": psutil.virtual_memory().available / GB,
            "sys/cpu_percent": self._proc.cpu_percent(None),
        }
        if self._peak_bytes is not None:
            out["sys/peak_rss_gb"] = self._peak_bytes() / GB
        return out


# --------------------------------------------------------------------------- progress line


def format_duration(seconds: float | None) -> str:
    """45 -> '45s', 552 -> '9m12s', 3720 -> '1h02m'; None or inf -> '--'."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def format_status(
    step: int,
    total_steps: int,
    metrics: Mapping[str, float],
    eta_seconds: float | None = None,
    cores: int | None = None,
    width: int | None = None,
) -> str:
    """One status line from the metric names above; absent fields are left out.

    >>> format_status(50, 200, {"train/loss": 0.5}, eta_seconds=90)
    'step 50/200 (25%) | loss 0.5000 | ETA 1m30s'
    """
    done = step / total_steps if total_steps > 0 else 0.0
    parts = [f"step {step}/{total_steps} ({100 * done:.0f}%)"]
    if "train/loss" in metrics:
        parts.append(f"loss {metrics['train/loss']:.4f}")
    acc = [_pct(metrics[k]) for k in ("train/accuracy",) if k in metrics]
    if "train/exact_accuracy" in metrics:
        acc.append(f"exact {_pct(metrics['train/exact_accuracy'])}")
    if acc:
        parts.append("acc " + " ".join(acc))
    if "perf/samples_per_second" in metrics:
        parts.append(f"{metrics['perf/samples_per_second']:.0f} samples/s")
    parts.append(f"ETA {format_duration(eta_seconds)}")
    if "sys/rss_gb" in metrics:
        ram = f"RSS {metrics['sys/rss_gb']:.2f} GB"
        if "sys/peak_rss_gb" in metrics:
            ram += f" (peak {metrics['sys/peak_rss_gb']:.2f})"
        if "sys/available_gb" in metrics:
            ram += f", {metrics['sys/available_gb']:.1f} GB free"
        parts.append(ram)
    if "sys/cpu_percent" in metrics:
        of = f"/{100 * cores}%" if cores else "%"
        parts.append(f"CPU {metrics['sys/cpu_percent']:.0f}{of}")
    if "sys/temperature_c" in metrics:
        parts.append(f"{metrics['sys/temperature_c']:.0f}°C")
    line = " | ".join(parts)
    return line[: width - 1] if width and len(line) >= width else line


class Progress:
    """A live status line on a terminal, periodic plain lines otherwise.

    On a terminal the line is rewritten in place with "\\r" at most every
    `redraw_seconds` (log must accept print's `end` and `flush` keywords);
    elsewhere (files, CI) one line every `every_seconds`. The ETA comes from a
    smoothed rate of steps per wall-clock second measured here, so it includes
    evaluation and checkpoint time (samples/s shown is the loop's own, smoothed).
    """

    def __init__(
        self,
        total_steps: int,
        is_tty: bool,
        every_seconds: float = 10.0,
        log: Callable[..., None] = print,
        clock: Callable[[], float] = time.monotonic,
        sampler: SystemSampler | None = None,
        cores: int | None = None,
        width: int | None = None,
        redraw_seconds: float = 0.5,
        smoothing: float = 0.3,
    ) -> None:
        self.total_steps = total_steps
        self.is_tty = is_tty
        self.every_seconds = every_seconds if not is_tty else redraw_seconds
        self._log, self._clock = log, clock
        self._sampler = sampler
        self._cores, self._width, self._alpha = cores, width, smoothing
        self._last: tuple[int, float] | None = None  # (step, time) of the last shown line
        self._steps_per_s: float | None = None
        self._samples_per_s: float | None = None
        self._shown_len = 0
        self._pending: tuple[int, dict[str, float]] | None = None

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self._alpha) * old + self._alpha * new

    def eta_seconds(self, step: int) -> float | None:
        """Remaining steps / smoothed steps per second; None before a rate is known."""
        if not self._steps_per_s:
            return None
        return max(self.total_steps - step, 0) / self._steps_per_s

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        """Call every step (cheap); a line is shown only when the interval has passed."""
        now = self._clock()
        self._pending = (step, dict(metrics))
        if self._last is not None and now - self._last[1] < self.every_seconds:
            return
        self._show(step, dict(metrics), now)

    def _show(self, step: int, metrics: dict[str, float], now: float) -> None:
        if self._last is not None and now > self._last[1] and step > self._last[0]:
            self._steps_per_s = self._smooth(self._steps_per_s, (step - self._last[0]) / (now - self._last[1]))
        if "perf/samples_per_second" in metrics:
            self._samples_per_s = self._smooth(self._samples_per_s, metrics["perf/samples_per_second"])
            metrics["perf/samples_per_second"] = self._samples_per_s
        if self._sampler is not None:
            metrics = {**self._sampler.sample(), **metrics}
        line = format_status(step, self.total_steps, metrics, self.eta_seconds(step), self._cores, self._width)
        if self.is_tty:
            self._log("\r" + line.ljust(self._shown_len), end="", flush=True)
            self._shown_len = len(line)
        else:
            self._log(line)
        self._last = (step, now)
        self._pending = None

    def close(self) -> None:
        """Show the latest state if it was held back, and end the live line."""
        if self._pending is not None:
            self._show(*self._pending, self._clock())
        if self.is_tty and self._shown_len:
            self._log("", flush=True)  # newline: later output starts on its own line
            self._shown_len = 0


# --------------------------------------------------------------------------- throughput drops


class ThroughputWatch:
    """Warns once when samples/s falls well below its own earlier median.

    The baseline is the median of the last `window` healthy readings (the
    first `warmup` readings are ignored: they include start-up and compile).
    Readings taken during a drop do not enter the baseline; the watch re-arms
    once throughput is back above `recover_ratio` of it.
    """

    def __init__(
        self, drop_ratio: float = 0.6, recover_ratio: float = 0.8,
        min_history: int = 5, window: int = 50, warmup: int = 1,
    ) -> None:
        self.drop_ratio, self.recover_ratio = drop_ratio, recover_ratio
        self.min_history, self.warmup = min_history, warmup
        self.history: deque[float] = deque(maxlen=window)
        self.all_readings: list[float] = []
        self._seen = 0
        self._in_drop = False

    def check(self, current: float, step: int | None = None) -> str | None:
        """Record one samples/s reading; a warning string on the first reading of a drop."""
        self._seen += 1
        self.all_readings.append(current)
        if self._seen <= self.warmup:
            return None
        if len(self.history) < self.min_history:
            self.history.append(current)
            return None
        median = statistics.median(self.history)
        if self._in_drop:
            if current >= self.recover_ratio * median:
                self._in_drop = False
                self.history.append(current)
            return None
        if current < self.drop_ratio * median:
            self._in_drop = True
            at = f" at step {step}" if step is not None else ""
            return (
                f"throughput fell to {current:.0f} samples/s{at}, {100 * current / median:.0f}% of "
                f"its earlier median {median:.0f} samples/s: the CPU may be throttling (heat, "
                f"battery saver), another program may be busy, or memory may be swapping"
            )
        self.history.append(current)
        return None


# --------------------------------------------------------------------------- run summary


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


def _fmt(value: Any, spec: str = ".4g", unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}{unit}"


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as a few human-readable lines, advice last."""
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
        f"{_fmt(summary.get('peak_rss_gb'), '.2f', ' GB')} (budget {_fmt(summary.get('memory_budget_gb'), '.2f', ' GB')})",
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
    shown = {k: v for k, v in final.items() if k.startswith("eval/")} or final
    if shown:
        lines.append("final: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items())))
    lines += [f"warning: {w}" for w in summary.get("throughput_warnings") or []]
    lines += [f"advice: {a}" for a in summary.get("advice") or []]
    return "\n".join(lines)

