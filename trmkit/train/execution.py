"""What a checkpoint was trained with beyond its config, read before a resumed run is planned.

The newest checkpoint's meta.json holds `execution` (dtype, micro-batch, gradient checkpointing):
a resumed run keeps its dtype and, where the budget allows, its micro-batch, so that it
continues bit for bit (train/session.py applies them while it prepares the run).
"""

from __future__ import annotations

import json
from typing import Callable

from trmkit import rundir
from trmkit.train import checkpoint

Log = Callable[[str], None]


def saved_meta(run_dir: str) -> dict:
    """meta.json of the run's newest checkpoint ({} for a new run)."""
    paths = checkpoint.list_checkpoints(run_dir)
    if not paths:
        return {}
    try:
        return json.loads((paths[-1] / rundir.CHECKPOINT_META).read_text())
    except (OSError, ValueError):
        return {}  # a damaged newest checkpoint is reported when it is loaded


def resume_dtype(dtype: str, saved: dict, log: Log) -> str:
    """A resumed run keeps the compute dtype it was trained in (else it could not be bitwise)."""
    was = (saved.get("execution") or {}).get("dtype")
    if was and dtype == "auto":
        log(f"resume: dtype={was} (the checkpoint was trained in it; a new measurement could pick "
            "another, and the run would no longer continue bit for bit)")
        return was
    return dtype


def resume_micro_batch(planned: int, saved: dict, log: Log) -> int:
    """The micro-batch the checkpoint was trained at, when this plan allows it (bitwise resume)."""
    was = (saved.get("execution") or {}).get("micro_batch")
    if not was or was == planned:
        return planned
    if was < planned:
        log(f"resume: micro_batch={was} (the checkpoint was trained at it, after the memory guard "
            f"acted; the plan allows {planned}): gradients sum in the same order, bit for bit")
        return int(was)
    log(f"resume: the checkpoint was trained at micro_batch={was}, but this budget allows only "
        f"{planned}: training continues at {planned}, with the same effective batch; gradients sum "
        "in another order, so the run is not bitwise identical to an uninterrupted one")
    return planned
