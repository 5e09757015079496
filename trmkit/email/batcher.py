"""Micro-batching for `trmkit email serve`: concurrent requests share one model call.

A request hands its messages to `Batcher.submit` and awaits the returned future. One worker
thread takes the oldest waiting request, waits up to `wait_s` for more (until `max_batch`
messages), runs the predictor once on all of them and hands each request its slice. A model
call costs about the same for 1 message as for tens on a CPU, so 100 single-message requests
arriving together cost a few calls instead of 100 queued ones. The predictor is only ever
called from that one thread (one batch at a time: the cores are shared, and a predictor is not
promised to be thread-safe). When a shared call fails, each request of it is retried alone, so
one bad message fails only its own request.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

Job = tuple[Sequence, Future]


class Batcher:
    def __init__(self, predict: Callable[[list], list], max_batch: int = 256, wait_s: float = 0.005):
        if max_batch < 1 or wait_s < 0:
            raise ValueError(f"max_batch={max_batch} must be >= 1 and wait_s={wait_s} >= 0")
        self.predict, self.max_batch, self.wait_s = predict, max_batch, wait_s
        self.calls = 0  # model calls made (the tests and the log read it)
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="trmkit-batcher", daemon=True)
        self.thread.start()

    def submit(self, messages: Sequence) -> Future:
        future: Future = Future()
        self.jobs.put((list(messages), future))
        return future

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(5)

    def _gather(self, first: Job) -> list[Job]:
        """The first job and those arriving within wait_s, up to max_batch messages."""
        batch, size = [first], len(first[0])
        deadline = time.monotonic() + self.wait_s
        while size < self.max_batch and (left := deadline - time.monotonic()) > 0:
            try:
                job = self.jobs.get(timeout=left)
            except queue.Empty:
                break
            if job is None:  # close(): finish this batch, then stop
                self.jobs.put(None)
                break
            batch.append(job)
            size += len(job[0])
        return batch

    def _run(self) -> None:
        while (first := self.jobs.get()) is not None:
            batch = self._gather(first)
            try:
                results = self._call([m for messages, _ in batch for m in messages])
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting requests)
                if len(batch) == 1:
                    batch[0][1].set_exception(exc)
                    continue
                for job in batch:  # one bad message must not fail the others: each alone
                    self._run_alone(job)
                continue
            at = 0
            for messages, future in batch:
                future.set_result(results[at:at + len(messages)])
                at += len(messages)

    def _run_alone(self, job: Job) -> None:
        messages, future = job
        try:
            future.set_result(self._call(list(messages)))
        except BaseException as exc:  # noqa: BLE001
            future.set_exception(exc)

    def _call(self, messages: list) -> list:
        results = self.predict(messages)
        self.calls += 1
        if len(results) != len(messages):
            raise RuntimeError(f"the predictor returned {len(results)} predictions for {len(messages)} messages")
        return results
