"""LoRA adapters (through peft), the reference policy as the same weights with adapters off, and selective
gradient checkpointing of decoder layers.

- LoRA (Hu et al., 2021): each targeted projection W (out x in) becomes W x + (alpha / r) B A x, A (r x in),
  B (out x r), B = 0 at the start; only A and B are trained, so r (in + out) parameters per projection.
- The reference pi_ref is the frozen base: `with model.disable_adapter():` runs W x alone. No second copy of the
  weights exists; its log-probs equal the base model's exactly however far the adapters have moved.
- Selective checkpointing: the chosen decoder layers' `forward` is replaced on the instance by one that runs the
  layer inside torch.utils.checkpoint (non-reentrant) whenever gradients are on, so the layer keeps only its input
  for backward and recomputes the rest. This is our own wrapper rather than transformers'
  `gradient_checkpointing_enable`: that switch is all-or-nothing in 4.45 (5.x adds per-layer flags and an
  every-n-layers option, not an arbitrary list), and ours behaves the same on every version from 4.45.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from trmkit.config import ConfigError
from trmkit.rl.lm.logprobs import response_logprobs

ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA of the policy's projections."""

    rank: int = 16  # r: the adapters' width; r (in + out) trained parameters per targeted projection
    alpha: float = 32.0  # the adapter's output is scaled by alpha / r
    dropout: float = 0.0  # dropout on the adapter's input (0: the update is deterministic)
    targets: tuple[str, ...] = ALL_PROJECTIONS  # names of the linear layers that get adapters (attention and MLP)

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ConfigError(f"rl.lora.rank: {self.rank} must be >= 1 (e.g. 16)")
        if not self.targets:
            raise ConfigError(f"rl.lora.targets: empty; name projections such as {', '.join(ALL_PROJECTIONS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"rl.lora.dropout: {self.dropout} must be in [0, 1)")


def linear_names(model: Any) -> set[str]:
    """The last name component of every nn.Linear in the model (q_proj, ..., lm_head)."""
    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def check_targets(model: Any, targets: Sequence[str]) -> None:
    """A ConfigError for a target the model has no linear layer of, naming the closest it has."""
    known = linear_names(model)
    for target in targets:
        if target not in known:
            close = difflib.get_close_matches(target, sorted(known), n=1, cutoff=0.0)
            raise ConfigError(f"rl.lora.targets: the model has no linear layer {target!r}"
                              + (f"; did you mean {close[0]!r}?" if close else "")
                              + f" (it has: {', '.join(sorted(known))})")


def apply_lora(model: Any, settings: LoraSettings) -> Any:
    """The model with LoRA adapters (a peft PeftModel); the base weights are frozen, the adapters trainable."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, settings.targets)
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=list(settings.targets), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def lora_param_count(model: Any, settings: LoraSettings) -> int:
    """What LoRA trains: r (in + out) for every targeted nn.Linear of the (unwrapped) model."""
    total = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in settings.targets:
            total += settings.rank * (module.in_features + module.out_features)
    return total


def trainable_params(model: Any) -> list[torch.nn.Parameter]:
    """The parameters an optimizer updates (the adapters under LoRA, everything in a full fine-tune)."""
    return [p for p in model.parameters() if p.requires_grad]


def reference_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                       chunk_tokens: int = 1024, temperature: float = 1.0) -> torch.Tensor:
    """log pi_ref of the response tokens: the same weights with adapters off, no gradients: (B, P + R) -> (B, R)."""
    with model.disable_adapter(), torch.no_grad():
        return response_logprobs(model, input_ids, attention_mask, prompt_len, chunk_tokens, use_checkpoint=False,
                                 temperature=temperature)


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    """The model's decoder layers (Qwen2, Llama and their peft wrappers)."""
    return model.get_decoder().layers


def _checkpointed(forward: Any) -> Any:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return forward(*args, **kwargs)
    run.trmkit_checkpointed = True
    return run


def checkpoint_layers(model: Any, layers: Sequence[int], key: str = "rl.checkpoint_layers") -> list[int]:
    """Run the listed decoder layers (0-based) under gradient checkpointing; returns the sorted indices.

    `checkpoint_layers(model, range(24))` checkpoints every layer of Qwen2.5-0.5B. Calling it again adds layers."""
    stack = decoder_layers(model)
    chosen = sorted(set(int(i) for i in layers))
    bad = [i for i in chosen if not 0 <= i < len(stack)]
    if bad:
        raise ConfigError(f"{key}: layer {bad[0]} is out of range; the model has {len(stack)} decoder layers "
                          f"(0-{len(stack) - 1})")
    for i in chosen:
        layer = stack[i]
        if not getattr(layer.forward, "trmkit_checkpointed", False):
            layer.forward = _checkpointed(layer.forward)
    return chosen


def uncheckpoint_layers(model: Any) -> None:
    """Undo `checkpoint_layers` on every layer (the class's forward runs again)."""
    for layer in decoder_layers(model):
        if "forward" in vars(layer):
            del layer.forward


def checkpointed_layers(model: Any) -> list[int]:
    """Indices of the decoder layers now under checkpointing."""
    return [i for i, layer in enumerate(decoder_layers(model))
            if getattr(layer.forward, "trmkit_checkpointed", False)]
