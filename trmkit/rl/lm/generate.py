"""Rollouts: sampling responses from a causal-LM policy with a KV cache, in micro-batches of rows.

Our own loop rather than `model.generate`, so that
- every draw comes from one torch.Generator (a run resumed from its saved generator state samples the same tokens);
- the temperature is applied exactly as the update applies it: softmax(lm_head(h) / T) in float32;
- only the last position's logits are ever built (one (rows, vocab) float32 tensor per step, never (rows, P, vocab)).

Per micro-batch of `micro_batch` rows: the prompts, left-padded to the micro-batch's longest, run once through the
decoder body with `use_cache=True`; then one token per step, each step feeding the new token and the cache back with
positions following the attention mask (`logprobs.position_ids`, as the update numbers them). A row stops at its eos;
the micro-batch stops when every row has (or at `max_new_tokens`).

`old_logp` is then the rescoring of the finished micro-batch by `logprobs.response_logprobs` under no_grad, the same
function the update calls on the same tokens, so the first epoch's ratio pi / pi_old is 1 up to float rounding
(`sampled_logp` keeps the sampler's own log-probs, which agree to ~1e-6 in float32).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from trmkit.rl.lm.logprobs import position_ids, response_logprobs
from trmkit.rl.lm.tokenizer import LMTokenizer, decode_responses


@dataclass
class Rollout:
    """Sampled responses, prompt-major: prompt i's samples are rows i*samples .. i*samples+samples-1."""

    prompt_ids: torch.Tensor  # (N, P) int64, left-padded
    prompt_mask: torch.Tensor  # (N, P) 1 real / 0 pad
    response_ids: torch.Tensor  # (N, R) int64, right-padded
    response_mask: torch.Tensor  # (N, R) bool: generated tokens up to and including eos
    old_logp: torch.Tensor  # (N, R) float32 log pi_old per response token at `temperature`, 0 where masked
    texts: list[str]  # decoded responses, cut at eos
    temperature: float = 1.0  # the sampling temperature; the update scores at the same one
    sampled_logp: torch.Tensor | None = field(default=None, repr=False)  # (N, R) the sampler's own log-probs
    truncated: int = 0  # prompts longer than max_prompt_tokens, cut to their last tokens

    @property
    def rows(self) -> int:
        return int(self.response_ids.shape[0])

    def lengths(self) -> torch.Tensor:
        """Real tokens per row, prompt + response: (N,)."""
        return self.prompt_mask.sum(1) + self.response_mask.sum(1)


