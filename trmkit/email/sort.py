"""`trmkit email sort`: file classified messages into the folders of a Maildir, as copies.

The originals are only read, never moved or changed. Each message is copied into
``INTO/.<label>/cur/`` (Maildir++: a folder per label, ``uncertain`` included when thresholds
are set) by the Maildir delivery protocol (written to ``tmp/``, fsync'd, linked into ``cur/``:
a mail reader never sees half a message), then read back and compared with the source's bytes
(byte for byte). ``--stamp`` adds an ``X-Trmkit-Label`` header line at the top of the copy instead of
copying the bytes unchanged; the verification then checks that the copy is that line plus the
original. A message already sorted (the same name and bytes in its folder) is left as it is, so
a second run does nothing; a different message under the same name gets a numbered name.
``--dry-run`` prints what it would do and writes nothing.

Sources are message files (an .eml folder or a Maildir): their bytes are what is copied. An mbox
or CSV/JSONL source is refused by name (`email predict` gives each message's `source`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trmkit.files import deliver

STAMP_HEADER = "X-Trmkit-Label"
_SAFE = re.compile(r"[^A-Za-z0-9_\-]+")


@dataclass
class SortReport:
    copied: int = 0
    already: int = 0  # found in place from an earlier run
    renamed: int = 0  # another message had the name: a numbered name was used
    per_label: dict[str, int] = field(default_factory=dict)


def folder_name(label: str) -> str:
    """A Maildir++ folder for a label: ".Spam", ".hard-ham" (other characters become _)."""
    return "." + (_SAFE.sub("_", label).strip("_") or "unnamed")


def ensure_maildir(path: Path) -> None:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)


def stamped(data: bytes, label: str, probability: float) -> bytes:
    newline = b"\r\n" if b"\r\n" in data[:4096] else b"\n"
    return f"{STAMP_HEADER}: {label}; p={probability:.4f}".encode() + newline + data


def sort_one(source: Path, label: str, probability: float, into: Path, stamp: bool,
             report: SortReport) -> Path:
    """Copy one message file into its label's folder and verify the copy; the path it is at."""
    data = source.read_bytes()
    copy = stamped(data, label, probability) if stamp else data
    folder = into / folder_name(label)
    ensure_maildir(folder)
    name, n = source.name, 0
    while True:
        target = folder / "cur" / name
        if target.exists() and target.read_bytes() == copy:
            report.already += 1
            return target
        if deliver(copy, folder / "tmp", target):
            break
        n += 1
        name = f"{source.name}.{n}"
    if target.read_bytes() != copy:
        raise OSError(f"{target}: the copy does not read back as written; the original {source} is untouched")
    report.copied += 1
    report.renamed += n > 0
    report.per_label[label] = report.per_label.get(label, 0) + 1
    return target


def sort_messages(predictions, into: Path, stamp: bool = False, dry_run: bool = False,
                  log: Callable[[str], None] = print) -> SortReport:
    """predictions: (source path, prediction dict) pairs, as `email predict` makes them."""
    report = SortReport()
    for source, pred in predictions:
        source = Path(source)
        if dry_run:
            log(f"would copy {source} -> {into / folder_name(pred['label']) / 'cur'} "
                f"({pred['label']}, p={pred['probability']:.3f})")
            report.per_label[pred["label"]] = report.per_label.get(pred["label"], 0) + 1
            continue
        sort_one(source, pred["label"], pred["probability"], into, stamp, report)
    return report
