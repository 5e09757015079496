"""The streaming safetensors reader and writer that checkpoints use.

The file is written and read here rather than by the safetensors library so
that no step holds a second copy of the state: safetensors.torch.save builds
the whole file as one bytes object, and load/load_file either take such an
object or keep the tensors on a memory map of the file (see read_data).
Format (https://github.com/huggingface/safetensors#format): an 8-byte
little-endian header length N, N bytes of JSON {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {str: str}} padded with spaces,
then the tensors' raw little-endian bytes back to back.

Writing: `check_tensors`, then `layout_of` plans the header and every tensor's place
before any tensor byte is touched, and `tensor_chunks` yields the file piece by piece
from the tensors' own memory. Reading: `file_sha256` checks the whole file in BLOCK
reads, `read_header` parses and checks the header, `read_data` reads each tensor
straight into a fresh tensor.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, NamedTuple

import torch

from trmkit.train.checkpoint.errors import CheckpointError

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
BLOCK = 1 << 20  # bytes per read when hashing a file, and per copy when a tensor can't be written in place


class Entry(NamedTuple):
    """One tensor's place in a safetensors file; offsets count from the end of the header."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


class Layout(NamedTuple):
    """A safetensors file planned before writing: header bytes, tensor places, total size."""

    header: bytes
    entries: list[Entry]
    size: int


def _byte_view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, sharing its memory (no copy)."""
    flat = t.reshape(-1).view(_INT_OF_SIZE[t.element_size()]).numpy()
    return memoryview(flat).cast("B")


def _raw_chunks(t: torch.Tensor) -> Iterator[memoryview]:
    """A tensor's bytes as safetensors stores them (C order, little-endian), in pieces.

    A dense, contiguous CPU tensor is one piece read in place, views into shared
    storage included. Any other (non-contiguous, on another device, or on a
    big-endian machine) goes through one reused buffer of about BLOCK
    bytes, a block of rows at a time: a whole-tensor copy would double the
    peak, and fresh blocks each time would leave glibc's heap grown by several.
    (A sparse tensor is made dense first, a whole copy; trmkit saves none.)
    """
    t = (t.to_dense() if t.layout != torch.strided else t).detach()
    if t.device.type == "cpu" and t.is_contiguous() and sys.byteorder == "little":
        yield _byte_view(t)
        return
    t = t.reshape(1) if t.dim() == 0 else t
    rows = max(1, BLOCK // max(1, t[0].numel() * t.element_size())) if len(t) else 1
    buf = torch.empty((min(rows, len(t)), *t.shape[1:]), dtype=t.dtype)
    for i in range(0, len(t), rows):
        block = buf[:min(rows, len(t) - i)]
        block.copy_(t[i:i + rows])
        if sys.byteorder != "little" and t.element_size() > 1:
            block.view(_INT_OF_SIZE[t.element_size()]).numpy().byteswap(inplace=True)
        yield _byte_view(block)


def layout_of(tensors: Mapping[str, torch.Tensor], file_meta: Mapping[str, str]) -> Layout:
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
        entries.append(Entry(name, t.dtype, tuple(t.shape), offset, offset + size))
        offset += size
    header: dict[str, Any] = {"__metadata__": dict(file_meta)}
    header.update({e.name: {"dtype": _ST_DTYPES[e.dtype], "shape": list(e.shape),
                            "data_offsets": [e.begin, e.end]} for e in entries})
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return Layout(struct.pack("<Q", len(text)) + text, entries, 8 + len(text) + offset)


def tensor_chunks(layout: Layout, tensors: Mapping[str, torch.Tensor]) -> Iterator[memoryview | bytes]:
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


def read_header(f: BinaryIO, file_size: int) -> list[Entry]:
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


def _parse_entry(name: str, info: Any) -> Entry:
    """One header entry as an Entry; ValueError naming the tensor if malformed."""
    try:
        dtype = _DTYPES_BY_NAME[info["dtype"]]
        shape, offsets = info["shape"], info["data_offsets"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"tensor {name!r}: bad or unsupported header entry {info!r}") from e
    sizes_ok = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
    offsets_ok = isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
    if not (sizes_ok and offsets_ok):
        raise ValueError(f"tensor {name!r}: bad shape or data_offsets in header entry {info!r}")
    return Entry(name, dtype, tuple(shape), offsets[0], offsets[1])


def read_data(f: BinaryIO, entries: list[Entry]) -> dict[str, torch.Tensor]:
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


def check_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The caller's tensors, unchanged and uncopied, after checking names, types and dtypes."""
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"checkpoint tensors must be dict[str, Tensor]; got {name!r}: {type(t).__name__}")
        if t.dtype not in _ST_DTYPES:
            raise TypeError(f"checkpoint tensor {name!r} has dtype {t.dtype}; supported: "
                            + ", ".join(str(d) for d in _ST_DTYPES))
    return dict(tensors)


def file_sha256(f: BinaryIO) -> str:
    """SHA-256 of an open file from its start, read in 1 MiB pieces so it is never whole in memory."""
    digest = hashlib.sha256()
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    f.seek(0)
    while n := f.readinto(buf):
        digest.update(view[:n])
    return digest.hexdigest()
