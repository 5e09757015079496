"""The random states a checkpoint holds: Python's, NumPy's (global/legacy) and torch's CPU generator.

They go in two parts: JSON for meta.json (Python and NumPy) and tensors for the
tensors file (torch's generator states), so that loading never unpickles.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from trmkit.train.checkpoint.errors import CheckpointError

RNG_TORCH_KEY = "rng.torch_cpu"  # tensor key of torch's default CPU generator state


def rng_state(
    generators: Mapping[str, torch.Generator] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Capture Python, NumPy (global/legacy) and torch CPU random states.

    Returns (json_dict, tensors): put json_dict into meta (e.g. meta["rng"]) and
    merge tensors into the checkpoint's tensors. ``generators`` are extra named
    torch generators (e.g. a data sampler's), stored as "rng.torch.<name>".
    """
    py_version, py_state, py_gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": {"version": py_version, "state": list(py_state), "gauss_next": py_gauss},
        "numpy": {
            "bit_generator": name, "key": [int(k) for k in keys], "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached),
        },
        "generators": sorted(generators or {}),
    }
    tensors = {RNG_TORCH_KEY: torch.get_rng_state()}
    for gen_name, gen in (generators or {}).items():
        tensors[f"rng.torch.{gen_name}"] = gen.get_state()
    return state, tensors


def restore_rng(
    state: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    generators: Mapping[str, torch.Generator] | None = None,
) -> None:
    """Restore the states captured by ``rng_state`` (tensors may be the full checkpoint dict)."""
    needed = [RNG_TORCH_KEY] + [f"rng.torch.{n}" for n in (generators or {})]
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise CheckpointError(f"checkpoint has no random state tensor(s) {missing}")
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state((
        npy["bit_generator"], np.asarray(npy["key"], dtype=np.uint32), npy["pos"],
        npy["has_gauss"], npy["cached_gaussian"],
    ))
    torch.set_rng_state(tensors[RNG_TORCH_KEY].to(torch.uint8))
    for gen_name, gen in (generators or {}).items():
        gen.set_state(tensors[f"rng.torch.{gen_name}"].to(torch.uint8))
