"""Fixtures shared by the e-mail tests."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from trmkit.data.imports import ImportReport
from trmkit.email.mail import Message
from trmkit.email.mail.mailbox import iter_messages

SPAMASSASSIN = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "email" / "spamassassin"


@dataclass(frozen=True)
class Corpus:
    """A corpus read once: its messages (labels from folders), the reader's report, the seconds it took."""

    root: Path
    messages: list[Message]
    report: ImportReport
    seconds: float


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The fits these tests run in this process are tiny (120 bags, a D=16 model): with torch's default of a
    thread per core, one other busy process makes them 20-30x slower (measured 2026-11-29 beside a training
    run: test_bag's auto-choice folds 0.6 s -> 19 s, its idf fit 3 s -> 60 s). A command that plans its
    threads (train, predict) still sets its own; the test's setting is restored after it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="package")
def spamassassin() -> Corpus:
    """The whole SpamAssassin corpus (6,046 messages), parsed once for the tests that read all of it
    (does every folder parse? do the taxonomy's rules find its spam?): parsing it is ~9 s of a quiet
    core, paid once instead of once per test. The tests read the messages and never change them."""
    if not SPAMASSASSIN.is_dir():
        pytest.fail(f"{SPAMASSASSIN} is missing: the e-mail tests read the shared SpamAssassin corpus at "
                    "../shared/data (repo root/../shared/data/email/spamassassin)")
    report = ImportReport(source=str(SPAMASSASSIN))
    t0 = time.perf_counter()
    messages = list(iter_messages(SPAMASSASSIN, "auto", "folder", report))
    return Corpus(SPAMASSASSIN, messages, report, time.perf_counter() - t0)
