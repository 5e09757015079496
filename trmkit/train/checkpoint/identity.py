"""What a loaded checkpoint is (`LoadedCheckpoint`), and its config: its hash, and how it is
compared with the config of a run that resumes it.

`config_hash` is a stable short hash of the sorted-keys JSON (stored in meta.json);
`check_config` refuses to resume when the configs differ outside the keys a resume may change,
naming every differing dotted key; `with_new_defaults` lets a checkpoint written before a
config key existed (in a generic section or an application's) or before it moved to another section
match a config that holds that key at its default, or under its current name. `canonical_json`
(sorted keys, no spaces) is also what meta.json's own SHA-256 is computed over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trmkit.config import GENERIC_SECTIONS
from trmkit.names import with_current_keys
from trmkit.train.checkpoint.errors import CheckpointError



@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint: its tensors (on CPU), metadata, directory and step."""

    path: Path
    step: int
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]

    @property
    def config(self) -> dict[str, Any] | None:
        return self.meta.get("config")

    @property
    def metrics(self) -> dict[str, Any]:
        return self.meta.get("metrics") or {}


def _json_default(obj: Any) -> Any:
    """Turn NumPy scalars/arrays and paths into JSON values; refuse anything else."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"value of type {type(obj).__name__} is not JSON-serializable: {obj!r}")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def normalize(obj: Any) -> Any:
    """What the object looks like after a JSON round trip (tuples -> lists, ...)."""
    return json.loads(canonical_json(obj))


def config_hash(config: Mapping[str, Any], length: int = 12) -> str:
    """Stable short hash of a config: SHA-256 of its sorted-keys JSON."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:length]


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _is_ignored(key: str, ignore: Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in ignore)


def diff_configs(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    ignore: Iterable[str] = (),
    labels: tuple[str, str] = ("checkpoint", "config"),
) -> list[str]:
    """Differences between two nested configs, one line per dotted key.

    ``ignore`` holds top-level keys or dotted prefixes ("run", "train.max_steps").
    Lines read "model.hidden_size: checkpoint 512, config 256".
    """
    ignore = tuple(ignore)
    flat_a, flat_b = _flatten(normalize(a)), _flatten(normalize(b))
    missing = object()
    lines = []
    for key in sorted(set(flat_a) | set(flat_b)):
        if _is_ignored(key, ignore):
            continue
        va, vb = flat_a.get(key, missing), flat_b.get(key, missing)
        if va is missing or vb is missing or va != vb or type(va) is not type(vb):
            show_a = "<missing>" if va is missing else json.dumps(va)
            show_b = "<missing>" if vb is missing else json.dumps(vb)
            lines.append(f"{key}: {labels[0]} {show_a}, {labels[1]} {show_b}")
    return lines


def check_config(
    ckpt: LoadedCheckpoint, expected_config: Mapping[str, Any], ignore: Iterable[str] = (),
    sections: Mapping[str, type] | None = None,
) -> None:
    """Raise CheckpointError naming every differing dotted key that is not ignored. sections: the
    application sections' classes the expected config holds (`config.section_types`), for their defaults."""
    stored = ckpt.config
    if not isinstance(stored, Mapping):
        raise CheckpointError(f"{ckpt.path}: checkpoint has no stored config to compare with")
    diffs = diff_configs(with_new_defaults(stored, expected_config, sections), expected_config, ignore=ignore)
    if diffs:
        raise CheckpointError(
            f"config differs from checkpoint {ckpt.path}:\n  " + "\n  ".join(diffs)
            + "\nResume with the checkpoint's config, or start a new run directory.")


def with_new_defaults(stored: Mapping[str, Any], expected: Mapping[str, Any],
                      sections: Mapping[str, type] | None = None) -> dict[str, Any]:
    """A checkpoint's config as the current code spells it: keys that moved to another section under their
    current names (`names.with_current_keys`: data.hardness -> maze.hardness), and the keys added since it
    was written, in the generic sections and in `sections` (an application's: name -> dataclass), where the
    expected config holds them at their defaults (e.g. model.puzzle_emb_dim: 0 behaves as before the key
    existed). A whole section missing from the checkpoint is filled the same way, key by key."""
    out = with_current_keys(stored)
    for name, cls in {**GENERIC_SECTIONS, **(sections or {})}.items():
        theirs, ours = expected.get(name), out.get(name, {})
        if not isinstance(theirs, Mapping) or not isinstance(ours, dict):
            continue
        for key, value in dataclasses.asdict(cls()).items():
            if key not in ours and theirs.get(key, object()) == value:
                ours[key] = value
        if ours:
            out[name] = ours
    return out
