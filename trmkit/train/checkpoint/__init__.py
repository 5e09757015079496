"""Crash-safe checkpoints: a flat dict of tensors plus JSON metadata.

Layout inside a run directory (names from trmkit.rundir)::

    RUN_DIR/checkpoints/
        step-00000123/
            tensors.safetensors   every tensor: weights, EMA, optimizer state, RNG bytes, ...
            meta.json             step, metrics, resolved config + hash, versions, times,
                                  Python/NumPy RNG state, SHA-256 of tensors.safetensors
        best.json                 which checkpoint is best by the chosen metric

The package is generic: it never imports the model, data or CLI code. The caller
flattens its state into ``dict[str, Tensor]`` and a JSON-able ``meta`` dict.

    errors.py    CheckpointError, CorruptCheckpointError
    format.py    the streaming safetensors reader and writer
    identity.py  config_hash, and comparing a checkpoint's config with a run's
    rng.py       the random states (Python, NumPy, torch) a checkpoint holds
    store.py     save (temp dir, commit, rotation, best), load and verify, load_latest

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

from trmkit.train.checkpoint.errors import CheckpointError, CorruptCheckpointError
from trmkit.train.checkpoint.identity import check_config, config_hash, diff_configs, with_new_defaults
from trmkit.train.checkpoint.rng import restore_rng, rng_state
from trmkit.train.checkpoint.store import (
    LoadedCheckpoint,
    best_checkpoint,
    checkpoints_dir,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    save_checkpoint,
    step_of,
)

__all__ = [
    "CheckpointError", "CorruptCheckpointError", "LoadedCheckpoint", "best_checkpoint", "check_config",
    "checkpoints_dir", "config_hash", "diff_configs", "list_checkpoints", "load_checkpoint", "load_latest",
    "restore_rng", "rng_state", "save_checkpoint", "step_of", "with_new_defaults",
]
