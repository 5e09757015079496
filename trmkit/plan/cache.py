"""The planner's measurement cache: one JSON file per kind of measurement in the user's cache
directory (`trmkit` passes ~/.cache/trmkit), each a dict of key -> measured values.

A missing or unreadable file is an empty cache; `cache_dir=None` keeps nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trmkit.files import write_json

SPEED_FILE = "speed.json"  # seconds per network call, per machine, torch, shape and dtype (measure.py)
COMPILE_FILE = "compile.json"  # torch.compile's cost and gain, per machine and shape (measure.py)
CALIBRATION_FILE = "memory_calibration.json"  # the memory model's constants, per config (calibrate.py)
PREDICT_DTYPE_FILE = "predict_dtype.json"  # a classifier's inference dtype, per machine and model (email/bundle.py)


def read_cache(cache_dir: str | Path | None, name: str) -> dict[str, Any]:
    if cache_dir is None:
        return {}
    try:
        data = json.loads((Path(cache_dir) / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(cache_dir: str | Path | None, name: str, key: str, value: Any) -> None:
    """Add one entry to a JSON cache file (atomically, through trmkit.files)."""
    if cache_dir is None:
        return
    data = read_cache(cache_dir, name)
    data[key] = value
    write_json(Path(cache_dir) / name, data, indent=2, sort_keys=True)
