"""`train.init_from=RUN`: a new run starts from another run's weights (e.g. self-supervised pretraining).

The finished run's evaluation weights (RUN/weights.safetensors: the EMA when it was on) are copied
into every parameter and buffer of this model with the same name and shape; the rest keep their
fresh initialisation, and both lists are printed. The e-mail classifier starts so from a masked-token
pretraining run (email/pretrain.py): the token embeddings (the bag's ids too), the shared network
and the halting head are read; the pretraining's token head is not, and the class head and the
fitted bag model start as they would without it. Only the weights are read: the optimizer, the
schedule and the step count are this run's own. A resumed run reads its checkpoint instead.

Refused, with the reason: a run that did not finish; a run trained on a store with another
vocabulary (its ids would mean other tokens: data_meta.json's vocabulary is compared); a run with
nothing of the network to give (another model's sizes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from trmkit import rundir
from trmkit.config import ConfigError

Log = Callable[[str], None]
NETWORK = "net."  # the shared network's tensors: at least one of them must be read


def init_from(model: torch.nn.Module, ema, source: str, vocab: list[str], log: Log) -> None:
    """Copy `source`'s matching tensors into `model` (and into the EMA's shadow, which starts from them)."""
    run = Path(source)
    weights = rundir.weights_file(run)
    if not weights.is_file():
        raise ConfigError(f"train.init_from={source}: {weights} not found; let that run finish first "
                          "(`trmkit train --resume` it), or name a finished run")
    check_vocabulary(run, vocab, source)
    tensors = rundir.read_weights(weights)
    own = model.state_dict()
    taken = [k for k, v in tensors.items() if k in own and own[k].shape == v.shape]
    if not any(k.startswith(NETWORK) for k in taken):
        raise ConfigError(f"train.init_from={source}: none of its network's weights fit this model "
                          f"(model sizes differ: {_shapes(tensors, own)}); pretrain with this run's model sizes")
    with torch.no_grad():
        for k in taken:
            own[k].copy_(tensors[k].to(own[k].dtype))
        if ema is not None:
            for name, p in model.named_parameters():
                ema.shadow[name].copy_(p.detach().float())
    fresh = sorted(k for k in own if k not in taken)
    unused = sorted(k for k in tensors if k not in taken)
    log(f"init: train.init_from={source} -> {len(taken)} of this model's {len(own)} tensors from {weights} "
        f"({sum(tensors[k].numel() for k in taken):,} values); left at their start: {', '.join(fresh) or 'none'}; "
        f"not used: {', '.join(unused) or 'none'}")


def check_vocabulary(run: Path, vocab: list[str], source: str) -> None:
    try:
        theirs = json.loads(rundir.path(run, rundir.DATA_META).read_text()).get("vocab")
    except (OSError, ValueError):
        raise ConfigError(f"train.init_from={source}: {rundir.path(run, rundir.DATA_META)} is missing or unreadable, "
                          "so its vocabulary cannot be checked against this store's") from None
    if theirs is not None and list(theirs) != list(vocab):
        differ = sum(a != b for a, b in zip(theirs, vocab)) + abs(len(theirs) - len(vocab))
        raise ConfigError(f"train.init_from={source}: trained on a store with another vocabulary ({len(theirs)} "
                          f"ids against this store's {len(vocab)}, {differ} differ), so its ids mean other tokens; "
                          "pretrain on a store built from this one (`trmkit email pretrain STORE`)")


def _shapes(tensors: dict, own: dict) -> str:
    both = [k for k in tensors if k in own and k.startswith(NETWORK)][:2]
    return "; ".join(f"{k} {tuple(tensors[k].shape)} here {tuple(own[k].shape)}" for k in both) or "no common names"
