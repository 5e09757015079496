"""How a message becomes the model's input row: one path for the store's build and for predict.

    fields   (subject, sender, body), the body clipped to MAX_BODY_CHARS (its start and its end)
    tokens   the tokenizer's layout of those fields: <cls> <subject> ... <from> ... <body> ... [<tail> ...]
    bag      with a store built with --bag N: the message's N n-gram ids after the tokens (bag.py)

`trmkit data email` (task.py) encodes its splits with `encode_messages`, and so do `email predict`
(bundle.py) and its worker processes (workers.py), so a message gets the same row in both.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from trmkit.email.bag import Bag
from trmkit.email.mail import Message
from trmkit.email.tokenizer import EmailTokenizer

MAX_BODY_CHARS = 20_000  # kept per message: the tokenizer reads the first ~8 * seq_len chars, the bag all of these


def clip_body(body: str) -> str:
    """The body's first and last MAX_BODY_CHARS / 2 characters, joined by a newline (a shorter body as it is;
    a clipped body clips to itself)."""
    if len(body) <= MAX_BODY_CHARS:
        return body
    return body[:MAX_BODY_CHARS // 2] + "\n" + body[-MAX_BODY_CHARS // 2:]


def message_fields(messages: Iterable[Message]) -> list[tuple[str, str, str]]:
    """(subject, sender, clipped body) of each message: what the tokenizer and the bag read."""
    return [(m.subject, m.sender, clip_body(m.body)) for m in messages]


def encode_fields(tokenizer: EmailTokenizer, bag: Bag | None, fields: Sequence[tuple[str, str, str]],
                  seq_len: int, tail: int) -> np.ndarray:
    """(n, seq_len [+ bag positions]) model inputs for (subject, sender, body) triples."""
    tokens = tokenizer.encode_batch(fields, seq_len, tail)
    return tokens if bag is None else bag.append_to(tokens, fields)


def encode_messages(tokenizer: EmailTokenizer, bag: Bag | None, messages: Iterable[Message], seq_len: int,
                    tail: int) -> np.ndarray:
    """(n, seq_len [+ bag positions]) model inputs of the messages: the build's rows and predict's."""
    return encode_fields(tokenizer, bag, message_fields(messages), seq_len, tail)
