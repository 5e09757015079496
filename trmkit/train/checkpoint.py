"""Crash-safe checkpoints: a flat dict of tensors plus JSON metadata.

Layout inside a run directory::

    RUN_DIR/checkpoints/
        step-00000123/
            tensors.safetensors   every tensor: weights, EMA, optimizer state, RNG bytes, ...
            meta.json             step, metrics, resolved config + hash, versions, times,
                                  Python/NumPy RNG state, SHA-256 of tensors.safetensors
        best.json                 which checkpoint is best by the chosen metric

The module is generic: it never imports the model, data or CLI code. The caller
flattens its state into ``dict[str, Tensor]`` and a JSON-able ``meta`` dict.

How it stays safe when a run is interrupted or the disk fills up:

* A checkpoint is written into ``checkpoints/.tmp-*``, each file is flushed and
  fsync'd, the directory is fsync'd, and only then renamed to ``step-XXXXXXXX``.
  A directory with that name is therefore complete, or it was damaged later.
* Loading reads only safetensors and JSON (nothing is unpickled) and checks the
  file size and SHA-256 recorded in ``meta.json``; ``meta.json`` carries a hash
  of its own content. ``load_latest`` reports a damaged checkpoint and falls
  back to the one before it.
* Rotation keeps the last ``keep_last`` checkpoints plus the best one, and never
  deletes the checkpoint just written. The best is found from the ``meta.json``
  files themselves; ``best.json`` is a record for people and tools.
* Saving and loading add almost no resident memory on top of the state (the
  process must stay under a peak-RSS budget): the tensors file is streamed
  from each tensor's own memory, hashed as it is written, and is never one
  bytes object; loading checks size and SHA-256 in 1 MiB reads, then reads
  each tensor straight into a fresh tensor (no file mapping is kept).
* Saving step N replaces a checkpoint of step N and moves any with a later
  step aside to ``checkpoints/abandoned-step-*`` (kept, not deleted): after
  resuming from an older checkpoint those belong to an abandoned timeline, and
  ``load_latest`` must not pick them up after the next interruption.

One process writes to a run directory at a time; leftover ``.tmp-*`` folders
from a killed save are removed at the next save.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import torch

from trmkit import __version__ as TRMKIT_VERSION
from trmkit.config import Config

CHECKPOINTS_DIR = "checkpoints"
TENSORS_FILE = "tensors.safetensors"
META_FILE = "meta.json"
BEST_FILE = "best.json"
FORMAT_VERSION = 1
RNG_TORCH_KEY = "rng.torch_cpu"  # tensor key of torch's default CPU generator state
_STEP_RE = re.compile(r"^step-(\d+)$")
_TMP_PREFIX = ".tmp-"
_DEL_PREFIX = ".del-"
# Keys that save_checkpoint fills in itself; a caller's value is overwritten.
_RESERVED_META = (
    "format_version", "step", "config_hash", "trmkit_version", "python_version",
    "torch_version", "numpy_version", "saved_at", "saved_unix", "tensors_file",
    "tensors_bytes", "tensors_sha256", "num_tensors", "meta_sha256",
)


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or none could be loaded."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint directory is missing files, truncated or damaged."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint: its tensors (on CPU), metadata, directory and step."""

    path: Path
    step: int
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]

    @property
    def config(self) -> dict[str, Any] | None:
        return self.meta.get("config")

    @property
    def metrics(self) -> dict[str, Any]:
        return self.meta.get("metrics") or {}


# --------------------------------------------------------------------------- config


