"""What a run records about the store it trains on, and the check that the store has not changed since.

RUN_DIR/data_meta.json (`data_identity`) holds the training store's task, vocabulary and shape, which
every store the run reads must share (train/session.py `check_data_matches`), and each split's
fingerprint and size as the store's meta.json records them (data/store.py). Resuming a run, and
evaluating or predicting on the store it trained on (the same path), compare those with the store's
meta.json now (`check_store_unchanged`): a store rebuilt with other settings is refused, naming the
split that changed; a run or a store from before fingerprints gets a warning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.data.store import Split, store_changes, store_fingerprints

Log = Callable[[str], None]


def data_identity(split: Split) -> dict:
    """What a store must share with the run's training store for the model to read it, and what the
    store held (RUN_DIR/data_meta.json: the training store's task, vocabulary and shape, and each
    split's fingerprint and size, kept with the run)."""
    m = split.meta
    return {"task": m.task, "vocab": list(m.vocab), "seq_len": m.seq_len,
            "num_puzzle_identifiers": m.num_puzzle_identifiers, "path": str(split.path.parent),
            "splits": store_fingerprints(split.path.parent)}


def recorded_identity(run_dir: str | Path) -> dict:
    """RUN_DIR/data_meta.json ({} for a run from before it, or an unreadable one)."""
    try:
        saved = json.loads(rundir.path(run_dir, rundir.DATA_META).read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def check_store_unchanged(root: Path, run_dir: Path, saved: dict, log: Log, fix: str) -> None:
    """The store must hold what the run recorded when it trained on it (data_meta.json "splits"): a store
    rebuilt with other settings is refused, naming each split that changed. Compares the fingerprints
    that meta.json records (nothing is rehashed); a run or store from before fingerprints gets a warning."""
    current = store_fingerprints(root)
    recorded = saved.get("splits")
    if recorded is None:
        log(f"warning: run {run_dir} records no fingerprint of its store (trained before trmkit kept them): "
            f"whether {root} changed since is not checked")
        return
    warn_if_unfingerprinted(root, current, log)
    changes = store_changes(recorded, current)
    if changes:
        raise ConfigError(f"{root}: the store changed since run {run_dir} trained on it: {'; '.join(changes)}. "
                          "Rebuild the store as it was (the same `trmkit data` command and --seed), or " + fix)


def same_path(a: str | Path, b: str | Path) -> bool:
    return bool(str(a)) and bool(str(b)) and Path(a).resolve() == Path(b).resolve()


def warn_if_unfingerprinted(root: Path, current: dict | None, log: Log) -> None:
    """One line when the store was built before stores carried fingerprints (`current`: its
    store_fingerprints, read here when None)."""
    current = store_fingerprints(root) if current is None else current
    old = sorted(name for name, info in current.items() if not info["fingerprint"])
    if old:
        log(f"warning: {root} was built before stores carried fingerprints (split {', '.join(old)}): a rebuild "
            "is detected only by its counts; rebuild it with `trmkit data ... --force` to have it checked")
