"""Writing, rotating and loading checkpoint directories (the layout and the guarantees: __init__.py).

Saving writes both files into ``checkpoints/.tmp-*`` (each flushed and fsync'd through
trmkit.files), fsyncs that directory and renames it to ``step-XXXXXXXX``; then checkpoints
of a later step are moved aside and old ones rotated. Loading verifies size and SHA-256
before reading, and ``load_latest`` falls back past a damaged checkpoint.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from trmkit.version import __version__ as TRMKIT_VERSION
from trmkit import files, rundir
from trmkit.train.checkpoint import format as fmt
from trmkit.train.checkpoint.errors import CheckpointError, CorruptCheckpointError
from trmkit.train.checkpoint.identity import LoadedCheckpoint, canonical_json, check_config, config_hash, normalize

FORMAT_VERSION = 1
_STEP_RE = re.compile(r"^step-(\d+)$")
_DEL_PREFIX = ".del-"
# Keys that save_checkpoint fills in itself; a caller's value is overwritten.
_RESERVED_META = (
    "format_version", "step", "config_hash", "trmkit_version", "python_version",
    "torch_version", "numpy_version", "saved_at", "saved_unix", "tensors_file",
    "tensors_bytes", "tensors_sha256", "num_tensors", "meta_sha256",
)


# --------------------------------------------------------------------------- listing


def checkpoints_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / rundir.CHECKPOINTS


def step_of(path: Path) -> int | None:
    """The step of a checkpoint directory from its name (step-00001200 -> 1200); None for other names."""
    match = _STEP_RE.match(path.name)
    return int(match.group(1)) if match else None


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Checkpoint directories of a run, oldest step first (temp/abandoned dirs excluded)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=lambda p: step_of(p))


def best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint recorded in best.json, if there is one and it still exists."""
    try:
        record = json.loads((checkpoints_dir(run_dir) / rundir.BEST).read_text())
        path = checkpoints_dir(run_dir) / record["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_dir() else None


def _remove_dir(path: Path) -> None:
    """Delete a directory so that a half-deleted one never looks like a checkpoint."""
    doomed = path.with_name(f"{_DEL_PREFIX}{path.name}-{os.getpid()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _clean_stale(root: Path) -> None:
    for p in root.iterdir():
        if p.name.startswith((files.TMP_PREFIX, _DEL_PREFIX)):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def _move_aside(path: Path, log: Callable[[str], None], why: str) -> None:
    target = path.with_name(f"abandoned-{path.name}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"abandoned-{path.name}-{n}")
    os.rename(path, target)
    log(f"checkpoint: moved {path.name} to {target} ({why}); delete it if you do not need it")


# --------------------------------------------------------------------------- saving


def _meta_body(step: int, meta: Mapping[str, Any], n_tensors: int) -> dict[str, Any]:
    """meta.json without the tensors file's size and hash; checked before anything is written."""
    now = time.time()
    full = {k: v for k, v in meta.items() if k not in _RESERVED_META}
    full.update({
        "format_version": FORMAT_VERSION,
        "step": step,
        "trmkit_version": TRMKIT_VERSION,
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "saved_unix": now,
        "tensors_file": rundir.CHECKPOINT_TENSORS,
        "num_tensors": n_tensors,
    })
    if isinstance(full.get("config"), Mapping):
        full["config_hash"] = config_hash(full["config"])
    try:
        return normalize(full)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint meta is not JSON-serializable: {e}") from e


def _seal_meta(body: Mapping[str, Any], tensors_bytes: int, tensors_sha256: str) -> bytes:
    """The final meta.json bytes: the body plus the tensors file's size and hash, then its own hash."""
    full = dict(body, tensors_bytes=tensors_bytes, tensors_sha256=tensors_sha256)
    full["meta_sha256"] = hashlib.sha256(canonical_json(full).encode()).hexdigest()
    return (json.dumps(full, indent=2, sort_keys=True) + "\n").encode()


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _write_error(e: OSError, root: Path, step: int, needed: int, keep_last: int) -> CheckpointError:
    try:
        free = _mib(shutil.disk_usage(root).free)
    except OSError:
        free = "unknown"
    where = f"checkpoint step {step} in {root}"
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return CheckpointError(
            f"disk is full: could not write {where}. It needs {_mib(needed)}, free now {free}; "
            f"with keep_last={keep_last} the run needs room for about {keep_last + 2} checkpoints "
            f"(~{_mib(needed * (keep_last + 2))}). Previous checkpoints are intact. Fix: free space "
            f"on that disk, lower keep_last, or point the run directory at a disk with more room. ({e})"
        )
    return CheckpointError(
        f"could not write {where} ({_mib(needed)}, free {free}): {e}. "
        "Previous checkpoints are intact; check permissions and the disk, or use a different run dir."
    )


def _write_temp(
    root: Path, name: str, layout: fmt.Layout, tensors: Mapping[str, torch.Tensor], meta_body: Mapping[str, Any],
) -> Path:
    """Write both files into a fresh temp dir inside ``root`` and fsync them; clean up on failure.

    The tensors file is streamed from the tensors' memory; meta.json follows
    with the SHA-256 computed while streaming.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"{files.TMP_PREFIX}{name}-", dir=root))
    try:
        with open(tmp / rundir.CHECKPOINT_TENSORS, "wb") as f:
            sha256 = files.write_chunks(f, fmt.tensor_chunks(layout, tensors))
        with open(tmp / rundir.CHECKPOINT_META, "wb") as f:
            files.write_chunks(f, [_seal_meta(meta_body, layout.size, sha256)])
        files.fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    tensors: Mapping[str, torch.Tensor],
    meta: Mapping[str, Any],
    keep_last: int = 3,
    best_metric: str | None = None,
    best_mode: str = "max",
    log: Callable[[str], None] = print,
    best_step: int | None = None,
) -> Path:
    """Atomically write RUN_DIR/checkpoints/step-XXXXXXXX, then rotate old ones.

    ``meta`` should hold "metrics" and "config" (the resolved config dict) plus
    anything JSON-able the caller needs (RNG state, data position, ...). Raises
    CheckpointError on any write failure (disk full included), leaving the
    previous checkpoints untouched. A checkpoint of the same step is replaced.
    ``best_step``: the caller's own choice of the best (train.best_margin may keep an earlier,
    lower value); rotation keeps that checkpoint where it exists, else the best by the metric.
    """
    if step < 0 or keep_last < 1 or best_mode not in ("max", "min"):
        raise ValueError(f"need step >= 0, keep_last >= 1, best_mode max|min; got {step}, {keep_last}, {best_mode!r}")
    checked = fmt.check_tensors(tensors)
    body = _meta_body(step, meta, len(checked))
    layout = fmt.layout_of(checked, {"format": "trmkit-checkpoint", "step": str(step)})
    # Both files' exact size, for a disk-full message: a hash of 64 zeros is as long as the real one.
    needed = layout.size + len(_seal_meta(body, layout.size, "0" * 64))
    root = checkpoints_dir(run_dir)
    final = root / f"step-{step:08d}"
    tmp: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        _clean_stale(root)
        tmp = _write_temp(root, final.name, layout, checked, body)
        files.commit_dir(tmp, final)
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(e, root, step, needed, keep_last) from e
    for later in list_checkpoints(run_dir):
        if step_of(later) > step:
            _move_aside(later, log, f"it is newer than step {step}, from a run that was resumed earlier")
    _rotate(run_dir, final, keep_last, best_metric, best_mode, log, best_step)
    return final


# --------------------------------------------------------------------------- rotation


def _metric_of(path: Path, metric: str) -> float | None:
    try:
        value = json.loads((path / rundir.CHECKPOINT_META).read_text())["metrics"][metric]
        value = float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if math.isnan(value) else value


def _find_best(paths: list[Path], metric: str, mode: str, step: int | None = None) -> tuple[Path, float] | None:
    for p in paths:  # the caller's best, where it is on disk with the metric
        if step_of(p) == step and (value := _metric_of(p, metric)) is not None:
            return p, value
    best: tuple[Path, float] | None = None
    for p in paths:  # oldest first: ties keep the earlier checkpoint
        value = _metric_of(p, metric)
        if value is None:
            continue
        if best is None or (value > best[1] if mode == "max" else value < best[1]):
            best = (p, value)
    return best


def _rotate(
    run_dir: str | os.PathLike, new: Path, keep_last: int,
    best_metric: str | None, best_mode: str, log: Callable[[str], None], best_step: int | None = None,
) -> None:
    """Keep the last ``keep_last`` plus the best; failures here are logged, not raised."""
    paths = list_checkpoints(run_dir)
    keep = set(paths[-keep_last:]) | {new}
    if best_metric is not None:
        best = _find_best(paths, best_metric, best_mode, best_step)
        if best is not None:
            keep.add(best[0])
            record = {"name": best[0].name, "step": step_of(best[0]), "metric": best_metric,
                      "value": best[1], "mode": best_mode}
            try:
                files.write_json(checkpoints_dir(run_dir) / rundir.BEST, record)
            except OSError as e:
                log(f"checkpoint: could not update {rundir.BEST}: {e}")
    for p in paths:
        if p not in keep:
            try:
                _remove_dir(p)
            except OSError as e:
                log(f"checkpoint: could not delete old checkpoint {p}: {e}")


# --------------------------------------------------------------------------- loading


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / rundir.CHECKPOINT_META
    if not meta_path.is_file():
        raise CorruptCheckpointError(f"{meta_path}: file is missing")
    try:
        meta = json.loads(meta_path.read_bytes())
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"{meta_path}: not valid JSON (truncated or damaged): {e}") from e
    if not isinstance(meta, dict) or "tensors_sha256" not in meta or "meta_sha256" not in meta:
        raise CorruptCheckpointError(f"{meta_path}: missing checksum fields, not a trmkit checkpoint")
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    if hashlib.sha256(canonical_json(body).encode()).hexdigest() != meta["meta_sha256"]:
        raise CorruptCheckpointError(f"{meta_path}: content does not match its meta_sha256 "
                                     "(file was altered or damaged)")
    if meta.get("step") != step_of(path):
        raise CorruptCheckpointError(f"{meta_path}: says step {meta.get('step')} but the directory is {path.name}")
    return meta



def _verify(file: Path, f: BinaryIO, meta: Mapping[str, Any]) -> int:
    """Check the open tensors file against the size and SHA-256 in meta.json; return its size."""
    size = os.fstat(f.fileno()).st_size
    if size != meta["tensors_bytes"]:
        raise CorruptCheckpointError(
            f"{file}: truncated or wrong size: {size} bytes, expected {meta['tensors_bytes']}")
    digest = fmt.file_sha256(f)
    if digest != meta["tensors_sha256"]:
        raise CorruptCheckpointError(
            f"{file}: checksum mismatch (sha256 {digest[:16]}..., expected {meta['tensors_sha256'][:16]}...); "
            "the file is corrupted")
    return size


def _read_tensors(path: Path, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Verify the whole file first, then read it once more into fresh tensors (see _read_data)."""
    file = path / rundir.CHECKPOINT_TENSORS
    try:
        with open(file, "rb") as f:
            size = _verify(file, f, meta)
            f.seek(0)
            try:
                return fmt.read_data(f, fmt.read_header(f, size))
            except (ValueError, RecursionError) as e:  # RecursionError: absurdly nested JSON
                raise CorruptCheckpointError(f"{file}: not a valid safetensors file: {e}") from e
    except FileNotFoundError as e:
        raise CorruptCheckpointError(f"{file}: file is missing") from e
    except OSError as e:
        raise CorruptCheckpointError(f"{file}: cannot be read: {e}") from e


def load_checkpoint(path: str | os.PathLike) -> LoadedCheckpoint:
    """Load and verify one checkpoint directory; raises CorruptCheckpointError if damaged."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptCheckpointError(f"{path}: checkpoint directory does not exist")
    meta = _read_meta(path)
    tensors = _read_tensors(path, meta)
    return LoadedCheckpoint(path=path, step=int(meta["step"]), tensors=tensors, meta=meta)



def load_latest(
    run_dir: str | os.PathLike,
    expected_config: Mapping[str, Any] | None = None,
    ignore: Iterable[str] = (),
    log: Callable[[str], None] = print,
    sections: Mapping[str, type] | None = None,
) -> LoadedCheckpoint | None:
    """Newest checkpoint that verifies, falling back past damaged ones.

    Returns None when the run has no checkpoints; raises CheckpointError when all
    are damaged or when ``expected_config`` differs outside ``ignore`` (``sections``: the
    classes of its application sections, whose keys added since are filled with their defaults).
    """
    paths = list_checkpoints(run_dir)
    problems = []
    for path in reversed(paths):
        try:
            ckpt = load_checkpoint(path)
        except CorruptCheckpointError as e:
            problems.append(str(e))
            log(f"checkpoint: skipping damaged {path.name}: {e}")
            continue
        if expected_config is not None:
            check_config(ckpt, expected_config, ignore, sections)
        return ckpt
    if not paths:
        return None
    raise CheckpointError(
        f"all {len(paths)} checkpoints in {checkpoints_dir(run_dir)} are damaged:\n  " + "\n  ".join(problems))
