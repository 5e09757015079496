"""The new source's problems: the inputs of a store, never its labels, split into an adapt and a held-out part.

A store built by `trmkit data TASK` from the new source may hold labels (a collection that ships its
solutions, or placeholders); `trmkit adapt` must learn without them, so this module opens only meta.json,
inputs.npy and the index arrays of each split, and never the labels array (tests/adapt scramble it). One
problem per group: the group's first example, the puzzle as the source gave it (its augmentations are
the builder's, not new problems).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trmkit.config import ConfigError
from trmkit.data.store import META_FILE, StoreMeta, read_meta

SPLITS = ("train", "val", "test")  # the splits a store may hold, read in this order
READ = ("inputs", "puzzle_identifiers", "puzzle_indices", "group_indices")  # never "labels"


@dataclass(frozen=True)
class Problems:
    """The new source's problems, in a fixed order: their inputs, puzzle ids and where each came from."""

    meta: StoreMeta  # the first split's meta.json (vocabulary, shapes, task)
    inputs: np.ndarray  # (P, L) token ids
    puzzle_ids: np.ndarray  # (P,) int64
    where: tuple[str, ...]  # "train/ example 12" per problem, for messages
    fingerprints: dict[str, str]  # split -> meta.json's fingerprint (a resumed adaptation checks it)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


def read_problems(root: str | Path) -> Problems:
    """Every split's problems of the store at root (one per group), inputs only."""
    root = Path(root)
    found = [name for name in SPLITS if (root / name / META_FILE).is_file()]
    if not found:
        raise ConfigError(f"--data {root}: no store there (no train/, val/ or test/ with {META_FILE}); build one "
                          "from the new source with `trmkit data TASK ... --out DIR`")
    metas = {name: read_meta(root / name / META_FILE) for name in found}
    inputs, pids, where = [], [], []
    for name in found:
        arrays = {key: np.load(root / name / f"{key}.npy", mmap_mode="r", allow_pickle=False) for key in READ}
        first_puzzle = np.asarray(arrays["group_indices"][:-1], dtype=np.int64)  # (G,)
        rows = np.asarray(arrays["puzzle_indices"], dtype=np.int64)[first_puzzle]  # (G,) first example of each
        inputs.append(np.asarray(arrays["inputs"][rows], dtype=np.int64))
        pids.append(np.asarray(arrays["puzzle_identifiers"], dtype=np.int64)[first_puzzle])
        where += [f"{name}/ example {int(r)}" for r in rows]
    meta = metas[found[0]]
    if any(m.vocab != meta.vocab or m.seq_len != meta.seq_len for m in metas.values()):
        raise ConfigError(f"--data {root}: its splits differ in vocabulary or sequence length; rebuild the store")
    return Problems(meta=meta, inputs=np.concatenate(inputs), puzzle_ids=np.concatenate(pids), where=tuple(where),
                    fingerprints={name: m.fingerprint for name, m in metas.items()})


def split_problems(n: int, heldout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(adapt indices, held-out indices) of n problems: a seeded permutation, its first round(n * heldout)
    held out; both sorted. At least one problem is left to adapt on."""
    order = np.random.default_rng([seed, n]).permutation(n)
    k = min(n - 1, int(round(n * heldout)))
    return np.sort(order[k:]), np.sort(order[:k])


def check_fits(problems: Problems, vocab: list[str], seq_len: int, num_puzzle_ids: int, source: str) -> None:
    """The new source must speak the run's vocabulary at its sequence length (one batch holds both kinds of
    sample); else a clear error naming the store and the fix."""
    meta = problems.meta
    if list(meta.vocab) != list(vocab):
        raise ConfigError(f"--data {source}: a {meta.task} store with another vocabulary than the run's "
                          f"({len(meta.vocab)} tokens against {len(vocab)}): build it with the run's task and settings")
    if meta.seq_len != seq_len:
        raise ConfigError(f"--data {source}: sequences of {meta.seq_len} tokens, the run's are {seq_len}: adapt "
                          "mixes both in one batch, so the new source must have the run's size (another grid size: "
                          "not supported yet, docs/adapt.md Limits)")
    if int(problems.puzzle_ids.max(initial=0)) >= num_puzzle_ids:
        raise ConfigError(f"--data {source}: puzzle ids up to {int(problems.puzzle_ids.max())}, the run learned "
                          f"{num_puzzle_ids} puzzle embeddings: build the store as the run's was")
