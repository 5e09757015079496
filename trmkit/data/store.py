"""The generic on-disk data store that every task builder fills.

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

Arrays are opened memory-mapped; :class:`SampleStream` and
:func:`eval_batches` read only the rows they return, so datasets larger
than RAM train fine.

Sampling follows the TRM reference: each epoch visits every group once in a
shuffled order and draws one random augmentation (puzzle) of that group and
one random example of that puzzle. Unlike the reference, an epoch never
drops a partial batch: :meth:`SampleStream.take` crosses epoch boundaries,
so every group is seen exactly once per epoch and the stream can be resumed
mid-epoch from ``state_dict()``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

FORMAT = "trmkit-store/1"
META_FILE = "meta.json"
ARRAY_NAMES = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
# Keys a builder must pass to write_store; the rest are derived from the arrays.
BUILDER_META_KEYS = (
    "task", "vocab", "pad_id", "ignore_label_id", "blank_id",
    "num_puzzle_identifiers", "source", "build",
)
_REBUILD_HINT = "rebuild the dataset with trmkit's data builder"


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = META_FILE) -> "StoreMeta":
        """Parse ``meta.json`` contents; a missing key names the file and the fix."""
        names = [f for f in cls.__dataclass_fields__ if f not in ("build", "classes")]
        missing = [k for k in names if k not in data]
        if missing:
            raise StoreError(f"{where}: missing key(s) {missing}; {_REBUILD_HINT}")
        if not str(data["format"]).startswith("trmkit-store/"):
            raise StoreError(f"{where}: format {data['format']!r} is not a trmkit store")
        if data["format"] != FORMAT:
            raise StoreError(f"{where}: format {data['format']!r}, this trmkit reads {FORMAT!r}; {_REBUILD_HINT}")
        kwargs = {k: data[k] for k in names}
        kwargs["vocab"] = tuple(str(v) for v in data["vocab"])
        kwargs["dtypes"] = {str(k): str(v) for k, v in data["dtypes"].items()}
        meta = cls(**kwargs, build=dict(data.get("build", {})),
                   classes=tuple(str(c) for c in data.get("classes", ())))
        if len(meta.vocab) != meta.vocab_size:
            raise StoreError(f"{where}: vocab has {len(meta.vocab)} entries but vocab_size={meta.vocab_size}")
        return meta

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (vocab as a list)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["vocab"] = list(self.vocab)
        if self.classes:
            data["classes"] = list(self.classes)
        else:
            del data["classes"]
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


@dataclass(frozen=True)
class Batch:
    """A batch of samples in their stored (small) dtypes."""

    inputs: np.ndarray  # (B, L)
    labels: np.ndarray  # (B, L)
    puzzle_ids: np.ndarray  # (B,)
    rows: np.ndarray | None = None  # (B,) example rows in the split (evaluation batches)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


# ---------------------------------------------------------------- writing


def write_store(
    out_dir: str | os.PathLike[str],
    splits: Mapping[str, SplitArrays],
    meta: Mapping[str, Any],
    extras: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write every split of a dataset to ``out_dir`` all-or-nothing.

    ``meta`` holds the builder keys (:data:`BUILDER_META_KEYS`); format,
    sizes, seq_len and dtypes are derived here. Arrays are cast to the
    smallest dtypes that fit. ``extras`` (optional) maps a split name to
    ``{file name: JSON value}``: a task's sidecar files (ARC's augmentation
    table), written into that split's directory within the same atomic
    swap, so arrays never pair with a stale sidecar. Everything is written
    and fsynced in a hidden sibling directory that is renamed into place at
    the end, so a failure leaves no partial store. An existing store is
    replaced (old one renamed aside, new one renamed in, old one deleted);
    any other existing directory or file is refused.
    """
    out = Path(out_dir)
    check_output_dir(out)
    _check_builder_meta(meta)
    if not splits:
        raise ValueError("write_store needs at least one split")
    prepared = {name: _prepare_split(name, arrays, meta) for name, arrays in splits.items()}
    extras = _check_extras(extras or {}, splits)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_sibling(out, "tmp")
    tmp.mkdir()
    try:
        for name, (arrays, split_meta) in prepared.items():
            _write_split(tmp / name, arrays, split_meta)
            _write_sidecars(tmp / name, extras.get(name, {}))
        _fsync_dir(tmp)
        _swap_into_place(tmp, out)
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
        with open(path / f"{name}.npy", "wb") as f:
            np.save(f, getattr(arrays, name), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
    with open(path / META_FILE, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(path)


def _write_sidecars(path: Path, files: Mapping[str, Any]) -> None:
    """A split's extra JSON files (compact: they can be large), inside the not yet renamed store."""
    for name, value in files.items():
        with open(path / name, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
    if files:
        _fsync_dir(path)


def _fresh_sibling(out: Path, kind: str) -> Path:
    """An unused hidden path next to ``out`` (same filesystem, so rename is atomic)."""
    while True:
        candidate = out.parent / f".{out.name}.{kind}-{os.getpid()}-{os.urandom(4).hex()}"
        if not candidate.exists():
            return candidate


def _swap_into_place(new: Path, out: Path) -> None:
    """Rename ``new`` to ``out``; an existing ``out`` is moved aside then deleted."""
    if not out.exists():
        os.replace(new, out)
        _fsync_dir(out.parent)
        return
    old = _fresh_sibling(out, "old")
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old, out)
        raise
    _fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    """Persist directory entries; a no-op where the OS cannot open directories."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- reading


def open_store(root: str | os.PathLike[str]) -> dict[str, Split]:
    """Open every split directory under a dataset root."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"{root}: dataset directory not found; {_REBUILD_HINT}")
    splits = {c.name: open_split(c) for c in sorted(root.iterdir()) if (c / META_FILE).is_file()}
    if not splits:
        raise StoreError(f"{root}: no split directories (e.g. train/, test/) with {META_FILE}; {_REBUILD_HINT}")
    return splits


def open_split(path: str | os.PathLike[str]) -> Split:
    """Open one split with memory-mapped arrays, checking it against meta.json."""
    path = Path(path)
    if not path.is_dir():
        raise StoreError(f"{path}: split directory not found; {_REBUILD_HINT}")
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
        raise StoreError(f"{path}: missing; {_REBUILD_HINT}") from None
    except ValueError as e:
        raise StoreError(f"{path}: not valid JSON ({e}); {_REBUILD_HINT}") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object; {_REBUILD_HINT}")
    return StoreMeta.from_dict(data, where=str(path))


def _load_array(path: Path) -> np.ndarray:
    if not path.is_file():
        raise StoreError(f"{path}: missing; {_REBUILD_HINT}")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise StoreError(f"{path}: unreadable ({e}); {_REBUILD_HINT}") from None


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
                f"the store is inconsistent, {_REBUILD_HINT}"
            )
        if meta.dtypes.get(name) not in (None, str(arr.dtype)):
            raise StoreError(f"{path / (name + '.npy')}: dtype {arr.dtype}, {META_FILE} says {meta.dtypes[name]}")
    if int(arrays["puzzle_indices"][-1]) != n or int(arrays["group_indices"][-1]) != p:
        raise StoreError(f"{path}: puzzle_indices/group_indices do not end at {n}/{p}; {_REBUILD_HINT}")


# ---------------------------------------------------------------- sampling


class SampleStream:
    """Endless, resumable training samples from one split.

    Epoch ``e`` visits every group once, in the order
    ``default_rng([seed, e]).permutation(G)``, drawing one random puzzle
    (augmentation) of each group and one random example of that puzzle from
    the same generator. Only the chosen rows of the memory-mapped arrays
    are read.

    With several processes (rank of world), a stream serves only the epoch's
    positions rank, rank + world, rank + 2 * world, ...: the shares of one
    epoch are disjoint and their union is exactly the single-process epoch.
    """

    def __init__(self, split: Split, seed: int, rank: int = 0, world: int = 1) -> None:
        if split.num_groups < 1:
            raise StoreError(f"{split.path}: split has no groups to sample from; {_REBUILD_HINT}")
        if not 0 <= rank < world:
            raise ValueError(f"need 0 <= rank < world, got rank {rank} of {world}")
        if split.num_groups < world:
            raise StoreError(f"{split.path}: {split.num_groups} groups cannot be shared by {world} processes "
                             "(each needs at least one); build a larger store or use fewer processes")
        self._split = split
        self._rank, self._world = rank, world
        self._groups = np.asarray(split.group_indices, dtype=np.int64)  # (G+1,), small
        self._seed = _check_seed(seed)
        self._epoch = 0
        self._index = 0
        self._plan_epoch = -1
        self._plan_examples = np.empty(0, dtype=np.int64)  # (G,) example row per position
        self._plan_puzzles = np.empty(0, dtype=np.int64)  # (G,) puzzle per position

    @property
    def epoch(self) -> int:
        """Epochs completed so far (the epoch the next sample comes from)."""
        return self._epoch

    @property
    def share(self) -> int:
        """Positions of each epoch this stream serves (all of them in a single process)."""
        return len(range(self._rank, self._split.num_groups, self._world))

    @property
    def samples_served(self) -> int:
        """Samples returned since epoch 0, index 0."""
        return self._epoch * self.share + self._index

    def state_dict(self) -> dict[str, int]:
        """Position in the stream; :meth:`load_state_dict` resumes from it exactly."""
        state = {"epoch": self._epoch, "index": self._index, "seed": self._seed}
        if self._world > 1:
            state.update(rank=self._rank, world=self._world)
        return state

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume at a position saved by :meth:`state_dict` (by the same rank of the same world)."""
        epoch, index = int(state["epoch"]), int(state["index"])
        if epoch < 0 or not 0 <= index < self.share:
            raise ValueError(
                f"stream state {dict(state)} does not fit a split with {self._split.num_groups} groups; "
                "was the dataset rebuilt since the checkpoint?"
            )
        saved = (int(state.get("rank", 0)), int(state.get("world", 1)))
        if saved != (self._rank, self._world):
            raise ValueError(f"stream state of rank {saved[0]} of {saved[1]} loaded into rank {self._rank} "
                             f"of {self._world}; use position_for() to move a position to another world size")
        self._seed = _check_seed(int(state["seed"]))
        self._epoch, self._index = epoch, index
        self._plan_epoch = -1

    def position_for(self, states: list[Mapping[str, int]]) -> dict[str, int]:
        """This stream's state when the run was saved by another number of processes (`states`, one
        per old rank): the earliest epoch any old rank was in, from the first position of it that some
        old rank had not yet served. Samples past it that other old ranks had served come again."""
        epoch = min(int(st["epoch"]) for st in states)
        old_world = len(states)
        # old rank r served positions r, r + W, ... below index * W + r of its epoch
        served = [int(st["index"]) * old_world + int(st.get("rank", i)) if int(st["epoch"]) == epoch else None
                  for i, st in enumerate(states)]
        first_open = min(s for s in served if s is not None)  # every position below it was served
        index = -(-max(0, first_open - self._rank) // self._world)
        if index >= self.share:  # every position of this share in that epoch was served: the next epoch
            epoch, index = epoch + 1, 0
        return {"epoch": epoch, "index": index, "seed": int(states[0]["seed"]),
                **({"rank": self._rank, "world": self._world} if self._world > 1 else {})}

    def take(self, k: int) -> Batch:
        """The next ``k`` samples, crossing epoch boundaries as needed."""
        if k < 0:
            raise ValueError(f"take(k) needs k >= 0, got {k}")
        groups = self.share
        rows, puzzles = [], []
        while k > 0:
            self._ensure_plan()
            n = min(k, groups - self._index)
            rows.append(self._plan_examples[self._index : self._index + n])
            puzzles.append(self._plan_puzzles[self._index : self._index + n])
            self._index += n
            k -= n
            if self._index == groups:
                self._epoch, self._index = self._epoch + 1, 0
        empty = np.empty(0, dtype=np.int64)
        return _gather(
            self._split,
            np.concatenate(rows) if rows else empty,
            np.concatenate(puzzles) if puzzles else empty,
        )

    def _ensure_plan(self) -> None:
        """Draw the current epoch's group order, puzzle and example choices."""
        if self._plan_epoch == self._epoch:
            return
        rng = np.random.default_rng([self._seed, self._epoch])
        order = rng.permutation(self._split.num_groups)  # (G,)
        puzzles = rng.integers(self._groups[order], self._groups[order + 1])  # (G,)
        starts = np.asarray(self._split.puzzle_indices[puzzles], dtype=np.int64)  # (G,)
        ends = np.asarray(self._split.puzzle_indices[puzzles + 1], dtype=np.int64)  # (G,)
        self._plan_examples = rng.integers(starts, ends)[self._rank::self._world]  # (G / world,)
        self._plan_puzzles = puzzles[self._rank::self._world]
        self._plan_epoch = self._epoch


