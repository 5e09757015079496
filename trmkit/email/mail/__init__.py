"""Reading real mail into `Message` records, with the standard library.

    mime.py      one raw RFC 822 message -> Message (`parse_message`): bounded policy, headers,
                 charsets, HTML to text, the readable body
    mailbox.py   a source -> Messages (`iter_messages`): format detection, .eml folders, Maildir,
                 mbox(.gz) and its splitter; CSV and JSONL are handed to records.py
    records.py   CSV and JSONL (or JSON list) records -> Messages

Real mailboxes are messy, so the rule is: one bad message is counted in the `ImportReport`
(trmkit/data/imports.py) with where it was and why, and the rest of the batch is kept; only a
bad *source* (missing path, unknown format, CSV without a text column, a CSV that is not in its
encoding) raises, with the path and the fix in the message.
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
