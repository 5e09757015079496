"""The generic on-disk data store that every task builder fills: its format, writing and opening.

A dataset root ``DIR`` holds one directory per split (``DIR/train``,
``DIR/test``). Each split directory holds five ``.npy`` arrays and a
``meta.json``:

``inputs.npy``, ``labels.npy``  (N, L)  smallest unsigned dtype for the vocab
``puzzle_identifiers.npy``      (P,)    puzzle id of each puzzle
``puzzle_indices.npy``          (P+1,)  puzzle p owns examples [pi[p], pi[p+1])
``group_indices.npy``           (G+1,)  group g owns puzzles [gi[g], gi[g+1])

A group is an original puzzle together with its augmentations. The
vocabulary is stored as strings in ``meta.json`` so a store can be decoded
without trmkit.

Each split's ``meta.json`` carries a ``fingerprint``: the SHA-256 of its arrays
(dtype, shape and bytes) and sidecar files, computed once while the store is
written, from the arrays in memory. A run records the fingerprints of the store
it trained on; resuming or evaluating on that store compares the recorded values
with ``meta.json`` (nothing is rehashed when a store is opened), so a store
rebuilt with other settings is refused (train/session.py).

Arrays are opened memory-mapped; the samplers in stream.py read only the
rows they return, so datasets larger than RAM train fine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trmkit.names import current_names
from trmkit.files import atomic_open, commit_dir, fsync_dir, temp_sibling, to_json, write_json

FORMAT = "trmkit-store/1"
META_FILE = "meta.json"
ARRAY_NAMES = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
# Keys a builder must pass to write_store; the rest are derived from the arrays.
BUILDER_META_KEYS = (
    "task", "vocab", "pad_id", "ignore_label_id", "blank_id",
    "num_puzzle_identifiers", "source", "build",
)
REBUILD_HINT = "rebuild the dataset with trmkit's data builder"


class StoreError(Exception):
    """A store on disk is missing, incomplete or inconsistent."""


# ---------------------------------------------------------------- dtypes


def smallest_uint_dtype(max_value: int) -> np.dtype:
    """Smallest unsigned integer dtype that holds ``0..max_value``."""
    if max_value < 0:
        raise ValueError(f"max_value must be >= 0, got {max_value}")
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if max_value <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError(f"{max_value} does not fit in 64 bits")


def smallest_index_dtype(max_value: int) -> np.dtype:
    """int32 if ``max_value`` fits, else int64 (for offset arrays)."""
    if max_value < 0:
        raise ValueError(f"max_value must be >= 0, got {max_value}")
    return np.dtype(np.int32 if max_value <= np.iinfo(np.int32).max else np.int64)


# ---------------------------------------------------------------- types


@dataclass(frozen=True)
class SplitArrays:
    """In-memory arrays of one split, as handed to :func:`write_store`."""

    inputs: np.ndarray  # (N, L) token ids
    labels: np.ndarray  # (N, L) token ids; ignore_label_id where no loss
    puzzle_identifiers: np.ndarray  # (P,)
    puzzle_indices: np.ndarray  # (P+1,) example offsets
    group_indices: np.ndarray  # (G+1,) puzzle offsets


@dataclass(frozen=True)
class StoreMeta:
    """Typed view of one split's ``meta.json``."""

    format: str
    task: str
    vocab: tuple[str, ...]
    vocab_size: int
    seq_len: int
    pad_id: int
    ignore_label_id: int
    blank_id: int | None
    num_puzzle_identifiers: int
    num_examples: int
    num_puzzles: int
    num_groups: int
    dtypes: dict[str, str]
    source: str
    build: dict[str, Any] = field(default_factory=dict)
    classes: tuple[str, ...] = ()  # a classify task's class names; its label ids index them
    grid_shape: tuple[int, int] | None = None  # (rows, columns) of a grid task's row-major sequence
    given_tokens: tuple[int, ...] = ()  # input tokens the answer repeats as they are (a maze's walls, S, G)
    part_positions: int = 0  # a store's last positions: ids its task's model part reads, not the mixer (model/parts.py)
    answer_vocab: int = 0  # a grid store whose labels use only the vocabulary's first N ids (0 = all of it)
    fingerprint: str = ""  # "sha256:..." of the split's arrays and sidecars ("" for a store built before them)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = META_FILE) -> "StoreMeta":
        """Parse ``meta.json`` contents; a missing key names the file and the fix."""
        optional = ("build", "classes", "grid_shape", "given_tokens", "part_positions", "answer_vocab",
                    "fingerprint")
        data = current_names(data)  # stores written under former key names
        names = [f for f in cls.__dataclass_fields__ if f not in optional]
        missing = [k for k in names if k not in data]
        if missing:
            raise StoreError(f"{where}: missing key(s) {missing}; {REBUILD_HINT}")
        if not str(data["format"]).startswith("trmkit-store/"):
            raise StoreError(f"{where}: format {data['format']!r} is not a trmkit store")
        if data["format"] != FORMAT:
            raise StoreError(f"{where}: format {data['format']!r}, this trmkit reads {FORMAT!r}; {REBUILD_HINT}")
        kwargs = {k: data[k] for k in names}
        kwargs["vocab"] = tuple(str(v) for v in data["vocab"])
        kwargs["dtypes"] = {str(k): str(v) for k, v in data["dtypes"].items()}
        grid = data.get("grid_shape")
        meta = cls(**kwargs, build=dict(data.get("build", {})),
                   classes=tuple(str(c) for c in data.get("classes", ())),
                   grid_shape=(int(grid[0]), int(grid[1])) if grid else None,
                   given_tokens=tuple(int(t) for t in data.get("given_tokens", ())),
                   part_positions=int(data.get("part_positions", 0)),
                   answer_vocab=int(data.get("answer_vocab", 0)),
                   fingerprint=str(data.get("fingerprint", "")))
        if grid and meta.grid_shape[0] * meta.grid_shape[1] != meta.seq_len:
            raise StoreError(f"{where}: grid_shape {list(grid)} does not hold seq_len={meta.seq_len} cells; "
                             f"{REBUILD_HINT}")
        if len(meta.vocab) != meta.vocab_size:
            raise StoreError(f"{where}: vocab has {len(meta.vocab)} entries but vocab_size={meta.vocab_size}")
        return meta

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (vocab as a list)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["vocab"] = list(self.vocab)
        for key in ("classes", "grid_shape", "given_tokens", "part_positions", "answer_vocab", "fingerprint"):
            if not data[key]:
                del data[key]
            elif key not in ("part_positions", "answer_vocab", "fingerprint"):
                data[key] = list(data[key])
        return data

    def decode(self, tokens: Sequence[int] | np.ndarray) -> list[str]:
        """Token ids -> vocabulary strings."""
        return [self.vocab[int(t)] for t in tokens]