def _check_seed(seed: int) -> int:
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _gather(split: Split, rows: np.ndarray, puzzles: np.ndarray) -> Batch:
    """Read only the given example rows (and their puzzles' ids) from the memmaps."""
    return Batch(
        inputs=np.asarray(split.inputs[rows]),  # (k, L)
        labels=np.asarray(split.labels[rows]),  # (k, L)
        puzzle_ids=np.asarray(split.puzzle_identifiers[puzzles]),  # (k,)
    )


def eval_batches(split: Split, batch_size: int, limit: int | None = None, rank: int = 0,
                 world: int = 1) -> Iterator[Batch]:
    """All examples in stored order (or the first ``limit``); the last batch may be smaller.
    With several processes, process `rank` of `world` reads only the batches i with i % world == rank."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    total = len(split) if limit is None else min(int(limit), len(split))
    for start in range(rank * batch_size, total, world * batch_size):
        stop = min(start + batch_size, total)
        rows = np.arange(start, stop)
        puzzles = np.searchsorted(split.puzzle_indices, rows, side="right") - 1  # (b,)
        yield Batch(
            inputs=np.array(split.inputs[start:stop]),  # (b, L)
            labels=np.array(split.labels[start:stop]),  # (b, L)
            puzzle_ids=np.asarray(split.puzzle_identifiers[puzzles]),  # (b,)
            rows=rows,
        )
