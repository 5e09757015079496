"""E-mail as data: reading real mailboxes, labels, de-duplication, splits and the tokenizer.

Everything here is data-level (no model, no trainer): `tasks/email.py` builds a store from
it, and the application in `trmkit/email/` (predict, export, serve, baseline) reuses it.

    ingest.py    Message, parse_bytes, iter_messages: .eml folders, Maildir, mbox(.gz), CSV, JSONL
    labels.py    --label-from strategies (folder, gmail, header:NAME, column:NAME) and label maps
    prepare.py   exact/near-duplicate removal, language, lengths, stratified or time split, report
    tokenizer.py the `tokenizers` BPE trained on the training split; field markers; truncation
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass
class Message:
    """One decoded e-mail (or one CSV/JSON record), before labels are mapped."""

    subject: str
    sender: str
    body: str  # plain text: text/plain preferred, else HTML converted to text; attachments skipped
    label: str | None = None  # the raw label the --label-from strategy found (None: none found)
    date: float | None = None  # POSIX seconds from the Date header (None: absent or invalid)
    message_id: str = ""  # the Message-ID header, "" when absent
    where: str = ""  # "path", "path#index" (mbox: 0-based message index) or "path:line" (CSV/JSONL)
    headers: Mapping[str, str] = field(default_factory=dict)  # a few decoded headers for label rules
    notes: tuple[str, ...] = ()  # what decoding had to work around ("truncated", "charset fallback: x")