def _json_default(obj: Any) -> Any:
    """Turn NumPy scalars/arrays and paths into JSON values; refuse anything else."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"value of type {type(obj).__name__} is not JSON-serializable: {obj!r}")


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _normalize(obj: Any) -> Any:
    """What the object looks like after a JSON round trip (tuples -> lists, ...)."""
    return json.loads(_canonical_json(obj))


def config_hash(config: Mapping[str, Any], length: int = 12) -> str:
    """Stable short hash of a config: SHA-256 of its sorted-keys JSON."""
    return hashlib.sha256(_canonical_json(config).encode()).hexdigest()[:length]


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _is_ignored(key: str, ignore: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in ignore)


def diff_configs(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    ignore: Iterable[str] = (),
    labels: tuple[str, str] = ("checkpoint", "config"),
) -> list[str]:
    """Differences between two nested configs, one line per dotted key.

    ``ignore`` holds top-level keys or dotted prefixes ("run", "train.max_steps").
    Lines read "model.hidden_size: checkpoint 512, config 256".
    """
    ignore = tuple(ignore)
    flat_a, flat_b = _flatten(_normalize(a)), _flatten(_normalize(b))
    missing = object()
    lines = []
    for key in sorted(set(flat_a) | set(flat_b)):
        if _is_ignored(key, ignore):
            continue
        va, vb = flat_a.get(key, missing), flat_b.get(key, missing)
        if va is missing or vb is missing or va != vb or type(va) is not type(vb):
            show_a = "<missing>" if va is missing else json.dumps(va)
            show_b = "<missing>" if vb is missing else json.dumps(vb)
            lines.append(f"{key}: {labels[0]} {show_a}, {labels[1]} {show_b}")
    return lines


# --------------------------------------------------------------------------- RNG


def rng_state(
    generators: Mapping[str, torch.Generator] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Capture Python, NumPy (global/legacy) and torch CPU random states.

    Returns (json_dict, tensors): put json_dict into meta (e.g. meta["rng"]) and
    merge tensors into the checkpoint's tensors. ``generators`` are extra named
    torch generators (e.g. a data sampler's), stored as "rng.torch.<name>".
    """
    py_version, py_state, py_gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": {"version": py_version, "state": list(py_state), "gauss_next": py_gauss},
        "numpy": {
            "bit_generator": name, "key": [int(k) for k in keys], "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached),
        },
        "generators": sorted(generators or {}),
    }
    tensors = {RNG_TORCH_KEY: torch.get_rng_state()}
    for gen_name, gen in (generators or {}).items():
        tensors[f"rng.torch.{gen_name}"] = gen.get_state()
    return state, tensors


def restore_rng(
    state: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    generators: Mapping[str, torch.Generator] | None = None,
) -> None:
    """Restore the states captured by ``rng_state`` (tensors may be the full checkpoint dict)."""
    needed = [RNG_TORCH_KEY] + [f"rng.torch.{n}" for n in (generators or {})]
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise CheckpointError(f"checkpoint has no random state tensor(s) {missing}")
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state((
        npy["bit_generator"], np.asarray(npy["key"], dtype=np.uint32), npy["pos"],
        npy["has_gauss"], npy["cached_gaussian"],
    ))
    torch.set_rng_state(tensors[RNG_TORCH_KEY].to(torch.uint8))
    for gen_name, gen in (generators or {}).items():
        gen.set_state(tensors[f"rng.torch.{gen_name}"].to(torch.uint8))


# --------------------------------------------------------------------------- listing


def checkpoints_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def _step_of(path: Path) -> int | None:
    match = _STEP_RE.match(path.name)
    return int(match.group(1)) if match else None


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Checkpoint directories of a run, oldest step first (temp/abandoned dirs excluded)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _step_of(p) is not None]
    return sorted(found, key=lambda p: _step_of(p))


