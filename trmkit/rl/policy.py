"""The TRM as a policy over a response: pi(y | prompt) = prod_j p_j(y_j | prompt).

The TRM writes every response position at once (as it fills a Sudoku), so a response is
drawn by sampling each position from its distribution and its log-probability is the sum
of the positions' log-probabilities (pads after the answer included: the policy chose
them too). The logits are the last of N_sup supervision steps run from the initial state,
the earlier steps without gradients, as the trainer's evaluation runs them. Softmax (not
the stable-max of the puzzle loss) defines the policy, so sampling and log-probabilities
are the textbook ones; a rollout temperature (rl.temperature) divides the logits in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trmkit.model.trm import TRM, input_dtype
from trmkit.rl.loss import gather_logprobs


def encode(rows: list[list[int]], vocab_size: int, device) -> torch.Tensor:
    """(N, L) token ids of equal-length rows (one (role, type) group)."""
    return torch.tensor(rows, dtype=input_dtype(vocab_size), device=device)


def response_logits(model: TRM, inputs: torch.Tensor, response_len: int) -> torch.Tensor:
    """(N, R, V) float32 logits of the last `response_len` positions."""
    B, L = inputs.shape
    D = model.cfg.hidden_size
    z_H = model.H_init.expand(B, L, D)
    z_L = model.L_init.expand(B, L, D)
    ids = torch.zeros(B, dtype=torch.int64, device=inputs.device)
    with torch.no_grad():
        for _ in range(model.cfg.halt_max_steps - 1):
            z_H, z_L, _, _ = model(z_H, z_L, inputs, ids)
    _, _, logits, _ = model(z_H, z_L, inputs, ids)
    return logits[:, L - response_len:].float()


def token_logprobs(logits: torch.Tensor, responses: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p_j(y_j) at `temperature`: logits (N, R, V), responses (N, R) -> (N, R), or k samples
    per row, responses (N, k, R) -> (N, k, R), all read from the same logits."""
    return gather_logprobs(F.log_softmax(logits / temperature, dim=-1), responses)


def entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(N,) mean entropy per response position at `temperature`, in nats."""
    logp = F.log_softmax(logits / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean(-1)


@dataclass
class Draw:
    """k responses per prompt from one forward: what the update needs of the sampler (pi_old)."""

    responses: torch.Tensor  # (N, k, R) int64
    token_logp: torch.Tensor  # (N, k, R) log pi_old per position, at the sampling temperature
    greedy: torch.Tensor  # (N, R) the argmax response (no extra forward: the same logits)
    entropy: torch.Tensor  # (N,)


@torch.no_grad()
def draw(model: TRM, inputs: torch.Tensor, response_len: int, k: int, chunk: int, autocast,
         temperature: float = 1.0, generator: torch.Generator | None = None) -> Draw:
    """k samples per prompt at `temperature`, all from one forward of the prompt (chunks of `chunk`
    prompts): k attempts cost one forward, not k (the TRM writes every position at once, so the
    k copies of a prompt would give identical logits). The per-position log-probabilities are
    kept with the rollout: the update divides by them, so no second copy of the model is needed."""
    parts = []
    for start in range(0, inputs.shape[0], max(1, chunk)):
        with autocast():
            logits = response_logits(model, inputs[start:start + chunk], response_len)  # (n, R, V)
        n, R, V = logits.shape
        probs = F.softmax(logits / temperature, dim=-1).reshape(n * R, V)
        resp = torch.multinomial(probs, k, replacement=True, generator=generator)  # (n*R, k)
        resp = resp.view(n, R, k).permute(0, 2, 1).contiguous()  # (n, k, R)
        parts.append(Draw(resp, token_logprobs(logits, resp, temperature), logits.argmax(-1),
                          entropy(logits, temperature)))
    return Draw(*(torch.cat([getattr(p, f) for p in parts]) for f in ("responses", "token_logp", "greedy",
                                                                       "entropy")))


@torch.no_grad()
def sample(model: TRM, inputs: torch.Tensor, response_len: int, chunk: int, autocast,
           greedy: bool = False, generator: torch.Generator | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One response per prompt (the held-out evaluation's greedy one): (responses (N, R) int64,
    log pi (N,), entropy (N,))."""
    outs, logps, ents = [], [], []
    for start in range(0, inputs.shape[0], max(1, chunk)):
        rows = inputs[start:start + chunk]
        with autocast():
            logits = response_logits(model, rows, response_len)
        if greedy:
            resp = logits.argmax(-1)
        else:
            probs = F.softmax(logits, dim=-1)
            resp = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).view(probs.shape[:2])
        outs.append(resp)
        logps.append(token_logprobs(logits, resp).sum(-1))
        ents.append(entropy(logits))
    return torch.cat(outs), torch.cat(logps), torch.cat(ents)
