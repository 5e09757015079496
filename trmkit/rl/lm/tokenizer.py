"""Tokenizers with the one interface the rollout code uses.

- `ByteTokenizer`: for random-weight shapes (no real tokenizer can be downloaded). UTF-8 bytes -> ids inside the
  shape's vocabulary: pad 0, bos 1, eos 2, byte b -> b + 3, so 259 ids are used whatever the vocabulary's size.
  Decoding drops the specials and replaces broken UTF-8 (a policy can write any byte sequence).
- `HFTokenizer`: a local Hugging Face tokenizer behind the same interface (left padding for generation; a
  tokenizer without a pad token pads with eos, as Qwen and Llama base models need).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch

BYTE_OFFSET = 3  # ids 0, 1, 2 are pad, bos, eos


class LMTokenizer(Protocol):
    """What rollouts and scoring need of a tokenizer."""

    pad_token_id: int
    eos_token_id: int
    bos_token_id: int | None

    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 bytes as ids: `encode("hi") == [1, 107, 108]`, `decode([1, 107, 108, 2]) == "hi"`."""

    vocab_size: int  # the model's vocabulary; must hold the 259 ids used
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        if self.vocab_size < 256 + BYTE_OFFSET:
            raise ValueError(f"vocabulary of {self.vocab_size} ids cannot hold 256 bytes + 3 specials")

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = [b + BYTE_OFFSET for b in text.encode("utf-8")]
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(int(i) - BYTE_OFFSET for i in ids if BYTE_OFFSET <= int(i) < 256 + BYTE_OFFSET)
        return data.decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer from a local folder, with `LMTokenizer`'s interface."""

    def __init__(self, tokenizer: Any):
        self.inner = tokenizer
        self.eos_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else self.eos_token_id
        bos = tokenizer.bos_token_id
        self.bos_token_id = int(bos) if bos is not None else None

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(self.inner.encode(text, add_special_tokens=False))
        return [self.bos_token_id, *ids] if add_bos and self.bos_token_id is not None else ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode([int(i) for i in ids], skip_special_tokens=True)


def batch_encode(tokenizer: LMTokenizer, texts: Sequence[str], add_bos: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts for generation: (input_ids, attention_mask), both (B, P) int64, P the longest prompt.

    Left padding puts every prompt's last token at column P - 1, so generated tokens start at column P for all rows."""
    rows = [tokenizer.encode(t, add_bos=add_bos) for t in texts]
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids, mask


def decode_responses(tokenizer: LMTokenizer, response_ids: torch.Tensor) -> list[str]:
    """Each row of generated ids (B, R) as text, cut at its first eos."""
    texts = []
    for row in response_ids.tolist():
        if tokenizer.eos_token_id in row:
            row = row[:row.index(tokenizer.eos_token_id)]
        texts.append(tokenizer.decode(row))
    return texts
