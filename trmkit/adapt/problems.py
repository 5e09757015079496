"""The new source's problems: the inputs of a store, never its labels, split into an adapt and a held-out part.

A store built by `trmkit data TASK` from the new source may hold labels (a collection that ships its
solutions, or a copy of the inputs where the source has none: `trmkit data pairs` needs an output on every
line); `trmkit adapt` must learn without them, so this module opens only meta.json,
inputs.npy and the index arrays of each split, and never the labels array (tests/adapt scramble it). One
problem per group: the group's first example, the puzzle as the source gave it (its augmentations are
the builder's, not new problems).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trmkit.config import ConfigError, ModelConfig
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


def splits_of(root: str | Path) -> list[str]:
    """The splits the store at root holds (those with a meta.json), in SPLITS' order."""
    return [name for name in SPLITS if (Path(root) / name / META_FILE).is_file()]


def first_meta(root: str | Path) -> StoreMeta | None:
    """The meta.json of the store's first split (vocabulary, blank, padding), None where it holds none."""
    found = splits_of(root)
    return read_meta(Path(root) / found[0] / META_FILE) if found else None


def read_problems(root: str | Path) -> Problems:
    """Every split's problems of the store at root (one per group), inputs only."""
    root = Path(root)
    found = splits_of(root)
    if not found:
        raise ConfigError(f"--data {root}: no store there (no train/, val/ or test/ with {META_FILE}); build one "
                          "from the new source with `trmkit data TASK ... --out DIR`")
    metas = {name: read_meta(root / name / META_FILE) for name in found}
    inputs, pids, where = [], [], []
    for name in found:
        arrays = {key: np.load(root / name / f"{key}.npy", mmap_mode="r", allow_pickle=False) for key in READ}
        x, pid, rows = first_of_groups(arrays["inputs"], arrays["puzzle_identifiers"], arrays["puzzle_indices"],
                                       arrays["group_indices"])
        inputs.append(x)
        pids.append(pid)
        where += [f"{name}/ example {int(r)}" for r in rows]
    meta = metas[found[0]]
    if any(m.vocab != meta.vocab or m.seq_len != meta.seq_len for m in metas.values()):
        raise ConfigError(f"--data {root}: its splits differ in vocabulary or sequence length; rebuild the store")
    return Problems(meta=meta, inputs=np.concatenate(inputs), puzzle_ids=np.concatenate(pids), where=tuple(where),
                    fingerprints={name: m.fingerprint for name, m in metas.items()})


def first_of_groups(inputs: np.ndarray, puzzle_identifiers: np.ndarray, puzzle_indices: np.ndarray,
                    group_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs (G, L), puzzle ids (G,), rows (G,)) of each group's first example: one problem per group (its
    augmented copies left out), as a split's arrays hold them."""
    first_puzzle = np.asarray(group_indices[:-1], dtype=np.int64)  # (G,)
    rows = np.asarray(puzzle_indices, dtype=np.int64)[first_puzzle]  # (G,) first example of each
    return (np.asarray(inputs[rows], dtype=np.int64), np.asarray(puzzle_identifiers, dtype=np.int64)[first_puzzle],
            rows)


def split_problems(n: int, heldout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(adapt indices, held-out indices) of n problems: a seeded permutation, its first round(n * heldout)
    held out; both sorted. At least one problem is left to adapt on."""
    order = np.random.default_rng([seed, n]).permutation(n)
    k = min(n - 1, int(round(n * heldout)))
    return np.sort(order[k:]), np.sort(order[:k])


def check_fits(problems: Problems, vocab: list[str], num_puzzle_ids: int, source: str) -> None:
    """The new source must speak the run's vocabulary (one batch holds both kinds of sample, and the model's
    embeddings are the run's); its sequence length is size_change's. Else a clear error naming the store."""
    meta = problems.meta
    if list(meta.vocab) != list(vocab):
        raise ConfigError(f"--data {source}: a {meta.task} store with another vocabulary than the run's "
                          f"({len(meta.vocab)} tokens against {len(vocab)}): build it with the run's task and settings"
                          + (" (pairs: the same --symbols, e.g. --symbols 0-6 for both)" if meta.task == "pairs"
                             else ""))
    if int(problems.puzzle_ids.max(initial=0)) >= num_puzzle_ids:
        raise ConfigError(f"--data {source}: puzzle ids up to {int(problems.puzzle_ids.max())}, the run learned "
                          f"{num_puzzle_ids} puzzle embeddings: build the store as the run's was")


def size_change(problems: Problems, model: ModelConfig, stream: str, source: str) -> StoreMeta | None:
    """None when the new source has the run's sequence length; its meta when its grid is larger and the run
    can train on it: a conv model (no positions) whose replayed samples come from the task's generator, which
    places the run's own mazes in the larger grid (adapt/stream.py). Anything else is refused by name."""
    meta = problems.meta
    if meta.seq_len == model.seq_len:
        return None
    size = (f"--data {source}: sequences of {meta.seq_len} tokens, the run's are {model.seq_len}; one batch holds "
            "replayed and adapted samples, so they must have one length")
    if model.mixer != "conv":
        raise ConfigError(f"{size}, and this run's model (mixer={model.mixer}) has learned positions for its "
                          f"{model.seq_len}: only a conv model (no positions) adapts to another size. Build the new "
                          "source at the run's size" + (" (pairs: train on a canvas as large as the new source's, "
                                                        "`trmkit data pairs --canvas RxC --symbols LIST`)"
                                                        if meta.task == "pairs" else ""))
    if stream != "generate":
        raise ConfigError(f"{size}: a conv model could read it, but the run's replayed samples come from its store "
                          f"(data.stream={stream}) at {model.seq_len} tokens; adapting to another grid needs a run "
                          "that generates its samples (data.stream=generate: mazes), whose mazes are replayed in "
                          "the new grid")
    grid = tuple(meta.grid_shape or ())
    if len(grid) != 2 or grid[0] < model.grid_height or grid[1] < model.grid_width:
        raise ConfigError(f"{size}: its grid {' x '.join(map(str, grid)) or '(none)'} must hold the run's "
                          f"{model.grid_height} x {model.grid_width}: adapt to a larger grid, or build the new "
                          "source at the run's size")
    return meta
