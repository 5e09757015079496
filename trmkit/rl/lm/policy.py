"""The causal-LM policy as the trainer's model: `LMPolicy` wraps the (LoRA-adapted) model so that a checkpoint,
the run's weights file and `--init` hold only what is trained, and knows which base it was trained on.

- Checkpoints of an LM policy hold the LoRA adapters (or, for a full fine-tune, every weight) and nothing of the
  frozen base: `state_dict` covers the trainable parameters only, `load_state_dict` refuses other names or shapes
  with a ConfigError naming the base (the weights were written for another model).
- The base's identity: a local folder by its absolute path and the SHA-256 of its config.json and weight files'
  names and sizes; a random shape by its name and the seed its weights were drawn with. The objective records it
  (data_meta.json, each checkpoint's state) and a resume or `--init` from another base is refused by name.
- `memory_plan`: the micro-batch the analytic memory model (memory.py) fits into the run's budget.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.nn.modules.module import _IncompatibleKeys

from trmkit.config import ConfigError
from trmkit.rl.lm import fsdp
from trmkit.rl.lm import load as load_mod
from trmkit.rl.lm import lora as lora_mod
from trmkit.rl.lm import memory
from trmkit.rl.lm.shapes import shape_config

Log = Callable[[str], None]


class LMPolicy(torch.nn.Module):
    """The policy model (`lm`: a transformers causal LM, a peft PeftModel under LoRA) and its tokenizer; its
    state_dict is the trained parameters only."""

    def __init__(self, lm: Any, tokenizer: Any, base: dict, lora: bool):
        super().__init__()
        self.lm, self.tokenizer, self.base, self.lora = lm, tokenizer, dict(base), lora
        self.sharding: Any = None  # rl/lm/fsdp.py Sharding when several processes share the policy (FSDP2)

    def trained(self) -> dict[str, torch.nn.Parameter]:
        return {name: p for name, p in self.named_parameters() if p.requires_grad}

    def state_dict(self, *args: Any, **kwargs: Any) -> OrderedDict:  # noqa: ARG002 (nn.Module's signature)
        """The trained tensors, whole (sharded ones gathered: fsdp.py full_state), under the same names at any
        number of processes."""
        if self.sharding is not None:
            return OrderedDict(self.sharding.full_state(self.trained()))
        return OrderedDict((name, p.detach()) for name, p in self.trained().items())

    def load_state_dict(self, state: dict, strict: bool = True, assign: bool = False) -> _IncompatibleKeys:
        own = self.trained()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        wrong = [n for n in own if n in state and tuple(state[n].shape) != tuple(own[n].shape)]
        if wrong or (strict and (missing or unexpected)):
            raise ConfigError(f"these weights were not written for this policy ({describe(self.base)}, "
                              f"{'LoRA adapters' if self.lora else 'full fine-tune'}): "
                              + (f"shape of {wrong[0]} differs; " if wrong else "")
                              + f"missing {missing[:3]}, unexpected {unexpected[:3]}; train on the base they "
                              "were written for (its rl.model_path / rl.model_shape, rl.lora_rank, rl.lora_targets)")
        with torch.no_grad():
            for name, p in own.items():
                if name in state:
                    p.copy_(fsdp.shard_of(state[name], p))  # whole -> this process's shard (no communication)
        if self.sharding is not None:
            self.sharding.version += 1
        return _IncompatibleKeys(missing, unexpected)

    def num_parameters(self) -> int:
        """Trained parameters (the adapters under LoRA)."""
        return sum(p.numel() for p in self.trained().values())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.lm(*args, **kwargs)


# --------------------------------------------------------------------------- the base


def folder_hash(path: Path) -> str:
    """SHA-256 over config.json's bytes and the weight files' names and sizes (not their gigabytes)."""
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")):
        digest.update(f"{f.name}:{f.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def base_identity(model_path: str, model_shape: str, seed: int) -> dict:
    """What the adapters were trained on: {"model_path", "config_hash"} or {"model_shape", "seed"}."""
    if model_path:
        path = Path(model_path).expanduser().resolve()
        load_mod.check_model_folder(path)
        return {"model_path": str(path), "config_hash": folder_hash(path)}
    shape_config(model_shape)  # an unknown name is a ConfigError naming rl.model_shape
    return {"model_shape": model_shape, "seed": int(seed)}


def describe(base: dict) -> str:
    if "model_path" in base:
        return f"rl.model_path={base['model_path']} (config hash {base.get('config_hash')})"
    return f"rl.model_shape={base.get('model_shape')} (random weights, seed {base.get('seed')})"


def check_base(saved: dict | None, current: dict, what: str) -> None:
    """A ConfigError when `saved` (a checkpoint's or a run's base) is not `current`; `what` names where from."""
    if saved and saved != current:
        raise ConfigError(f"{what} was trained on {describe(saved)}, this run's base is {describe(current)}: "
                          "adapters only fit the base they were trained on; set the same rl.model_path / "
                          "rl.model_shape (and run.seed for a random shape), or start a new run")


def architecture(model_path: str, model_shape: str) -> dict:
    """The architecture dict the memory model reads: the shape's, or the folder's config.json."""
    if not model_path:
        return shape_config(model_shape)
    path = Path(model_path).expanduser()
    load_mod.check_model_folder(path)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config.setdefault("tie_word_embeddings", False)
    config.setdefault("num_key_value_heads", config.get("num_attention_heads"))
    return config


# --------------------------------------------------------------------------- building


def build(base: dict, dtype: str, lora_rank: int, targets: Sequence[str] | None, layers: Callable[[int], list[int]],
          log: Log) -> LMPolicy:
    """The policy: the base loaded (a folder) or drawn (a shape, from its seed), LoRA adapters on `targets`
    (None: every projection) unless lora_rank is 0, and the decoder layers `layers(n)` checkpointed."""
    lm, tokenizer = load_mod.load_policy(model_path=base.get("model_path"), model_shape=base.get("model_shape"),
                                         dtype=dtype, seed=base.get("seed", 0))
    if lora_rank:
        chosen = tuple(targets or [t for t in lora_mod.ALL_PROJECTIONS if t in lora_mod.linear_names(lm)])
        settings = lora_mod.LoraSettings(rank=lora_rank, alpha=2.0 * lora_rank, targets=chosen)
        with torch.random.fork_rng(devices=[]):  # the adapters' init draws from the run's seed, set before
            lm = lora_mod.apply_lora(lm, settings)
    else:
        for p in lm.parameters():
            p.requires_grad_(True)
    ckpt = lora_mod.checkpoint_layers(lm, layers(len(lora_mod.decoder_layers(lm))))
    policy = LMPolicy(lm, tokenizer, base, lora=bool(lora_rank))
    total = sum(p.numel() for p in lm.parameters())
    log(f"model: {describe(base)} in {dtype}, {total:,} parameters; trained: {policy.num_parameters():,} "
        + (f"(LoRA r={lora_rank} on {', '.join(chosen)})" if lora_rank else "(full fine-tune)")
        + f"; gradient checkpointing on {len(ckpt)} of {len(lora_mod.decoder_layers(lm))} decoder layers")
    return policy


def memory_plan(arch: dict, rows: int, prompt: int, response: int, dtype: str, lora_rank: int,
                targets: Sequence[str], checkpointed: int, chunk_tokens: int, budget: int) -> tuple[int, str]:
    """(micro-batch, reason): the largest number of sequences <= rows whose estimated round peak fits budget
    (0 budget: unplanned, all rows); a ConfigError when one sequence does not fit."""
    switches = memory.MemorySwitches(dtype=dtype, lora_rank=lora_rank or None, lora_targets=tuple(targets),
                                     checkpointed_layers=checkpointed, chunk_tokens=chunk_tokens)
    shape = memory.RoundShape(rows, prompt, response)
    if not budget:
        est = memory.estimate(arch, shape, switches)
        return rows, (f"no memory budget on this device: the round's {rows} sequences at once "
                      f"(estimated peak {est.peak / 2**30:.2f} GiB)")
    micro, est, reason = memory.pick_micro_batch(arch, shape, switches, budget)
    if micro == 0:
        raise ConfigError(f"rl.micro_batch: {reason}; lower rl.max_response_tokens / rl.max_prompt_tokens, "
                          "keep rl.lora_rank > 0 and rl.checkpoint_layers=all, or raise run.memory_budget")
    return micro, (f"the most of a step's {rows} sequences whose estimated peak, {est.peak / 2**30:.2f} GiB, fits "
                   f"the budget of {budget / 2**30:.1f} GiB (rl/lm/memory.py)")
