"""What the e-mail commands write, the one output policy they follow, and the store they read, checked first.

A path a command writes (`--out`, `--into`, `--csv-out`) is refused where writing it could destroy what the
command reads (files.check_output: an input, the bundle or run, its store), and where it is an existing file that
is not the command's own kind of output (files.check_overwrite): a run's weights, a mailbox or any other file
is replaced only with --force; an earlier predictions file of `email predict` or result of `email baseline`
is recognised by its contents and replaced. The writes themselves are atomic (files.atomic_open).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.files import UnsafeTargetError, check_output, check_overwrite


def guard_output(out: str, reads: list, flag: str = "--out", inside_ok: tuple = ()) -> Path:
    """`out` as a Path, unless writing it could destroy what the command reads (files.check_output)."""
    try:
        return check_output(out, reads, flag, inside_ok)
    except UnsafeTargetError as err:
        raise ConfigError(str(err)) from err


def guard_new_output(out: str, reads: list, force: bool, own, what: str, flag: str = "--out") -> Path:
    """`out` as a Path, unless writing it could destroy what the command reads (guard_output) or replace a file
    that is not this command's own `what` (files.check_overwrite: `own(path)` recognises one; --force allows it)."""
    path = guard_output(out, reads, flag)
    try:
        return check_overwrite(path, force, own, flag, what)
    except UnsafeTargetError as err:
        raise ConfigError(str(err)) from err


def first_json(path: Path, whole: bool = False):
    """The first line of `path` (or all of it) as JSON; None where it is not JSON text."""
    try:
        with open(path, "rb") as f:
            text = f.read() if whole else f.readline(1 << 20)
        return json.loads(text.decode("utf-8"))
    except (OSError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None


def is_predictions(path: Path) -> bool:
    """`path` starts with a line `email predict` writes (an earlier --out of it): it may be replaced."""
    first = first_json(path)
    return isinstance(first, dict) and {"label", "predicted", "probabilities"} <= set(first)


def is_baseline_result(path: Path) -> bool:
    """`path` holds `email baseline --out`'s JSON (an earlier result of it): it may be replaced."""
    if path.stat().st_size > 256 << 20:
        return False
    result = first_json(path, whole=True)
    return isinstance(result, dict) and {"baseline", "stronger"} <= set(result)


def is_proposals_csv(path: Path) -> bool:
    """`path` starts with the header `email label --csv-out` writes (an earlier proposals CSV): it may be replaced."""
    from trmkit.email.label_ask import CSV_COLUMNS

    try:
        with open(path, "rb") as f:
            header = f.readline(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return header == ",".join(CSV_COLUMNS)


def model_reads(model: str) -> list[Path]:
    """What loading `model` reads: the bundle or run folder, and a run's store."""
    import yaml

    path = Path(model)
    reads = [path]
    config = rundir.path(path, rundir.CONFIG)
    if config.is_file():
        try:
            reads.append(Path(yaml.safe_load(config.read_text())["data"]["path"]))
        except (yaml.YAMLError, KeyError, TypeError, UnicodeDecodeError):
            pass  # a damaged config is named when the run is loaded
    return reads


def email_store_meta(data: Path, meta_file: str) -> dict:
    """The train split's meta.json of an e-mail store; a ConfigError naming the file where it is missing, damaged,
    or of another task."""
    from trmkit.email.task import NAME

    path = data / "train" / meta_file
    if not path.is_file():
        raise ConfigError(f"{path} not found: {data} is not a store; build one with `trmkit data email --source "
                          f"MAIL --out {data}`")
    meta = first_json(path, whole=True)
    if not isinstance(meta, dict):
        raise ConfigError(f"{path} is damaged (not a JSON object): build the store again with `trmkit data email`")
    if meta.get("task") != NAME:
        raise ConfigError(f"{data} is a {meta.get('task')} store, not an e-mail store: give one built with "
                          "`trmkit data email`")
    return meta


def without_machine_paths(value):
    """`value` (the store's build record, as a bundle keeps it) with every absolute path reduced to its file name:
    a bundle goes to other machines, and this one's folders (a label map, a skipped message's file) say nothing
    there. Relative paths, numbers and other strings are kept."""
    if isinstance(value, dict):
        return {k: without_machine_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_machine_paths(v) for v in value]
    if isinstance(value, str) and Path(value).is_absolute():
        return Path(value).name
    if isinstance(value, str):  # "/abs/path/inbox.mbox:12: reason" in a skipped message's example
        return re.sub(r"(?<![\w.])/(?:[^/\s:]+/)+([^/\s:]+)", r"\1", value)
    return value
