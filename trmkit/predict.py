"""`trmkit predict RUN inputs.jsonl`: a run trained on a pairs store answers new inputs.

Each line {"input": ...} gets one JSON line back, {"line": N, "output": ...}, the output in the
input's form (a grid or a string of its shape). A line that cannot be answered (not JSON, no
"input", another kind or a larger shape than the run's store, a symbol never seen in training)
gets {"line": N, "error": "reason: detail"}, and is reported on stderr as file:line and counted.
An "output" key, when present and of the input's shape, is scored: "correct" per line, and cell
and exact accuracy in the summary.

The run is opened as `trmkit eval` opens it: the resolved config from the run directory, the
store checked against the run (train/session.py `prepare`), the weights through the one loader
(train/evaluate.py `load_weights`), and every example runs all N_sup supervision steps (`think`).
The padding token is never predicted inside the input's shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.data.imports import ImportReport
from trmkit.files import UnsafeTargetError, atomic_open, check_output, check_target
from trmkit.tasks.pairs.codec import Layout, PairError, Value, field, parse_record, read_lines

Log = Callable[[str], None]


def run(args: argparse.Namespace, cache_dir: Path | None = None) -> int:
    from trmkit import hardware

    stderr = lambda m: print(m, file=sys.stderr)  # noqa: E731 (stdout carries only the answers)
    check_paths(args.inputs, args.out, args.run_dir)
    session, layout = open_run(Path(args.run_dir), args.data, hardware.probe(), stderr, cache_dir)
    report = ImportReport(source=str(args.inputs), unit="lines")
    rows = read_inputs(args.inputs, layout, report)
    tokens = answer(session, layout, [r for r in rows if "value" in r])
    lines, scored = zip(*(answer_line(r, layout, tokens.get(r["line"])) for r in rows)) if rows else ((), ())
    if args.out:
        with atomic_open(args.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    else:
        sys.stdout.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    for line in summary(report, [s for s in scored if s is not None]):
        stderr(line)
    return 0


def check_paths(inputs: str, out: str | None, run_dir: str | None = None) -> None:
    """The inputs exist; --out is none of what the command reads (the inputs, the run) nor inside them."""
    if not Path(inputs).is_file():
        raise ConfigError(f"inputs file not found: {inputs}")
    if out is not None:
        try:
            check_target(check_output(out, [inputs, *([run_dir] if run_dir else [])]))
        except UnsafeTargetError as err:
            raise ConfigError(str(err)) from err


def answer_values(session, layout: Layout, values: list) -> list:
    """Answers for in-memory inputs (grids as lists of lists, or strings): the Python API's predict."""
    rows = []
    for i, item in enumerate(values):
        try:
            value = field({"input": item}, "input")
            layout.fits(value)
        except PairError as e:
            raise ConfigError(f"input {i}: {e.reason}: {e.detail}") from None
        rows.append({"line": i, "value": value})
    tokens = answer(session, layout, rows)
    return [layout.decode(tokens[r["line"]], r["value"].shape) for r in rows]


def open_run(run_dir: Path, data: str | None, hw, log: Log, cache_dir: Path | None):
    """(session, layout): the run's model with its final weights, and its store's layout."""
    from trmkit.train import evaluate
    from trmkit.train.session import prepare

    if not rundir.path(run_dir, rundir.CONFIG).is_file():
        raise ConfigError(f"{run_dir}: no {rundir.CONFIG} there; is it a run directory written by `trmkit train`?")
    overrides = [f"run.dir={run_dir}"] + ([f"data.path={data}"] if data else [])
    cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG), overrides)
    session = prepare(cfg, hw, log=log, cache_dir=cache_dir, evaluate_only=True)
    evaluate.load_weights(session, run_dir)
    try:
        layout = Layout.from_meta((session.data.train or session.data.test).meta)
    except ValueError as err:
        raise ConfigError(f"{cfg.data.path}: {err}; `trmkit predict` answers runs trained on pairs stores") from err
    return session, layout


def read_inputs(path: str, layout: Layout, report: ImportReport) -> list[dict[str, Any]]:
    """One row per non-blank line: {"line", "value", "target"} or {"line", "error"}; errors counted."""
    rows: list[dict[str, Any]] = []
    for lineno, where, text in read_lines(path, report):
        try:
            record = parse_record(text)
            value = field(record, "input")
            layout.fits(value)
        except PairError as e:
            report.skip(where, e.reason, e.detail)
            rows.append({"line": lineno, "error": f"{e.reason}: {e.detail}"})
            continue
        report.accepted += 1
        rows.append({"line": lineno, "value": value, "target": _target(record, value)})
    return rows


def _target(record: dict, value: Value) -> Value | None:
    """The line's "output" when it is usable for scoring (same kind and shape), else None."""
    try:
        target = field(record, "output") if "output" in record else None
    except PairError:
        return None
    return target if target is not None and (target.kind, target.shape) == (value.kind, value.shape) else None


@torch.no_grad()
def answer(session, layout: Layout, rows: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """line -> (seq_len,) predicted tokens, in batches of the plan's evaluation batch."""
    from trmkit.train.evaluate import think

    model, ctx = session.model, session.ctx
    model.eval()
    size = max(1, int(session.run.plan.eval_batch.value))
    out: dict[int, np.ndarray] = {}
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        x = torch.from_numpy(np.stack([layout.encode(r["value"]) for r in chunk])).to(ctx.device)
        pids = torch.zeros(len(chunk), dtype=torch.int64, device=ctx.device)
        logits, _, _ = think(model, x, pids, ctx)  # (B, L, V)
        logits = model.answer_logits(logits).float()
        logits[..., 0] = float("-inf")  # the padding token is never an answer
        for r, tokens in zip(chunk, logits.argmax(-1).cpu().numpy()):
            out[r["line"]] = tokens
    return out


def answer_line(row: dict[str, Any], layout: Layout, tokens: np.ndarray | None
                ) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """The JSON line of one input, and (cells right, cells) when it came with an output to score."""
    if "error" in row:
        return {"line": row["line"], "error": row["error"]}, None
    value, target = row["value"], row["target"]
    output = layout.decode(tokens, value.shape)
    if target is None:
        return {"line": row["line"], "output": output}, None
    inside = layout.encode(value) > 0  # the input's cells on the canvas
    right = int(np.sum((layout.encode(target) == tokens.reshape(-1)) & inside))
    return {"line": row["line"], "output": output, "correct": right == len(target.symbols)}, \
        (right, len(target.symbols))


def summary(report: ImportReport, scored: list[tuple[int, int]]) -> list[str]:
    """What was answered and skipped (file:line of the first few), and the score of given outputs."""
    out = [f"predict: {report.accepted} inputs answered, {report.skipped} lines skipped",
           *report.summary_lines()[1:]]
    if scored:
        right, total = sum(r for r, _ in scored), sum(t for _, t in scored)
        exact = sum(r == t for r, t in scored)
        out.append(f"predict: against the {len(scored)} given outputs: cell_accuracy {right / total:.4f}, "
                   f"exact_accuracy {exact / len(scored):.4f}")
    return out