def encode_prompts(tokenizer: LMTokenizer, prompts: Sequence[str], max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of each prompt; a prompt longer than `max_prompt_tokens` keeps its bos (if any) and its last
    tokens (the end of a prompt holds the question and the answer format)."""
    return [keep_end(tokenizer, tokenizer.encode(text), max_prompt_tokens) for text in prompts]


def keep_end(tokenizer: LMTokenizer, ids: list[int], max_prompt_tokens: int) -> list[int]:
    """A prompt's ids cut to `max_prompt_tokens`: its bos (if any) and its last tokens."""
    if len(ids) <= max_prompt_tokens:
        return ids
    head = ids[:1] if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id else []
    return head + ids[len(ids) - (max_prompt_tokens - len(head)):]


def left_pad(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), both (B, P) int64, each row right-aligned at column P - 1."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids, mask


def next_token(logits: torch.Tensor, temperature: float, greedy: bool,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A token per row and its log-prob at `temperature`: logits (B, V) -> (B,), (B,) float32."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)
    if greedy:
        token = logp.argmax(-1)
    else:  # drawn where the generator lives (a CPU one keeps its state, and exact resume, on any device)
        probs = logp.exp() if generator is None or generator.device == logp.device else logp.exp().to(generator.device)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(logp.device)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def cache_keyword(body: Any) -> str:
    """The decoder's KV-cache argument: `cache` in transformers 5.x, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"


@torch.no_grad()
def sample_batch(model: Any, ids: torch.Tensor, mask: torch.Tensor, *, max_new_tokens: int, temperature: float,
                 eos: int, pad: int, greedy: bool, generator: torch.Generator | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Responses of one micro-batch with a KV cache: (B, P) -> ids (B, R), mask (B, R) bool, sampler logp (B, R)."""
    body, head = model.get_decoder(), model.get_output_embeddings()
    keyword, rows = cache_keyword(body), ids.shape[0]
    done = torch.zeros(rows, dtype=torch.bool, device=ids.device)
    tokens, keep, logps = [], [], []
    feed, attention, positions, cache = ids, mask, position_ids(mask), None
    for _ in range(max_new_tokens):
        out = body(input_ids=feed, attention_mask=attention, position_ids=positions, use_cache=True,
                   **{keyword: cache})
        cache = out.cache if keyword == "cache" else out.past_key_values
        token, logp = next_token(head(out.last_hidden_state[:, -1]), temperature, greedy, generator)
        token = torch.where(done, torch.full_like(token, pad), token)
        tokens.append(token)
        keep.append(~done)
        logps.append(torch.where(done, torch.zeros_like(logp), logp))
        done = done | (token == eos)
        if bool(done.all()):
            break
        feed = token[:, None]
        positions = positions[:, -1:] + 1
        attention = torch.cat([attention, torch.ones((rows, 1), dtype=attention.dtype, device=attention.device)], 1)
    return torch.stack(tokens, 1), torch.stack(keep, 1), torch.stack(logps, 1)


def right_pad(pieces: Sequence[torch.Tensor], width: int, value: Any) -> torch.Tensor:
    """Concatenate (b_i, r_i) pieces along rows, each right-padded to `width` columns with `value`."""
    padded = []
    for piece in pieces:
        extra = width - piece.shape[1]
        fill = torch.full((piece.shape[0], extra), value, dtype=piece.dtype)
        padded.append(torch.cat([piece, fill], 1))
    return torch.cat(padded, 0)


def check_rollout_args(prompts: Sequence[str], samples: int, max_new_tokens: int, max_prompt_tokens: int,
                       temperature: float, micro_batch: int) -> None:
    if not prompts:
        raise ValueError("rollout: no prompts")
    for name, value in (("samples", samples), ("max_new_tokens", max_new_tokens),
                        ("max_prompt_tokens", max_prompt_tokens), ("micro_batch", micro_batch)):
        if value < 1:
            raise ValueError(f"rollout: {name} must be >= 1, not {value}")
    if not temperature > 0:
        raise ValueError(f"rollout: temperature must be > 0, not {temperature} (use greedy=True for argmax)")


def rollout(model: Any, tokenizer: LMTokenizer, prompts: Sequence[str], *, samples: int, max_new_tokens: int,
            max_prompt_tokens: int, temperature: float, micro_batch: int, generator: torch.Generator | None = None,
            greedy: bool = False, chunk_tokens: int = 1024) -> Rollout:
    """`samples` responses to each prompt, generated `micro_batch` rows at a time with a KV cache.

    Reproducible given `generator` (the same generator state gives the same tokens); `greedy` takes the argmax."""
    check_rollout_args(prompts, samples, max_new_tokens, max_prompt_tokens, temperature, micro_batch)
    whole = [tokenizer.encode(text) for text in prompts]  # once: the cut rows and the count of those cut
    truncated = sum(len(ids) > max_prompt_tokens for ids in whole)
    unique = [keep_end(tokenizer, ids, max_prompt_tokens) for ids in whole]
    encoded = [row for row in unique for _ in range(samples)]
    device = next(model.parameters()).device  # the Rollout itself stays on the CPU
    was_training = model.training
    model.eval()
    pieces: dict[str, list[torch.Tensor]] = {"ids": [], "mask": [], "sampled": [], "old": []}
    try:
        for start in range(0, len(encoded), micro_batch):
            ids, mask = (t.to(device) for t in left_pad(encoded[start:start + micro_batch], tokenizer.pad_token_id))
            resp, keep, sampled = sample_batch(
                model, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature,
                eos=tokenizer.eos_token_id, pad=tokenizer.pad_token_id, greedy=greedy, generator=generator)
            old = sampled if greedy else _rescored(model, ids, mask, resp, chunk_tokens, temperature)
            for key, value in (("ids", resp), ("mask", keep), ("sampled", sampled), ("old", old * keep)):
                pieces[key].append(value.cpu())
    finally:
        model.train(was_training)
    width = max(p.shape[1] for p in pieces["ids"])
    prompt_ids, prompt_mask = left_pad(encoded, tokenizer.pad_token_id)
    response_ids = right_pad(pieces["ids"], width, tokenizer.pad_token_id)
    return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                   response_mask=right_pad(pieces["mask"], width, False),
                   old_logp=right_pad(pieces["old"], width, 0.0),
                   texts=decode_responses(tokenizer, response_ids), temperature=temperature,
                   sampled_logp=right_pad(pieces["sampled"], width, 0.0), truncated=truncated)


def _rescored(model, ids: torch.Tensor, mask: torch.Tensor, resp: torch.Tensor, chunk_tokens: int,
              temperature: float) -> torch.Tensor:
    """pi_old of sampled responses by one forward of the model (the update's own arithmetic). A greedy rollout
    (an evaluation) skips it: nothing reads its pi_old, and the sampler's log-probabilities stand in."""
    with torch.no_grad():
        return response_logprobs(model, torch.cat([ids, resp], 1), torch.cat([mask, torch.ones_like(resp)], 1),
                                 ids.shape[1], chunk_tokens, use_checkpoint=False, temperature=temperature)
