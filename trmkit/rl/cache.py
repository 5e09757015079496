"""A least-recently-used cache bounded by bytes, for tokenised traces and execution results.

Self-play asks the same questions again and again (the same program run on the same input, the
same trace tokenised for a second role), so caching pays; but entries differ in size by orders
of magnitude (a 4-byte verdict, a 2 MB token tensor), so a bound on the number of entries says
nothing about memory on a laptop. ``ByteLRU`` bounds the estimated bytes of keys plus values.

The default size estimate (``estimate_bytes``) is deliberately simple and a little generous:
buffers and arrays count their payload (``.nbytes``, or ``element_size() * numel()`` for a
tensor, found by duck typing so torch is never imported here), containers count a header and a
pointer per item plus their items, and an object seen twice inside one value is counted once.
A value mutated after ``put`` keeps the size it had then.

Only the standard library is imported; nothing runs at import time.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections import OrderedDict
from typing import Any, Callable, Hashable

INT_BYTES = 28  # CPython's small int (sys.getsizeof(1))
FLOAT_BYTES = 24
CONTAINER_BYTES = 56  # header of a tuple/list/dict/set/object
POINTER_BYTES = 8  # one slot per item (dicts: per key and per value)


def estimate_bytes(obj: Any) -> int:
    """Approximate bytes held by ``obj`` and everything it contains (each object once)."""
    return _estimate(obj, set())


def _estimate(obj: Any, seen: set[int]) -> int:
    if obj is None or isinstance(obj, bool):
        return POINTER_BYTES  # shared singletons: only the reference costs
    if isinstance(obj, int):
        return INT_BYTES
    if isinstance(obj, float):
        return FLOAT_BYTES
    if isinstance(obj, (str, bytes, bytearray)):
        return len(obj)
    if isinstance(obj, memoryview):
        return obj.nbytes
    if id(obj) in seen:
        return POINTER_BYTES
    seen.add(id(obj))
    payload = _buffer_bytes(obj)
    if payload is not None:
        return payload
    if isinstance(obj, dict):
        return (CONTAINER_BYTES + 2 * POINTER_BYTES * len(obj)
                + sum(_estimate(k, seen) + _estimate(v, seen) for k, v in obj.items()))
    if isinstance(obj, (tuple, list, set, frozenset)):
        return CONTAINER_BYTES + POINTER_BYTES * len(obj) + sum(_estimate(x, seen) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _estimate(tuple(getattr(obj, f.name) for f in dataclasses.fields(obj)), seen)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return CONTAINER_BYTES + _estimate(vars(obj), seen)
    return sys.getsizeof(obj)


def _buffer_bytes(obj: Any) -> int | None:
    """Bytes of an array or tensor by duck typing (numpy ``nbytes``, torch ``numel``), else None."""
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and not isinstance(nbytes, bool):
        return nbytes
    element_size, numel = getattr(obj, "element_size", None), getattr(obj, "numel", None)
    if callable(element_size) and callable(numel):
        return int(element_size()) * int(numel())
    return None


class ByteLRU:
    """Least-recently-used cache whose keys plus values stay within ``max_bytes`` (estimated).

    ``get`` counts a hit or a miss and makes the entry the most recent; ``put`` evicts from the
    least recent end until the total fits. A single entry larger than ``max_bytes`` is not stored
    (it would evict everything and then not fit); it is counted in ``stats["too_large"]``, and an
    older value under the same key is dropped too, so ``get`` never returns a superseded value."""

    def __init__(self, max_bytes: int, size_of: Callable[[Any], int] | None = None) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"ByteLRU(max_bytes={max_bytes!r}): give a positive number of bytes, "
                             "e.g. 256 * 2**20 for 256 MiB")
        self.max_bytes = max_bytes
        self.size_of = size_of or estimate_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self.reset_counters()

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            self._misses += 1
            return default
        self._hits += 1
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: Any) -> bool:
        """Store ``value`` as the most recent entry; False when it alone exceeds ``max_bytes``."""
        size = self._size(key) + self._size(value)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.max_bytes:
            self._too_large += 1
            return False
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:  # stops before the new entry: it fits on its own
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted
            self._evictions += 1
        return True

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses) since the last ``reset_counters``; 0.0 before any ``get``."""
        lookups = self._hits + self._misses
        return self._hits / lookups if lookups else 0.0

    @property
    def stats(self) -> dict[str, int]:
        return {"hits": self._hits, "misses": self._misses, "evictions": self._evictions,
                "too_large": self._too_large, "entries": len(self._entries), "bytes": self._bytes}

    def reset_counters(self) -> None:
        """Zero hits, misses, evictions and too_large (e.g. per round); entries stay."""
        self._hits = self._misses = self._evictions = self._too_large = 0

    def _size(self, obj: Any) -> int:
        size = self.size_of(obj)
        try:
            size = operator.index(size)  # int, numpy integer; not a float
        except TypeError:
            size = -1
        if size < 0:
            raise ValueError(f"size_of({type(obj).__name__}) returned {self.size_of(obj)!r}: it "
                             "must return a non-negative integer number of bytes")
        return size