def best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint recorded in best.json, if there is one and it still exists."""
    try:
        record = json.loads((checkpoints_dir(run_dir) / BEST_FILE).read_text())
        path = checkpoints_dir(run_dir) / record["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_dir() else None


# --------------------------------------------------------------------------- durable writes


def _fsync_dir(path: Path) -> None:
    """Make a rename/creation inside ``path`` durable (POSIX; Windows cannot open dirs)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, chunks: Iterable[bytes | memoryview]) -> str:
    """Write the chunks, force them to disk, and return the SHA-256 of all of them.

    Taking the data in pieces lets a checkpoint go to disk without ever being one
    bytes object in memory; hashing while writing saves reading the file back.
    """
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for chunk in chunks:
            digest.update(chunk)
            f.write(chunk)
            del chunk  # let the producer free a copied block before it makes the next
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}")
    try:
        _write_file(tmp, [(json.dumps(obj, indent=2, default=_json_default) + "\n").encode()])
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _remove_dir(path: Path) -> None:
    """Delete a directory so that a half-deleted one never looks like a checkpoint."""
    doomed = path.with_name(f"{_DEL_PREFIX}{path.name}-{os.getpid()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _clean_stale(root: Path) -> None:
    for p in root.iterdir():
        if p.name.startswith((_TMP_PREFIX, _DEL_PREFIX)):
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


# --------------------------------------------------------------------------- safetensors format
#
# The file is written and read here rather than by the safetensors library so
# that no step holds a second copy of the state: safetensors.torch.save builds
# the whole file as one bytes object, and load/load_file either take such an
# object or keep the tensors on a memory map of the file (see _read_data).
# Format (https://github.com/huggingface/safetensors#format): an 8-byte
# little-endian header length N, N bytes of JSON {name: {dtype, shape,
# data_offsets: [begin, end]}, "__metadata__": {str: str}} padded with spaces,
# then the tensors' raw little-endian bytes back to back.

_ST_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_DTYPES_BY_NAME = {name: dtype for dtype, name in _ST_DTYPES.items()}
# An integer dtype of each element size: bf16 and bool have no NumPy dtype, so
# bytes are moved through a same-size integer view of the tensor.
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MAX_HEADER = 100_000_000  # the safetensors library refuses larger headers too
_BLOCK = 1 << 20  # bytes per read when hashing a file, and per copy when a tensor can't be written in place


class _Entry(NamedTuple):
    """One tensor's place in a safetensors file; offsets count from the end of the header."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


class _Layout(NamedTuple):
    """A safetensors file planned before writing: header bytes, tensor places, total size."""

    header: bytes
    entries: list[_Entry]
    size: int


def _byte_view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, sharing its memory (no copy)."""
    flat = t.reshape(-1).view(_INT_OF_SIZE[t.element_size()]).numpy()
    return memoryview(flat).cast("B")


def _raw_chunks(t: torch.Tensor) -> Iterator[memoryview]:
    """A tensor's bytes as safetensors stores them (C order, little-endian), in pieces.

    A dense, contiguous CPU tensor is one piece read in place, views into shared
    storage included. Any other (non-contiguous, on another device, or on a
    big-endian machine) goes through one reused buffer of about _BLOCK
    bytes, a block of rows at a time: a whole-tensor copy would double the
    peak, and fresh blocks each time would leave glibc's heap grown by several.
    (A sparse tensor is made dense first, a whole copy; trmkit saves none.)
    """
    t = (t.to_dense() if t.layout != torch.strided else t).detach()
    if t.device.type == "cpu" and t.is_contiguous() and sys.byteorder == "little":
        yield _byte_view(t)
        return
    t = t.reshape(1) if t.dim() == 0 else t
    rows = max(1, _BLOCK // max(1, t[0].numel() * t.element_size())) if len(t) else 1
    buf = torch.empty((min(rows, len(t)), *t.shape[1:]), dtype=t.dtype)
    for i in range(0, len(t), rows):
        block = buf[:min(rows, len(t) - i)]
        block.copy_(t[i:i + rows])
        if sys.byteorder != "little" and t.element_size() > 1:
            block.view(_INT_OF_SIZE[t.element_size()]).numpy().byteswap(inplace=True)
        yield _byte_view(block)


def _layout(tensors: Mapping[str, torch.Tensor], file_meta: Mapping[str, str]) -> _Layout:
    """The file's header and where each tensor goes, before any tensor byte is touched.

    Tensors are ordered by element size, largest first, then by name (much as
    the safetensors library orders them): the header is padded to a multiple of 8, so every
    tensor then starts at a multiple of its element size and can be read in place.
    """
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    entries, offset = [], 0
    for name in order:
        t = tensors[name]
        size = t.numel() * t.element_size()
        entries.append(_Entry(name, t.dtype, tuple(t.shape), offset, offset + size))
        offset += size
    header: dict[str, Any] = {"__metadata__": dict(file_meta)}
    header.update({e.name: {"dtype": _ST_DTYPES[e.dtype], "shape": list(e.shape),
                            "data_offsets": [e.begin, e.end]} for e in entries})
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return _Layout(struct.pack("<Q", len(text)) + text, entries, 8 + len(text) + offset)


def _tensor_chunks(layout: _Layout, tensors: Mapping[str, torch.Tensor]) -> Iterator[memoryview | bytes]:
    """The file's bytes piece by piece: the header, then each tensor straight from its memory."""
    yield layout.header
    for e in layout.entries:
        written = 0
        for data in _raw_chunks(tensors[e.name]):
            written += len(data)
            yield data
            del data  # free a copied block before the next one is made
        if written != e.end - e.begin:  # the tensor was resized after the header was built
            raise CheckpointError(f"tensor {e.name!r} has {written} bytes, expected {e.end - e.begin}")


def _read_header(f: BinaryIO, file_size: int) -> list[_Entry]:
    """Parse and check a safetensors header, as the library does; ValueError if invalid.

    Checking that the tensors tile the data exactly means a damaged header can
    never make the reader allocate more than the file holds.
    """
    raw = f.read(8)
    if len(raw) < 8:
        raise ValueError("file is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw)
    if n > min(_MAX_HEADER, file_size - 8):
        raise ValueError(f"header length {n} does not fit in a file of {file_size} bytes")
    header = json.loads(f.read(n))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    header.pop("__metadata__", None)
    entries = sorted((_parse_entry(name, info) for name, info in header.items()), key=lambda e: e.begin)
    offset = 0
    for e in entries:
        if e.begin != offset or e.end - e.begin != math.prod(e.shape) * e.dtype.itemsize:
            raise ValueError(f"tensor {e.name!r} has data_offsets [{e.begin}, {e.end}], "
                             f"expected to start at {offset} and hold {_ST_DTYPES[e.dtype]} {list(e.shape)}")
        offset = e.end
    if offset != file_size - 8 - n:
        raise ValueError(f"tensors hold {offset} bytes but the file has {file_size - 8 - n} after the header")
    return entries


def _parse_entry(name: str, info: Any) -> _Entry:
    """One header entry as an _Entry; ValueError naming the tensor if malformed."""
    try:
        dtype = _DTYPES_BY_NAME[info["dtype"]]
        shape, offsets = info["shape"], info["data_offsets"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"tensor {name!r}: bad or unsupported header entry {info!r}") from e
    sizes_ok = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
    offsets_ok = isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
    if not (sizes_ok and offsets_ok):
        raise ValueError(f"tensor {name!r}: bad shape or data_offsets in header entry {info!r}")
    return _Entry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _read_data(f: BinaryIO, entries: list[_Entry]) -> dict[str, torch.Tensor]:
    """Read each tensor's bytes straight into a new tensor: one copy, no file mapping kept.

    safetensors.torch.load_file maps the file; copying its tensors into owned
    memory keeps the whole mapping resident meanwhile (2x the state at peak),
    and keeping the mapped tensors would pin the disk space of a checkpoint
    that rotation deletes (and block its deletion on Windows). Its "pread"
    backend would do, but only recent safetensors has it; trmkit allows >= 0.4.
    The file is read front to back after the header, in offset order.
    """
    out: dict[str, torch.Tensor] = {}
    for e in entries:
        t = torch.empty(e.shape, dtype=e.dtype)
        data = _byte_view(t)
        if f.readinto(data) != len(data):
            raise ValueError(f"tensor {e.name!r} is cut short")
        if sys.byteorder != "little" and t.element_size() > 1:
            t.view(_INT_OF_SIZE[t.element_size()]).numpy().byteswap(inplace=True)
        out[e.name] = t
    return out


# --------------------------------------------------------------------------- saving


def _check_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The caller's tensors, unchanged and uncopied, after checking names, types and dtypes."""
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"checkpoint tensors must be dict[str, Tensor]; got {name!r}: {type(t).__name__}")
        if t.dtype not in _ST_DTYPES:
            raise TypeError(f"checkpoint tensor {name!r} has dtype {t.dtype}; supported: "
                            + ", ".join(str(d) for d in _ST_DTYPES))
    return dict(tensors)


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
        "tensors_file": TENSORS_FILE,
        "num_tensors": n_tensors,
    })
    if isinstance(full.get("config"), Mapping):
        full["config_hash"] = config_hash(full["config"])
    try:
        return _normalize(full)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint meta is not JSON-serializable: {e}") from e


