"""Model keys and weights under their former names: what was written before a rename still loads.

Every reader of configs, runs, bundles, checkpoints and stores passes names through `current_name(s)`.
"""

from __future__ import annotations

from typing import Any

# Model keys under former names (from before the e-mail bag model left the model's names): old prefix -> new,
# for config keys, weights (bag_head.weight -> pooled_head.weight) and meta.json.
RENAMED = {"bag_positions": "pooled_positions", "bag_head": "pooled_head", "bag_linear": "input_linear"}


def current_name(name: str) -> str:
    """A model key, weight or meta.json name under its current name: 'bag_linear_c' -> 'input_linear_c',
    'bag_head.weight' -> 'pooled_head.weight'; any other name as it is."""
    for old, new in RENAMED.items():
        if name == old or name.startswith((old + "_", old + ".")):
            return new + name[len(old):]
    return name


def current_names(values: dict[str, Any]) -> dict[str, Any]:
    """A mapping with its keys under their current names (`current_name`)."""
    return {current_name(k): v for k, v in values.items()}
