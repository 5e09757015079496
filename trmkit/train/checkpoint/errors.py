"""What can go wrong with checkpoints: one could not be written, none could be loaded, or one is damaged."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or none could be loaded."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint directory is missing files, truncated or damaged."""