def _seal_meta(body: Mapping[str, Any], tensors_bytes: int, tensors_sha256: str) -> bytes:
    """The final meta.json bytes: the body plus the tensors file's size and hash, then its own hash."""
    full = dict(body, tensors_bytes=tensors_bytes, tensors_sha256=tensors_sha256)
    full["meta_sha256"] = hashlib.sha256(_canonical_json(full).encode()).hexdigest()
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
    root: Path, name: str, layout: _Layout, tensors: Mapping[str, torch.Tensor], meta_body: Mapping[str, Any],
) -> Path:
    """Write both files into a fresh temp dir inside ``root`` and fsync them; clean up on failure.

    The tensors file is streamed from the tensors' memory; meta.json follows
    with the SHA-256 computed while streaming.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name}-", dir=root))
    try:
        sha256 = _write_file(tmp / TENSORS_FILE, _tensor_chunks(layout, tensors))
        _write_file(tmp / META_FILE, [_seal_meta(meta_body, layout.size, sha256)])
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _commit(tmp: Path, final: Path) -> None:
    """Rename the finished temp dir into place, replacing a checkpoint of the same step."""
    old = final.with_name(f"{_DEL_PREFIX}{final.name}-{os.getpid()}")
    if final.exists():
        os.rename(final, old)
    try:
        os.rename(tmp, final)
    except OSError:
        if old.exists():
            os.rename(old, final)
        raise
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    tensors: Mapping[str, torch.Tensor],
    meta: Mapping[str, Any],
    keep_last: int = 3,
    best_metric: str | None = None,
    best_mode: str = "max",
    log: Callable[[str], None] = print,
) -> Path:
    """Atomically write RUN_DIR/checkpoints/step-XXXXXXXX, then rotate old ones.

    ``meta`` should hold "metrics" and "config" (the resolved config dict) plus
    anything JSON-able the caller needs (RNG state, data position, ...). Raises
    CheckpointError on any write failure (disk full included), leaving the
    previous checkpoints untouched. A checkpoint of the same step is replaced.
    """
    if step < 0 or keep_last < 1 or best_mode not in ("max", "min"):
        raise ValueError(f"need step >= 0, keep_last >= 1, best_mode max|min; got {step}, {keep_last}, {best_mode!r}")
    checked = _check_tensors(tensors)
    body = _meta_body(step, meta, len(checked))
    layout = _layout(checked, {"format": "trmkit-checkpoint", "step": str(step)})
    # Both files' exact size, for a disk-full message: a hash of 64 zeros is as long as the real one.
    needed = layout.size + len(_seal_meta(body, layout.size, "0" * 64))
    root = checkpoints_dir(run_dir)
    final = root / f"step-{step:08d}"
    tmp: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        _clean_stale(root)
        tmp = _write_temp(root, final.name, layout, checked, body)
        _commit(tmp, final)
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(e, root, step, needed, keep_last) from e
    for later in list_checkpoints(run_dir):
        if _step_of(later) > step:
            _move_aside(later, log, f"it is newer than step {step}, from a run that was resumed earlier")
    _rotate(run_dir, final, keep_last, best_metric, best_mode, log)
    return final


# --------------------------------------------------------------------------- rotation


def _metric_of(path: Path, metric: str) -> float | None:
    try:
        value = json.loads((path / META_FILE).read_text())["metrics"][metric]
        value = float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if math.isnan(value) else value


def _find_best(paths: list[Path], metric: str, mode: str) -> tuple[Path, float] | None:
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
    best_metric: str | None, best_mode: str, log: Callable[[str], None],
) -> None:
    """Keep the last ``keep_last`` plus the best; failures here are logged, not raised."""
    paths = list_checkpoints(run_dir)
    keep = set(paths[-keep_last:]) | {new}
    if best_metric is not None:
        best = _find_best(paths, best_metric, best_mode)
        if best is not None:
            keep.add(best[0])
            record = {"name": best[0].name, "step": _step_of(best[0]), "metric": best_metric,
                      "value": best[1], "mode": best_mode}
            try:
                _write_json_atomic(checkpoints_dir(run_dir) / BEST_FILE, record)
            except OSError as e:
                log(f"checkpoint: could not update {BEST_FILE}: {e}")
    for p in paths:
        if p not in keep:
            try:
                _remove_dir(p)
            except OSError as e:
                log(f"checkpoint: could not delete old checkpoint {p}: {e}")


# --------------------------------------------------------------------------- loading


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise CorruptCheckpointError(f"{meta_path}: file is missing")
    try:
        meta = json.loads(meta_path.read_bytes())
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"{meta_path}: not valid JSON (truncated or damaged): {e}") from e
    if not isinstance(meta, dict) or "tensors_sha256" not in meta or "meta_sha256" not in meta:
        raise CorruptCheckpointError(f"{meta_path}: missing checksum fields, not a trmkit checkpoint")
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    if hashlib.sha256(_canonical_json(body).encode()).hexdigest() != meta["meta_sha256"]:
        raise CorruptCheckpointError(f"{meta_path}: content does not match its meta_sha256 (file was altered or damaged)")
    if meta.get("step") != _step_of(path):
        raise CorruptCheckpointError(f"{meta_path}: says step {meta.get('step')} but the directory is {path.name}")
    return meta


def _file_sha256(f: BinaryIO) -> str:
    """SHA-256 of an open file from its start, read in 1 MiB pieces so it is never whole in memory."""
    digest = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    f.seek(0)
    while n := f.readinto(buf):
        digest.update(view[:n])
    return digest.hexdigest()


def _verify(file: Path, f: BinaryIO, meta: Mapping[str, Any]) -> int:
    """Check the open tensors file against the size and SHA-256 in meta.json; return its size."""
    size = os.fstat(f.fileno()).st_size
    if size != meta["tensors_bytes"]:
        raise CorruptCheckpointError(
            f"{file}: truncated or wrong size: {size} bytes, expected {meta['tensors_bytes']}")
    digest = _file_sha256(f)
    if digest != meta["tensors_sha256"]:
        raise CorruptCheckpointError(
            f"{file}: checksum mismatch (sha256 {digest[:16]}..., expected {meta['tensors_sha256'][:16]}...); "
            "the file is corrupted")
    return size


def _read_tensors(path: Path, meta: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Verify the whole file first, then read it once more into fresh tensors (see _read_data)."""
    file = path / TENSORS_FILE
    try:
        with open(file, "rb") as f:
            size = _verify(file, f, meta)
            f.seek(0)
            try:
                return _read_data(f, _read_header(f, size))
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


