"""Where metrics go: the Logger protocol and its small implementations, and reading metrics back.

Loggers follow torchtune's ``metric_logging``: a three-method protocol with
small implementations, optional backends imported only when used.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol

from trmkit import rundir


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
    metrics = rundir.path(run_dir, rundir.METRICS)
    board = rundir.path(run_dir, rundir.TENSORBOARD)
    loggers: list[Logger] = [JsonlLogger(metrics)]
    if tensorboard is not False:
        if tensorboard_available():
            loggers.append(TensorBoardLogger(board))
            log(f"logging: {metrics} and TensorBoard in {board}")
            return MultiLogger(loggers)
        why = "requested but not installed" if tensorboard else "not installed"
        log(f"logging: {metrics} (TensorBoard {why}: pip install tensorboard)")
        return MultiLogger(loggers)
    log(f"logging: {metrics}")
    return MultiLogger(loggers)
