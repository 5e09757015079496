"""`trmkit predict RUN INPUTS [--out FILE] [--steps K|auto[:CAP]] [--force]` and `Run.predict(values)`.

The inputs file is checked before the model loads: a folder, a compressed or binary file is refused
with what to do. Each input that cannot be answered is reported as file:line with its reason and
counted, and gets its own output line saying so (never a silent skip); a file none of whose inputs can
be answered is refused (it is not the task's input form). `--out` is written atomically, never over
what the command reads (the inputs, the run) and never over an existing file that is not answers
written by `trmkit predict`, unless `--force`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from trmkit.config import ConfigError
from trmkit.data.imports import ImportReport
from trmkit.files import UnsafeTargetError, atomic_open, check_output, check_overwrite
from trmkit.predict.engine import Predictor, parse_steps
from trmkit.predict.forms import Item, form_for, looks_like_answers

Log = Callable[[str], None]
MAGIC = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"BZh", "bzip2", "bunzip2 -k"), (b"\xfd7zXZ\x00", "xz", "unxz -k"),
         (b"PK\x03\x04", "zip", "unzip"), (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))
HEAD = 65536  # bytes read to recognise a file


def run(args: argparse.Namespace, cache_dir: Path | None = None) -> int:
    from trmkit import hardware

    stderr = lambda m: print(m, file=sys.stderr)  # noqa: E731 (stdout carries only the answers)
    inputs = check_inputs(args.inputs)
    check_out(args.out, args.inputs, args.run_dir, getattr(args, "force", False))
    parse_steps(args.steps, "", 1)  # a bad --steps is refused before the model loads
    predictor = Predictor.open(Path(args.run_dir), args.data, hardware.probe(), stderr, cache_dir,
                               getattr(args, "verbose", False))
    form = form_for(predictor.task, predictor.meta)
    report = ImportReport(source=str(args.inputs), unit=form.unit)
    items = form.read(inputs, report)
    check_shapes(predictor, items, inputs.name, report)
    refuse_unanswerable(inputs, form, report)
    steps = parse_steps(args.steps, predictor.task, predictor.n_sup)
    stderr(steps.describe())
    answerable = [i for i in items if i.error is None]
    answers, used = predictor.answer([i.x for i in answerable], steps)
    by_line = {id(i): a for i, a in zip(answerable, answers)}
    text = "".join(form.text(i, by_line.get(id(i))) for i in items)
    if args.out:
        with atomic_open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    for line in summary(report, used, steps.fixed is None) + form.summary(answerable, answers):
        stderr(line)
    return 0


def answer_values(predictor: Predictor, values: list, steps: str | int | None = None, details: bool = False,
                  log: Log = print) -> list:
    """Answers for in-memory inputs, each in its own form (the Python API's predict); with `details`, one
    dict each as a JSON output line holds it ("output", "valid" or "correct", ...) and "steps" taken."""
    form = form_for(predictor.task, predictor.meta)
    items = [form.parse(v, i) for i, v in enumerate(values)]
    for item in items:
        why = predictor.refuses(item.x.shape) if item.x.ndim == 2 else None
        if why:
            raise ConfigError(f"input {item.line}: bad_size: {why}")
    plan = parse_steps(steps, predictor.task, predictor.n_sup)
    log(plan.describe())
    answers, used = predictor.answer([i.x for i in items], plan)
    if details:
        return [{**form.details(i, a), "steps": k} for i, a, k in zip(items, answers, used)]
    return [form.value(i, a) for i, a in zip(items, answers)]


def check_inputs(inputs: str) -> Path:
    """The inputs file, if it is a readable text file; else a ConfigError saying what it is instead."""
    path = Path(inputs)
    if path.is_dir():
        raise ConfigError(f"{inputs} is a directory: give a file of inputs (`trmkit predict --help` says the "
                          "forms: 81-character Sudoku lines, text mazes, or JSONL)")
    if not path.exists():
        raise ConfigError(f"inputs file not found: {inputs}")
    if not path.is_file():
        raise ConfigError(f"{inputs} is not a regular file: give a file of inputs")
    with open(path, "rb") as f:
        head = f.read(HEAD)
    for magic, kind, undo in MAGIC:
        if head.startswith(magic):
            raise ConfigError(f"{inputs} is {kind}-compressed, not a text file of inputs: decompress it first "
                              f"(`{undo} {inputs}`)")
    if b"\x00" in head:
        raise ConfigError(f"{inputs} is a binary file (it holds NUL bytes), not a text file of inputs: "
                          "`trmkit predict` reads Sudoku lines, text mazes or JSONL")
    return path


def check_out(out: str | None, inputs: str, run_dir: str | None, force: bool) -> None:
    """--out is none of what the command reads (the inputs, the run) nor inside them, and replaces only
    answers `trmkit predict` wrote unless --force."""
    if out is None:
        return
    try:
        check_output(out, [inputs, *([run_dir] if run_dir else [])])
        check_overwrite(out, force, own=is_answers_file, what="answers")
    except UnsafeTargetError as err:
        raise ConfigError(str(err)) from err


def is_answers_file(path: Path) -> bool:
    """Whether an existing file holds answers `trmkit predict` wrote (so a rerun may replace it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
        return looks_like_answers(head.decode("utf-8"), whole=len(head) < HEAD)
    except (OSError, UnicodeDecodeError):
        return False


def check_shapes(predictor: Predictor, items: list[Item], name: str, report: ImportReport) -> None:
    """A maze of a size the model cannot read (a model with positions) is an input that cannot be answered."""
    for item in items:
        if item.error is None and item.x.ndim == 2:
            why = predictor.refuses(item.x.shape)
            if why:
                report.accepted -= 1
                report.skip(f"{name}:{item.line}", "bad_size", why)
                item.error = f"bad_size: {why}"


def refuse_unanswerable(path: Path, form: Any, report: ImportReport) -> None:
    """A file with no input that can be answered is not the task's input form: said, not answered."""
    if report.accepted:
        return
    if not report.lines:
        raise ConfigError(f"{path}: no inputs there (an empty file); this run reads {form.expected}")
    raise ConfigError(f"{path}: none of its {report.lines} {form.unit} can be answered (first: {report.messages[0]}); "
                      f"this run reads {form.expected}")


def summary(report: ImportReport, used: list[int], auto: bool) -> list[str]:
    """What was answered and skipped (file:line of the first few), and the steps taken with --steps auto."""
    out = [f"predict: {report.accepted} inputs answered, {report.skipped} {report.unit} skipped",
           *report.summary_lines()[1:]]
    if auto and used:
        out.append(f"predict: --steps auto took {sum(used) / len(used):.1f} supervision steps per input on "
                   f"average, {max(used)} at most")
    return out
