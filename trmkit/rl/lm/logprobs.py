"""Per-token log-probabilities of response tokens, and the KL term to a reference, without whole-batch logits.

A round scores sequences laid out as rollouts make them: a left-padded prompt of P columns, then R response
columns (B, P + R). For response token y_t at column P + t:

    log pi(y_t | x, y_<t) = z_{P+t-1}[y_t] - logsumexp(z_{P+t-1}),   z = lm_head(h)   # h: (B, P + R, D)

The model's body runs once to hidden states h; the lm_head and the softmax then run over chunks of
`chunk_tokens` response tokens (rows and positions flattened), each chunk's logits in float32 (chunk x vocab x 4
bytes; Qwen's vocabulary is 151,936). With `checkpoint`, each chunk is a torch.utils.checkpoint region: backward
recomputes one chunk's logits at a time instead of keeping all of them.

Departures from a plain `model(...).logits.log_softmax(-1)`:
- the matrix product of the lm_head runs in the weights' dtype and its output is cast to float32 before the
  softmax (as TRL and veRL do): casting a bfloat16 lm_head to float32 would copy vocab x D weights per call;
- position ids follow the attention mask (the first real token of a left-padded row is position 0), as
  `generate` numbers them, so a sequence scores the same whatever padding its batch needed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token: (B, T) -> (B, T), pads at 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def hidden_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The decoder body's last hidden states (after the final norm), no lm_head: (B, T) -> (B, T, D)."""
    out = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids(attention_mask), use_cache=False)
    return out.last_hidden_state


def head_logprobs(head: torch.nn.Module, h: torch.Tensor, targets: torch.Tensor,
                  temperature: float = 1.0) -> torch.Tensor:
    """log softmax(lm_head(h) / temperature)[target] in float32 for one chunk: h (N, D), targets (N,) -> (N,)."""
    z = head(h).float()  # (N, V)
    if temperature != 1.0:
        z = z / temperature
    return z.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)


def chunked_head_logprobs(head: torch.nn.Module, h: torch.Tensor, targets: torch.Tensor, chunk_tokens: int,
                          use_checkpoint: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """`head_logprobs` over chunks of `chunk_tokens` rows: h (N, D), targets (N,) -> (N,)."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, not {chunk_tokens}")
    recompute = use_checkpoint and torch.is_grad_enabled() and h.requires_grad
    pieces = []
    for start in range(0, h.shape[0], chunk_tokens):
        h_c, t_c = h[start:start + chunk_tokens], targets[start:start + chunk_tokens]
        if recompute:
            pieces.append(checkpoint(head_logprobs, head, h_c, t_c, temperature, use_reentrant=False))
        else:
            pieces.append(head_logprobs(head, h_c, t_c, temperature))
    return torch.cat(pieces) if pieces else h.new_zeros(0, dtype=torch.float32)


def response_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                      chunk_tokens: int = 1024, use_checkpoint: bool = True, temperature: float = 1.0) -> torch.Tensor:
    """log pi of each response token, chunked: (B, P + R) -> (B, R) float32; no (B, R, vocab) tensor is built.

    `prompt_len` is P, the column of the first response token (>= 1: the prompt has at least a bos); pi is the
    softmax of logits / `temperature`, the distribution a rollout at that temperature samples from."""
    if not 1 <= prompt_len <= input_ids.shape[1]:
        raise ValueError(f"prompt_len must be in [1, {input_ids.shape[1]}], not {prompt_len}")
    h = hidden_states(model, input_ids, attention_mask)[:, prompt_len - 1:-1]  # (B, R, D)
    targets = input_ids[:, prompt_len:]  # (B, R)
    rows, length = targets.shape
    flat = chunked_head_logprobs(model.get_output_embeddings(), h.reshape(rows * length, -1),
                                 targets.reshape(-1), chunk_tokens, use_checkpoint, temperature)
    return flat.view(rows, length)


def response_logprobs_unchunked(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                prompt_len: int, temperature: float = 1.0) -> torch.Tensor:
    """The same log-probs through the whole (B, T, vocab) float32 logits: the naive path, and the tests' truth."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids(attention_mask), use_cache=False).logits
    logp = F.log_softmax(logits[:, prompt_len - 1:-1].float() / temperature, dim=-1)  # (B, R, V)
    return logp.gather(-1, input_ids[:, prompt_len:, None]).squeeze(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) by the k3 estimator (as GRPO and TR-RPG use), >= 0 elementwise:

        k3 = pi_ref / pi - log(pi_ref / pi) - 1,   log(pi_ref / pi) = ref_logp - logp   # (B, R)"""
    log_ratio = ref_logp.detach() - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the tokens where mask is 1 (a response's tokens up to its eos): (B, R), (B, R) -> ()."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)