@dataclass(frozen=True)
class Split:
    """One opened split: memory-mapped arrays plus its metadata."""

    path: Path
    meta: StoreMeta
    inputs: np.ndarray  # (N, L) memmap
    labels: np.ndarray  # (N, L) memmap
    puzzle_identifiers: np.ndarray  # (P,) memmap
    puzzle_indices: np.ndarray  # (P+1,) memmap
    group_indices: np.ndarray  # (G+1,) memmap

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_indices.shape[0]) - 1

    @property
    def num_puzzles(self) -> int:
        return int(self.puzzle_identifiers.shape[0])


# ---------------------------------------------------------------- writing


def write_store(
    out_dir: str | os.PathLike[str],
    splits: Mapping[str, SplitArrays],
    meta: Mapping[str, Any],
    extras: Mapping[str, Mapping[str, Any]] | None = None,
    force: bool = False,
) -> Path:
    """Write every split of a dataset to ``out_dir`` all-or-nothing.

    ``meta`` holds the builder keys (:data:`BUILDER_META_KEYS`); format,
    sizes, seq_len, dtypes and each split's fingerprint are derived here. Arrays are cast to the
    smallest dtypes that fit. ``extras`` (optional) maps a split name to
    ``{file name: JSON value}``: a task's sidecar files (ARC's augmentation
    table), written into that split's directory within the same atomic
    swap, so arrays never pair with a stale sidecar. Everything is written
    and fsynced in a hidden sibling directory that is renamed into place at
    the end, so a failure leaves no partial store. An existing store is
    replaced only with ``force`` (old one renamed aside, new one renamed in,
    old one deleted), so no builder replaces one unasked; any other existing
    directory or file is refused (:func:`check_new_store`).
    """
    out = Path(out_dir)
    check_new_store(out, force)
    _check_builder_meta(meta)
    if not splits:
        raise ValueError("write_store needs at least one split")
    prepared = {name: _prepare_split(name, arrays, meta) for name, arrays in splits.items()}
    extras = _check_extras(extras or {}, splits)
    for name, (arrays, split_meta) in prepared.items():
        split_meta["fingerprint"] = fingerprint(arrays, extras.get(name, {}))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    tmp.mkdir()
    try:
        for name, (arrays, split_meta) in prepared.items():
            _write_split(tmp / name, arrays, split_meta)
            _write_sidecars(tmp / name, extras.get(name, {}))
        fsync_dir(tmp)
        commit_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def is_store_dir(path: Path) -> bool:
    """True for a directory whose entries are all trmkit split directories."""
    if not path.is_dir():
        return False
    children = list(path.iterdir())
    return bool(children) and all(_is_split_dir(c) for c in children)


