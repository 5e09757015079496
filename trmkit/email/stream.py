"""Feeding a Classifier (bundle.py) a stream of messages: predictions in input order, memory flat for any mailbox.

`predict_stream` parses and encodes in a thread beside the model (CSV, JSONL, stdin, a few files);
`predict_batches` takes batches already encoded by worker processes (workers.py, for mailboxes).
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Iterable

import numpy as np

from trmkit.email.mail import Message

if TYPE_CHECKING:
    from trmkit.email.bundle import Classifier


def predict_stream(classifier: "Classifier", messages: Iterable[Message], batch: int = 256) -> Iterable[dict]:
    """Predictions in input order, `batch` messages at a time: memory stays flat for any mailbox size.

    Parsing and encoding (tokens, n-gram bag) run in a background thread while the model (torch,
    which releases the GIL) classifies the previous batch; the queue holds at most two batches, so
    memory stays bounded."""
    batches: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()

    def produce() -> None:
        pending: list[Message] = []
        try:
            for msg in messages:
                pending.append(msg)
                if len(pending) >= batch:
                    _put(batches, (pending, classifier.encode(pending)), stop)
                    pending = []
            if pending:
                _put(batches, (pending, classifier.encode(pending)), stop)
            _put(batches, None, stop)
        except BaseException as err:  # reported in the consumer's thread, with its traceback
            _put(batches, err, stop)

    worker = threading.Thread(target=produce, name="trmkit-parse", daemon=True)
    worker.start()
    try:
        while (item := batches.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield from classifier.predict_encoded(*item)
    finally:
        stop.set()
        worker.join(timeout=5)


def predict_batches(classifier: "Classifier", batches: Iterable[tuple[list[Message], np.ndarray]]) -> Iterable[dict]:
    """Predictions for (messages, encoded rows) batches, e.g. from workers.Parsers."""
    for messages, rows in batches:
        yield from classifier.predict_encoded(messages, rows)


def _put(batches: queue.Queue, item, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            batches.put(item, timeout=0.1)
            return
        except queue.Full:
            continue
