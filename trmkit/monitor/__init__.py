"""Watching a run: metric loggers, the progress line, throughput drops, the run summary.

Metric names follow one convention everywhere: ``train/...`` (training batch),
``eval/...`` (held-out set), ``perf/...`` (speed) and ``sys/...`` (machine).
The keys read here are:

    train/loss, train/accuracy, train/exact_accuracy, eval/*,
    perf/samples_per_second, perf/samples_seen (cumulative),
    sys/rss_gb, sys/peak_rss_gb (the kernel's high-water mark of this process),
    sys/available_gb, sys/cpu_percent (this process, 100 = one core),
    sys/temperature_c, sys/freq_ratio (current / maximum CPU clock)

loggers.py   the Logger protocol, JSONL / TensorBoard / Multi loggers, reading metrics.jsonl back
progress.py  the system sampler, the progress line (format_status), throughput-drop warnings
summary.py   RunFacts, the run summary, advice, and its printed form

Besides the standard library and psutil it imports only trmkit.rundir (the run
directory's file names); tensorboard is imported inside ``TensorBoardLogger``.
"""

from trmkit.monitor.loggers import (JsonlLogger, Logger, MultiLogger, TensorBoardLogger, make_loggers, read_jsonl,
                                    read_metrics, tensorboard_available)
from trmkit.monitor.progress import Progress, SystemSampler, ThroughputWatch, format_duration, format_status
from trmkit.monitor.summary import RunFacts, advise, format_summary, summarize

__all__ = [
    "JsonlLogger", "Logger", "MultiLogger", "Progress", "RunFacts", "SystemSampler", "TensorBoardLogger",
    "ThroughputWatch", "advise", "format_duration", "format_status", "format_summary", "make_loggers",
    "read_jsonl", "read_metrics", "summarize", "tensorboard_available",
]