def _is_split_dir(path: Path) -> bool:
    try:
        with open(path / META_FILE, encoding="utf-8") as f:
            return str(json.load(f).get("format", "")).startswith("trmkit-store/")
    except (OSError, ValueError, AttributeError):
        return False


def check_output_dir(out: str | os.PathLike[str]) -> None:
    """Raise FileExistsError unless ``out`` is absent, empty, or an existing store.

    Builders call this before slow work so a bad path fails at once.
    """
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another output path")
    if any(out.iterdir()) and not is_store_dir(out):
        raise FileExistsError(
            f"{out} exists and is not a trmkit store (no <split>/meta.json); "
            "refusing to overwrite it; choose another output path or remove it yourself"
        )


def check_new_store(out: str | os.PathLike[str], force: bool = False) -> None:
    """`trmkit data --out OUT`: raise FileExistsError when OUT already holds a store and ``force`` is off
    (runs trained on it would no longer match it), or when it is any other non-empty folder or a file
    (never replaced, not even with ``force``)."""
    out = Path(out)
    check_output_dir(out)
    if is_store_dir(out) and not force:
        splits = ", ".join(f"{name} {info['examples']}" for name, info in store_fingerprints(out).items())
        raise FileExistsError(
            f"{out} already holds a trmkit store ({splits} examples); refusing to overwrite it: choose another "
            "--out, or add --force (force=True from Python) to replace it (runs trained on the old store will "
            "then refuse to resume or evaluate on it)")


# ---------------------------------------------------------------- fingerprints


def fingerprint(arrays: SplitArrays, sidecars: Mapping[str, Any] | None = None) -> str:
    """SHA-256 of one split's arrays (name, dtype, shape, bytes) and sidecar files (name, the JSON
    text written), as "sha256:<hex>". Computed once, while the store is written."""
    digest = hashlib.sha256()
    for name in ARRAY_NAMES:
        arr = np.ascontiguousarray(getattr(arrays, name))
        digest.update(f"{name}:{arr.dtype.str}:{list(arr.shape)}\n".encode())
        digest.update(memoryview(arr).cast("B"))
    for name in sorted(sidecars or {}):
        digest.update(f"{name}\n".encode())
        digest.update(to_json(sidecars[name], indent=None).encode())
    return "sha256:" + digest.hexdigest()


def split_fingerprint_on_disk(path: str | os.PathLike[str]) -> str:
    """The fingerprint of a split as it now lies on disk (reads every array: for checks, not on open)."""
    path = Path(path)
    arrays = SplitArrays(**{n: np.load(path / f"{n}.npy", mmap_mode="r", allow_pickle=False) for n in ARRAY_NAMES})
    names = sorted(p.name for p in path.glob("*.json") if p.name != META_FILE)
    sidecars = {n: json.loads((path / n).read_text(encoding="utf-8")) for n in names}
    return fingerprint(arrays, sidecars)


