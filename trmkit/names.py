"""Config keys and weights under their former names: what was written before a rename or a move still loads.

Every reader of configs, runs, bundles, checkpoints and stores passes names through `current_name(s)`; the
config loader moves keys that left their section (`MOVED`) to the section that owns them now.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

# Model keys under former names: old prefix -> new, for config keys, weights (bag_head.weight ->
# pooled_head.weight) and meta.json. The e-mail bag's positions became the generic part_positions (the input's
# last positions a model part reads instead of the mixer: model/parts.py).
RENAMED = {"bag_positions": "part_positions", "pooled_positions": "part_positions", "bag_head": "pooled_head",
           "bag_linear": "input_linear"}

# Weights that moved into a model part (model/parts.py): former name -> current. The e-mail bag's head and
# frozen linear model are the one part of an e-mail model (trmkit/email/parts.py), so parts.0.
PART_WEIGHTS = {"pooled_head.weight": "parts.0.pooled_head.weight",
                **{f"input_linear_{n}": f"parts.0.linear_{n}"
                   for n in ("weight", "bias", "idf", "use_idf", "fold_weight", "fold_bias")}}

# Config keys that moved to the section of the one task that reads them: former dotted key -> (current dotted
# key, the value every config written before the move holds when the key was left unset: said nothing, dropped).
MOVED: dict[str, tuple[str, Any]] = {
    "data.hardness": ("maze.hardness", 0),  # the maze generator's knobs (trmkit/tasks/maze/config.py)
    "data.easy_share": ("maze.easy_share", 0.5),
    "data.long_share": ("maze.long_share", 0.0),
    # the e-mail bag's model settings (trmkit/email/config.py)
    "model.pooled_head": ("email.pooled_head", False),
    "model.input_linear": ("email.input_linear", False),
    "model.input_linear_c": ("email.input_linear_c", 1.0),
    "model.input_linear_weighting": ("email.input_linear_weighting", "binary"),
    "model.input_linear_folds": ("email.input_linear_folds", 0),
    "model.input_linear_unlabelled": ("email.input_linear_unlabelled", "off"),
}


def current_name(name: str) -> str:
    """A model key, weight or meta.json name under its current name: 'bag_linear_c' -> 'input_linear_c',
    'pooled_positions' -> 'part_positions', 'bag_head.weight' -> 'parts.0.pooled_head.weight',
    'input_linear_weight' -> 'parts.0.linear_weight' (and a weight's optimizer state with it); any other name
    as it is. Every weight loader reads names through it (train/state.py, rundir.read_weights, the e-mail
    bundle, train.init_from)."""
    for old, new in RENAMED.items():
        if name == old or name.startswith((old + "_", old + ".")):
            name = new + name[len(old):]
            break
    for old, new in PART_WEIGHTS.items():  # a weight, or its optimizer state ('pooled_head.weight.exp_avg')
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def current_names(values: dict[str, Any]) -> dict[str, Any]:
    """A mapping with its keys under their current names (`current_name`)."""
    return {current_name(k): v for k, v in values.items()}


def with_current_keys(raw: Mapping[str, Any], where: str = "config",
                      say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A config's sections with the keys that moved (MOVED) under their current names: {"data": {"hardness":
    36}} -> {"data": {}, "maze": {"hardness": 36}}. A former key at the value every config held when it was
    unset is dropped (a run's config.yaml lists every key); `say` gets one line naming the others. Given
    under both names, the current one is kept."""
    out = {name: dict(v) if isinstance(v, Mapping) else v for name, v in raw.items()}
    if isinstance(out.get("model"), dict):  # renamed first, then moved: model.bag_linear -> email.input_linear
        out["model"] = current_names(out["model"])
    used = []
    for old, (new, unset) in MOVED.items():
        (old_section, old_key), (new_section, new_key) = old.split("."), new.split(".")
        values = out.get(old_section)
        if not isinstance(values, dict) or old_key not in values:
            continue
        value = values.pop(old_key)
        if value == unset or not isinstance(out.setdefault(new_section, {}), dict):  # (refused by the loader)
            continue
        out[new_section].setdefault(new_key, value)
        used.append(old)
    if used and say is not None:
        news = ", ".join(MOVED[k][0] for k in used)
        say(f"{where}: {', '.join(used)} {'is' if len(used) == 1 else 'are'} now {news} (the old name still "
            "reads; write the new one)")
    return out
