"""The full training state as flat tensors + JSON, for checkpoints and exact resume.

Saved: model parameters and buffers, EMA shadow weights, the dense optimizer's
per-parameter state, the ACT carry and each slot's current sample, random
states (Python, NumPy, torch), the sample stream's position, the step, and
the resolved config. The sparse sign-SGD optimizer has no state of its own
beyond the puzzle-embedding buffer, which is part of the model.
"""

from __future__ import annotations

from typing import Any

import torch

from trmkit.names import current_name
from trmkit.model.trm import TRM, Carry
from trmkit.train import checkpoint
from trmkit.train.optim import EMA
from trmkit.train.step import Optimizers, TrainState

CARRY_KEYS = ("z_H", "z_L", "steps", "halted")
SLOT_KEYS = ("inputs", "labels", "puzzle_ids")


def _param_names(model: TRM) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


def optimizer_tensors(model: TRM, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    names = _param_names(model)
    out = {}
    for p, st in opt.state.items():
        for key, value in st.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            out[f"opt.{names[id(p)]}.{key}"] = t
    return out


def unpack(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors under `prefix` ("model.", "ema.", "opt."), the prefix dropped and each name
    current (checkpoints written before a rename: config.current_name)."""
    return {current_name(k[len(prefix):]): v for k, v in tensors.items() if k.startswith(prefix)}


def restore_weights(model: TRM, tensors: dict[str, torch.Tensor], ema: EMA | None = None,
                    ema_as_weights: bool = False) -> None:
    """The one loader of a checkpoint's weights: its "model." tensors into the model (with ema_as_weights
    its "ema." ones over them: the weights evaluation uses), and its "ema." tensors into ema's shadow."""
    weights, shadow = unpack(tensors, "model."), unpack(tensors, "ema.")
    model.load_state_dict({**weights, **shadow} if ema_as_weights else weights)
    if ema is not None:
        for k in ema.shadow:
            ema.shadow[k].copy_(shadow[k])


def load_optimizer_tensors(model: TRM, opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    by_name = dict(model.named_parameters())
    for key, value in unpack(tensors, "opt.").items():
        name, _, field = key.rpartition(".")
        p = by_name[name]
        opt.state[p][field] = value.to(p.device) if field != "step" else value.clone()


def collect(model: TRM, opts: Optimizers, state: TrainState, stream) -> tuple[dict, dict]:
    """(tensors, meta) describing everything needed to continue bit-for-bit.

    The tensors are the live ones, not copies (only the 5 KB torch RNG state is
    new): the checkpoint writer streams each from its memory, so a save adds no
    second copy of the state. Save them before the next step changes them.
    """
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    if opts.ema is not None:
        tensors.update({f"ema.{k}": v for k, v in opts.ema.shadow.items()})
    tensors.update(optimizer_tensors(model, opts.dense))
    tensors.update({f"carry.{k}": getattr(state.carry, k) for k in CARRY_KEYS})
    tensors.update({f"slot.{k}": getattr(state, k) for k in SLOT_KEYS})
    rng_json, rng_tensors = checkpoint.rng_state()
    tensors.update(rng_tensors)
    meta: dict[str, Any] = {
        "step": state.step,
        "samples_started": state.samples_started,
        "stream": stream.state_dict(),
        "ema_updates": opts.ema.updates if opts.ema is not None else 0,
        "rng": rng_json,
    }
    return tensors, meta


def restore_shared(model: TRM, opts: Optimizers, state: TrainState, tensors: dict, meta: dict) -> None:
    """What every process of a run shares: weights, EMA, optimizer state, the step."""
    restore_weights(model, tensors, opts.ema)
    if opts.ema is not None:
        opts.ema.updates = int(meta["ema_updates"])
    load_optimizer_tensors(model, opts.dense, tensors)
    state.step = int(meta["step"])


def restore(model: TRM, opts: Optimizers, state: TrainState, stream, tensors: dict, meta: dict) -> None:
    """Inverse of `collect`, in place."""
    device = state.inputs.device
    restore_shared(model, opts, state, tensors, meta)
    state.carry = Carry(**{k: tensors[f"carry.{k}"].to(device) for k in CARRY_KEYS})
    for k in SLOT_KEYS:
        setattr(state, k, tensors[f"slot.{k}"].to(device))
    state.samples_started = int(meta["samples_started"])
    stream.load_state_dict(meta["stream"])
    checkpoint.restore_rng(meta["rng"], tensors)