def store_fingerprints(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """{split: {"fingerprint": "sha256:..." or None, "examples": N}} as each split's meta.json records
    it (None: built before fingerprints). Reads only meta.json files."""
    out: dict[str, dict[str, Any]] = {}
    root = Path(root)
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            data = json.loads((child / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and str(data.get("format", "")).startswith("trmkit-store/"):
            out[child.name] = {"fingerprint": data.get("fingerprint") or None,
                               "examples": int(data.get("num_examples", 0))}
    return out


def store_changes(recorded: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What differs between two `store_fingerprints` results, one phrase per split ([]: the same store).
    A split whose fingerprint is unknown on either side is compared by its count alone."""
    changes = []
    for name in sorted(set(recorded) | set(current)):
        was, now = recorded.get(name), current.get(name)
        if was is None or now is None:
            changes.append(f"split {name} {'added' if was is None else 'removed'}"
                           + (f" ({(now or was)['examples']} examples)"))
        elif was["examples"] != now["examples"]:
            changes.append(f"split {name} had {was['examples']} examples, now {now['examples']}")
        elif was.get("fingerprint") and now.get("fingerprint") and was["fingerprint"] != now["fingerprint"]:
            changes.append(f"split {name} has other contents (the same {now['examples']} examples in number)")
    return changes


def _check_builder_meta(meta: Mapping[str, Any]) -> None:
    missing = [k for k in BUILDER_META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"write_store: meta lacks {missing}")
    if meta["num_puzzle_identifiers"] < 1:
        raise ValueError("write_store: num_puzzle_identifiers must be >= 1")


def _prepare_split(
    name: str, arrays: SplitArrays, meta: Mapping[str, Any]
) -> tuple[SplitArrays, dict[str, Any]]:
    """Validate one split and cast it to the smallest dtypes; build its meta."""
    if not name or name != Path(name).name or name.startswith("."):
        raise ValueError(f"bad split name {name!r}")
    vocab_size = len(meta["vocab"])
    inputs, labels = np.asarray(arrays.inputs), np.asarray(arrays.labels)
    if inputs.ndim != 2 or labels.shape != inputs.shape:
        raise ValueError(f"split {name}: inputs {inputs.shape} and labels {labels.shape} must be equal (N, L)")
    n, seq_len = inputs.shape
    ids = np.asarray(arrays.puzzle_identifiers)
    _check_range(name, "inputs", inputs, vocab_size)
    _check_range(name, "labels", labels, vocab_size)
    _check_range(name, "puzzle_identifiers", ids, int(meta["num_puzzle_identifiers"]))
    _check_offsets(name, "puzzle_indices", arrays.puzzle_indices, ids.shape[0], n)
    _check_offsets(name, "group_indices", arrays.group_indices, None, ids.shape[0])
    token = smallest_uint_dtype(vocab_size - 1)
    cast = SplitArrays(
        inputs=inputs.astype(token, copy=False),
        labels=labels.astype(token, copy=False),
        puzzle_identifiers=ids.astype(smallest_uint_dtype(int(meta["num_puzzle_identifiers"]) - 1), copy=False),
        puzzle_indices=np.asarray(arrays.puzzle_indices).astype(smallest_index_dtype(n), copy=False),
        group_indices=np.asarray(arrays.group_indices).astype(smallest_index_dtype(ids.shape[0]), copy=False),
    )
    derived = {
        "format": FORMAT,
        "vocab_size": vocab_size,
        "seq_len": int(seq_len),
        "num_examples": int(n),
        "num_puzzles": int(ids.shape[0]),
        "num_groups": int(cast.group_indices.shape[0]) - 1,
        "dtypes": {k: str(getattr(cast, k).dtype) for k in ARRAY_NAMES},
    }
    given = {k: v for k, v in meta.items() if k not in derived and k != "build"}
    given["vocab"] = list(meta["vocab"])
    return cast, {"format": FORMAT, **given, **derived, "build": meta["build"]}


def _check_range(split: str, what: str, values: np.ndarray, upper: int) -> None:
    if values.size and (values.min() < 0 or values.max() >= upper):
        raise ValueError(f"split {split}: {what} values must lie in [0, {upper}), got [{values.min()}, {values.max()}]")


def _check_offsets(split: str, what: str, offsets: np.ndarray, count: int | None, total: int) -> None:
    """Offsets must start at 0, end at ``total`` and strictly increase."""
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.shape[0] < 1:
        raise ValueError(f"split {split}: {what} must be a 1-D array with at least one entry")
    if count is not None and offsets.shape[0] != count + 1:
        raise ValueError(f"split {split}: {what} has {offsets.shape[0]} entries, expected {count + 1}")
    if offsets[0] != 0 or offsets[-1] != total or np.any(np.diff(offsets) <= 0):
        raise ValueError(f"split {split}: {what} must rise strictly from 0 to {total}")


def _check_extras(extras: Mapping[str, Mapping[str, Any]], splits: Mapping[str, SplitArrays]
                  ) -> Mapping[str, Mapping[str, Any]]:
    """Sidecar files: plain ``*.json`` names in a split being written, never ``meta.json``."""
    for split, files in extras.items():
        if split not in splits:
            raise ValueError(f"write_store: extras for split {split!r}, which is not written ({sorted(splits)})")
        for name in files:
            if name != Path(name).name or not name.endswith(".json") or name == META_FILE or name.startswith("."):
                raise ValueError(f"write_store: bad sidecar file name {name!r} (a plain *.json name, not {META_FILE})")
    return extras


def _write_split(path: Path, arrays: SplitArrays, meta: dict[str, Any]) -> None:
    path.mkdir()
    for name in ARRAY_NAMES:
        with atomic_open(path / f"{name}.npy", "wb") as f:
            np.save(f, getattr(arrays, name), allow_pickle=False)
    write_json(path / META_FILE, meta)


def _write_sidecars(path: Path, files: Mapping[str, Any]) -> None:
    """A split's extra JSON files (compact: they can be large), inside the not yet renamed store."""
    for name, value in files.items():
        write_json(path / name, value, indent=None)


# ---------------------------------------------------------------- reading


def open_store(root: str | os.PathLike[str]) -> dict[str, Split]:
    """Open every split directory under a dataset root."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"{root}: dataset directory not found; {REBUILD_HINT}")
    splits = {c.name: open_split(c) for c in sorted(root.iterdir()) if (c / META_FILE).is_file()}
    if not splits:
        raise StoreError(f"{root}: no split directories (e.g. train/, test/) with {META_FILE}; {REBUILD_HINT}")
    return splits


def open_split(path: str | os.PathLike[str]) -> Split:
    """Open one split with memory-mapped arrays, checking it against meta.json."""
    path = Path(path)
    if not path.is_dir():
        raise StoreError(f"{path}: split directory not found; {REBUILD_HINT}")
    meta = read_meta(path / META_FILE)
    arrays = {name: _load_array(path / f"{name}.npy") for name in ARRAY_NAMES}
    _check_split(path, meta, arrays)
    return Split(path=path, meta=meta, **arrays)


def read_meta(path: str | os.PathLike[str]) -> StoreMeta:
    """Read and parse one ``meta.json``."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise StoreError(f"{path}: missing; {REBUILD_HINT}") from None
    except ValueError as e:
        raise StoreError(f"{path}: not valid JSON ({e}); {REBUILD_HINT}") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object; {REBUILD_HINT}")
    return StoreMeta.from_dict(data, where=str(path))


def _load_array(path: Path) -> np.ndarray:
    if not path.is_file():
        raise StoreError(f"{path}: missing; {REBUILD_HINT}")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise StoreError(f"{path}: unreadable ({e}); {REBUILD_HINT}") from None


def _check_split(path: Path, meta: StoreMeta, arrays: Mapping[str, np.ndarray]) -> None:
    """Shapes and dtypes must agree with meta.json and with each other."""
    n, p, g = meta.num_examples, meta.num_puzzles, meta.num_groups
    expected = {
        "inputs": (n, meta.seq_len),
        "labels": (n, meta.seq_len),
        "puzzle_identifiers": (p,),
        "puzzle_indices": (p + 1,),
        "group_indices": (g + 1,),
    }
    for name, shape in expected.items():
        arr = arrays[name]
        if arr.shape != shape:
            raise StoreError(
                f"{path / (name + '.npy')}: shape {arr.shape}, but {META_FILE} implies {shape}; "
                f"the store is inconsistent, {REBUILD_HINT}"
            )
        if meta.dtypes.get(name) not in (None, str(arr.dtype)):
            raise StoreError(f"{path / (name + '.npy')}: dtype {arr.dtype}, {META_FILE} says {meta.dtypes[name]}")
    if int(arrays["puzzle_indices"][-1]) != n or int(arrays["group_indices"][-1]) != p:
        raise StoreError(f"{path}: puzzle_indices/group_indices do not end at {n}/{p}; {REBUILD_HINT}")
