"""Parsing and encoding in worker processes, beside the model (`email predict` on a mailbox).

Parsing (the standard library's `email`) and the n-gram bag are pure Python and hold the GIL,
so in one process they, not the model, set the pace: on 2 AVX2 cores, float32, the short-window
model classifies faster than one thread parses and encodes. Here the main process reads each
message's bytes (bounded, in order: mailbox.iter_raw), hands them over `batch` at a time to
worker processes that parse and encode them, and classifies the encoded rows as they come back,
in order. At most `workers + 1` batches are in flight once the model classifies (AHEAD per worker
before that), so memory stays flat for any mailbox.
Workers are started with "spawn" (no copy of the model or of torch's threads) and import no torch;
a message that does not parse is sent back as a skip and counted, as in one process.

For a bundle, `email predict` starts the workers before it loads the model (`layout` reads the
text layout from the bundle's files without torch): importing torch and loading take 1.5-3 s, in
which the workers parse the first batches.
"""

from __future__ import annotations

import json
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any, Iterable, Iterator

import numpy as np

from trmkit.config import ConfigError
from trmkit.email.bag import BAG_FILE, Bag
from trmkit.email.encode import encode_messages
from trmkit.email.mail import Message
from trmkit.email.mail.mime import ParseError, parse_bounded
from trmkit.email.tokenizer import TOKENIZER_FILE, EmailTokenizer

_WORKER: dict[str, Any] = {}  # in a worker: the tokenizer, bag and text layout it encodes with
AHEAD = 3  # batches per worker handed out before the model classifies (while it loads)
BUNDLE_CONFIG = "config.json"  # bundle.CONFIG_FILE (bundle.py imports torch, which this module must not)


def _init(tokenizer_json: str, bag: dict | None, seq_len: int, tail: int) -> None:
    try:
        _WORKER.update(tokenizer=EmailTokenizer.from_json(tokenizer_json, source="<predict worker>"),
                       bag=None if bag is None else Bag.from_dict(bag), seq_len=seq_len, tail=tail)
    except (ValueError, KeyError, TypeError) as err:  # a damaged file: the model's load names it
        _WORKER["error"] = str(err)


def parse_and_encode(items: list[tuple[bytes, int, str]]) -> tuple[list[tuple[str, str]], np.ndarray, list]:
    """In a worker: ([(where, message_id)] of the messages that parsed, their encoded rows,
    [(where, reason, detail)] of those that did not)."""
    if "error" in _WORKER:
        raise ConfigError(f"a parsing worker could not read the model's text layout: {_WORKER['error']}")
    kept: list[Message] = []
    skipped: list[tuple[str, str, str]] = []
    for data, size, where in items:
        try:
            kept.append(parse_bounded(data, where, size))
        except ParseError as err:
            skipped.append((where, err.reason, err.detail))
    rows = encode_messages(_WORKER["tokenizer"], _WORKER["bag"], kept, _WORKER["seq_len"], _WORKER["tail"])
    return [(m.where, m.message_id) for m in kept], rows, skipped


def layout(bundle) -> tuple | None:
    """What workers encode with, read from a bundle's files without torch: (tokenizer JSON, bag dict or
    None, seq_len, tail); None where `bundle` is not a readable bundle (a run directory, a damaged
    file: the model's load then says what is wrong)."""
    try:
        config = json.loads((bundle / BUNDLE_CONFIG).read_text(encoding="utf-8"))
        bag = bundle / BAG_FILE
        return ((bundle / TOKENIZER_FILE).read_text(encoding="utf-8"),
                json.loads(bag.read_text(encoding="utf-8")) if bag.is_file() else None,
                int(config["seq_len"]), int(config.get("tail", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Parsers:
    """(messages, encoded rows) per batch of `raw` items (mailbox._Raw), in input order, parsed and
    encoded by `workers` processes, which start (and are handed AHEAD batches each) when this is made.
    `setup`: (tokenizer JSON, bag dict or None, seq_len, tail). Messages carry only where they came
    from and their Message-ID (all a prediction names). Close it (or iterate to the end): no worker
    outlives the command."""

    def __init__(self, raw: Iterable, batch: int, workers: int, setup: tuple, report):
        self.workers, self.setup, self.report, self.chunks = workers, setup, report, _chunks(raw, batch)
        self.pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init, initargs=setup)
        self.pending: deque[Future] = deque()
        self._hand_out(AHEAD * workers)

    def _hand_out(self, in_flight: int) -> None:
        while len(self.pending) < in_flight and (chunk := next(self.chunks, None)) is not None:
            self.report.lines += len(chunk)
            self.pending.append(self.pool.submit(parse_and_encode, [(r.data, r.size, r.where) for r in chunk]))

    def __iter__(self) -> Iterator[tuple[list[Message], np.ndarray]]:
        try:
            while self.pending:
                result = self.pending.popleft().result()
                self._hand_out(self.workers + 1)
                yield _collect(result, self.report)
        except BrokenProcessPool as err:
            raise ConfigError("a parsing worker process died (killed, or out of memory?); an --out file is left as "
                              "it was. Run again, or with --workers 0 to parse in this process") from err
        finally:
            self.close()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _collect(result: tuple, report) -> tuple[list[Message], np.ndarray]:
    kept, rows, skipped = result
    for where, reason, detail in skipped:
        report.skip(where, reason, detail)
    report.accepted += len(kept)
    return [Message(subject="", sender="", body="", message_id=mid, where=where) for where, mid in kept], rows