def check_config(
    ckpt: LoadedCheckpoint, expected_config: Mapping[str, Any], ignore: Iterable[str] = (),
) -> None:
    """Raise CheckpointError naming every differing dotted key that is not ignored."""
    stored = ckpt.config
    if not isinstance(stored, Mapping):
        raise CheckpointError(f"{ckpt.path}: checkpoint has no stored config to compare with")
    diffs = diff_configs(with_new_defaults(stored, expected_config), expected_config, ignore=ignore)
    if diffs:
        raise CheckpointError(
            f"config differs from checkpoint {ckpt.path}:\n  " + "\n  ".join(diffs)
            + "\nResume with the checkpoint's config, or start a new run directory.")


def with_new_defaults(stored: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's config with the keys added to Config since it was written, where the expected
    config holds them at their defaults (e.g. model.puzzle_emb_dim: 0 behaves as before the key existed)."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in stored.items()}
    for section, values in Config().to_dict().items():
        if not isinstance(out.get(section), dict) or not isinstance(expected.get(section), Mapping):
            continue
        for key, value in values.items():
            if key not in out[section] and expected[section].get(key, object()) == value:
                out[section][key] = value
    return out


def load_latest(
    run_dir: str | os.PathLike,
    expected_config: Mapping[str, Any] | None = None,
    ignore: Iterable[str] = (),
    log: Callable[[str], None] = print,
) -> LoadedCheckpoint | None:
    """Newest checkpoint that verifies, falling back past damaged ones.

    Returns None when the run has no checkpoints; raises CheckpointError when all
    are damaged or when ``expected_config`` differs outside ``ignore``.
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
            check_config(ckpt, expected_config, ignore)
        return ckpt
    if not paths:
        return None
    raise CheckpointError(
        f"all {len(paths)} checkpoints in {checkpoints_dir(run_dir)} are damaged:\n  " + "\n  ".join(problems))
