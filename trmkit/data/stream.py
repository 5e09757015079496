"""Reading samples from an opened store split: the resumable training stream and evaluation batches.

Sampling follows the TRM reference: each epoch visits every group once in a
shuffled order and draws one random augmentation (puzzle) of that group and
one random example of that puzzle. Unlike the reference, an epoch never
drops a partial batch: :meth:`SampleStream.take` crosses epoch boundaries,
so every group is seen exactly once per epoch and the stream can be resumed
mid-epoch from ``state_dict()``.

Only the rows a batch returns are read from the memory-mapped arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from trmkit.data.store import REBUILD_HINT, Split, StoreError


@dataclass(frozen=True)
class Batch:
    """A batch of samples in their stored (small) dtypes."""

    inputs: np.ndarray  # (B, L)
    labels: np.ndarray  # (B, L)
    puzzle_ids: np.ndarray  # (B,)
    rows: np.ndarray | None = None  # (B,) example rows in the split (evaluation batches)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


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
            raise StoreError(f"{split.path}: split has no groups to sample from; {REBUILD_HINT}")
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
