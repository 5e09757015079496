"""AZR seed files as tasks: read (broken lines counted), validated (rejections counted), split
into the programs self-play trains on and a fixed held-out subset it never sees.

A file is read as ``*_code_f_seed_io.jsonl`` (several pairs and a message: deduction, abduction
and induction tasks) or ``*_seed_io.jsonl`` (one pair: deduction and abduction) by its name; a
file named otherwise is read by the keys of its first line, and the choice is logged. Every
program is validated (azr/validate.py: parses, stays inside the AZR policy, runs, deterministic)
before it becomes a task; the outputs kept are the sandbox's.

The held-out subset is fixed by rl.heldout_seed alone: per file, the valid programs ordered by
sha256 of (seed, program, inputs), the first ``min(rl.heldout_per_type, HELDOUT_SHARE x valid)``.
It does not depend on the order of the file or on the run's random state, and it is reported as
its own source (``solve_rate/azr/deduction``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Callable

from trmkit.config import ConfigError
from trmkit.rl.azr.seeds import Skips, read_code_f_seeds, read_io_seeds
from trmkit.rl.azr.tasks import AzrTask, tasks_from
from trmkit.rl.azr.validate import Program, Report, Valid, Validator, from_code_f_seed, from_io_seed

SOURCE = "azr"  # the source's name in metrics
HELDOUT_SHARE = 0.25  # at most this share of a file's valid programs is held out


def file_format(path: Path, log: Callable[[str], None]) -> str:
    """"code_f" or "io": by the file's name, else by the keys of its first line (logged)."""
    if path.name.endswith("_code_f_seed_io.jsonl"):
        return "code_f"
    if path.name.endswith("_seed_io.jsonl"):
        return "io"
    try:
        with path.open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        record = json.loads(first) if first else {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the seed file ({e.strerror}); check rl.seed_files") from None
    except ValueError:
        record = {}
    if not isinstance(record, dict) or not ({"inputs", "input"} & record.keys()):
        raise ConfigError(f"{path}:1: not an AZR seed file (no 'input' or 'inputs' key); rl.seed_files takes "
                          "*_seed_io.jsonl and *_code_f_seed_io.jsonl files")
    form = "code_f" if "inputs" in record else "io"
    log(f"rl: {path.name} read as an AZR {form} seed file: its first line has the key "
        f"{'inputs' if form == 'code_f' else 'input'} (name it *_{form}_seed_io.jsonl to say so)")
    return form


def read_programs(path: Path, counts: Counter, log: Callable[[str], None]) -> tuple[list[Program], dict]:
    """The programs of one seed file and their messages by source; broken lines counted and logged."""
    skips, form = Skips(), file_format(path, log)
    if form == "code_f":
        seeds = list(read_code_f_seeds(path, skips))
        programs = [from_code_f_seed(s) for s in seeds]
        messages = {(p.source, p.inputs): s.message for p, s in zip(programs, seeds)}
    else:
        programs, messages = [from_io_seed(s) for s in read_io_seeds(path, skips)], {}
    if skips.count:
        counts["seed/broken_line"] += skips.count
        log(f"rl: {path}: skipped {skips.count} broken line(s), first: {skips.where[0]}")
    return programs, messages


def heldout_order(seed: int, valid: Valid) -> str:
    return hashlib.sha256(f"{seed}\0{valid.source}\0{valid.inputs}".encode()).hexdigest()


def load(paths, heldout_seed: int, heldout_per_type: int, counts: Counter,
         log: Callable[[str], None]) -> tuple[list[AzrTask], list[AzrTask]]:
    """(training tasks, held-out tasks) of the seed files, each task once; a program held out in one
    file is not trained on from another."""
    train: list[AzrTask] = []
    held: list[AzrTask] = []
    with Validator() as validator:
        for path in map(Path, paths):
            programs, messages = read_programs(path, counts, log)
            report = validator.validate(programs, Report())
            for key, n in report.counts.items():
                counts["seed/valid" if key == "valid" else f"seed/rejected/{key}"] += n
            valid = sorted(report.valid, key=lambda v: heldout_order(heldout_seed, v))
            n_held = min(heldout_per_type, int(HELDOUT_SHARE * len(valid)))
            for i, v in enumerate(valid):
                tasks = tasks_from(v.source, v.inputs, v.outputs, messages.get((v.source, v.inputs), ""))
                (held if i < n_held else train).extend(tasks)
            log(f"rl: {path.name}: {len(valid)} of {len(programs)} programs valid ({dict(report.counts)}); "
                f"{n_held} held out (rl.heldout_seed={heldout_seed}), {len(valid) - n_held} for self-play")
    held = unique(held)
    out = {(t.program, t.inputs) for t in held}
    return [t for t in unique(train) if (t.program, t.inputs) not in out], held


def unique(tasks: list[AzrTask]) -> list[AzrTask]:
    """The tasks in order, each (kind, program, inputs) once."""
    seen, out = set(), []
    for t in tasks:
        key = (t.kind, t.program, t.inputs)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
