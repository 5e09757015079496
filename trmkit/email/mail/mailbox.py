"""A mail source as a stream of `Message`s: `iter_messages(source, fmt, label_from, report)`.

Formats: a folder of .eml files (sorted into sub-folders or not), a Maildir (or a folder of
them), mbox or mbox.gz (one file or a folder of them), CSV and JSONL (read by records.py).
`detect_format` tells them apart from the extension and the folder's structure.

`where` says where a message came from: the file path for one-message files, `path#i`
(0-based) for mbox entries and JSON lists, `path:line` for CSV and JSONL rows.

Labels (`label_from`, see labels.py): "folder" is the sub-folder of an .eml folder, the
Maildir folder with the top one called INBOX, or the mbox file's stem.

Bounded reading: a message file or mbox entry is read only up to `max_bytes` (2 MiB; the rest
is counted, not kept) and mbox files are read line by line, so a 50 MB message or a 1 GB
mbox never sits in memory. Each message is then decoded by mime.py.

Departure from the plan, and why: Maildir folders are listed here (new/ then cur/, sorted),
not through mailbox.Maildir, whose keys come in directory order and hide the file path that
`where` must give.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from trmkit.data.imports import ImportReport
from trmkit.email.labels import LabelFrom, email_label, label_strategy
from trmkit.email.mail import Message
from trmkit.email.mail.mime import MAX_MESSAGE_BYTES, READ_CHUNK, ParseError, parse_bounded
from trmkit.email.mail.records import ColumnNames, iter_records

FORMATS = ("auto", "eml-dir", "maildir", "mbox", "csv", "jsonl")
_MBOX_SUFFIXES = (".mbox", ".mbx", ".mbox.gz", ".mbx.gz", ".gz")
_MBOX_LINE_LIMIT = 64 * 1024  # an mbox is read in lines of at most this many bytes


# ---------------------------------------------------------------- format detection


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() and (path / "new").is_dir()


def _visible(entries: list[os.DirEntry]) -> list[os.DirEntry]:
    return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def detect_format(source: Path) -> str:
    """"eml-dir", "maildir", "mbox", "csv" or "jsonl", from the extension and the folder's structure."""
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder (check --source)")
    if source.is_dir():
        if _is_maildir(source):
            return "maildir"
        with os.scandir(source) as it:
            entries = list(it)
        if any(e.is_dir() and _is_maildir(Path(e.path)) for e in entries):
            return "maildir"
        visible = _visible(entries)
        files = [e for e in visible if e.is_file()]
        if files and len(files) == len(visible) and all(e.name.lower().endswith(_MBOX_SUFFIXES) for e in files):
            return "mbox"
        return "eml-dir"
    name = source.name.lower()
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(_MBOX_SUFFIXES):
        return "mbox"
    if name.endswith(".eml"):
        return "eml-dir"
    with open(source, "rb") as f:
        return "mbox" if f.read(5) == b"From " else "eml-dir"


# ---------------------------------------------------------------- the entry point


def iter_messages(source: str | Path, fmt: str = "auto", label_from: str = "folder",
                  report: ImportReport | None = None, max_bytes: int = MAX_MESSAGE_BYTES,
                  text_column: str | None = None, label_column: str | None = None,
                  subject_column: str | None = None, sender_column: str | None = None,
                  encoding: str | None = None) -> Iterator[Message]:
    """Every readable message of `source`, in a deterministic order; bad ones counted in `report`.

    The source is checked now (path, format, label_from, CSV header and encoding), so a bad
    source raises here, before the first message; bad messages never raise.
    `encoding` (CSV/JSONL only): the file's text encoding, default UTF-8 with or without BOM.
    """
    source = Path(source)
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is unknown: use one of {', '.join(FORMATS)}")
    if max_bytes < 1:
        raise ValueError(f"max_bytes={max_bytes}: must be at least 1")
    strategy = label_strategy(label_from)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder (check --source)")
    fmt = detect_format(source) if fmt == "auto" else fmt
    report = report if report is not None else ImportReport(source=str(source))
    report.unit = "messages"
    if fmt in ("csv", "jsonl"):
        if not source.is_file():
            raise ValueError(f"{source}: --format {fmt} needs a file, this is a folder")
        if strategy.kind == "filename":
            raise ValueError(f"label_from={label_from!r} reads the names of message files; in {source.name} "
                             "every message is a row: use --label-from column:NAME")
        if strategy.kind == "header":  # a CSV/JSON has columns, not headers: the column of that name
            strategy = LabelFrom("column", strategy.name)
        names = ColumnNames(text_column, label_column, subject_column, sender_column)
        return iter_records(source, fmt, names, strategy, report, max_bytes, encoding)
    if strategy.kind == "column":
        raise ValueError(f"label_from={label_from!r} is for CSV/JSONL sources; for e-mail use "
                         "folder, gmail or header:NAME")
    keep = (strategy.name,) if strategy.kind == "header" else ()
    return _iter_emails(iter_raw(source, fmt, report, max_bytes), strategy, keep, report)


def iter_raw(source: str | Path, fmt: str = "auto", report: ImportReport | None = None,
             max_bytes: int = MAX_MESSAGE_BYTES) -> Iterator["_Raw"]:
    """The bytes of each message of an e-mail source (.eml folder, Maildir, mbox), read (bounded) but not
    parsed: `iter_messages` parses them here, `email predict --workers` in worker processes. Unreadable
    files are counted in `report`. The source is checked now, before the first message."""
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder (check --source)")
    fmt = detect_format(source) if fmt == "auto" else fmt
    if fmt not in ("eml-dir", "maildir", "mbox"):
        raise ValueError(f"{source}: format {fmt} has rows, not message files: read it with iter_messages")
    if fmt == "maildir" and next(_maildir_folders(source), None) is None:
        raise ValueError(f"{source}: not a Maildir (no cur/ and new/ inside it or below it); "
                         "pass --format eml-dir for a plain folder of message files")
    report = report if report is not None else ImportReport(source=str(source))
    return {"eml-dir": _eml_items, "maildir": _maildir_items, "mbox": _mbox_items}[fmt](source, max_bytes, report)


@dataclass(frozen=True)
class _Raw:
    """One message's bytes as read (cut to max_bytes), before parsing."""

    data: bytes
    size: int  # the original length
    where: str
    folder: str | None  # the label with label_from="folder"


def _iter_emails(items: Iterator[_Raw], strategy: LabelFrom, keep: tuple[str, ...],
                 report: ImportReport) -> Iterator[Message]:
    for item in items:
        report.lines += 1
        try:
            msg = parse_bounded(item.data, item.where, item.size, keep)
        except ParseError as exc:
            report.skip(item.where, exc.reason, exc.detail)
            continue
        msg.label = email_label(msg, item.folder, strategy)
        report.accepted += 1
        yield msg


# ---------------------------------------------------------------- .eml folders and Maildir


def _read_bounded(f: BinaryIO, max_bytes: int) -> tuple[bytes, int]:
    """The first max_bytes of a stream and its full length, reading the rest in chunks."""
    head = f.read(max_bytes + 1)
    if len(head) <= max_bytes:
        return head, len(head)
    try:
        size = os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        size = len(head)
        while chunk := f.read(READ_CHUNK):
            size += len(chunk)
    return head[:max_bytes], size


def _file_item(path: Path, folder: str | None, max_bytes: int, report: ImportReport) -> _Raw | None:
    """One message file read (bounded); None after counting it when it cannot be read."""
    try:
        with open(path, "rb") as f:
            data, size = _read_bounded(f, max_bytes)
    except OSError as exc:
        report.lines += 1
        report.skip(str(path), "unreadable", f"{type(exc).__name__}: {exc.strerror or exc}")
        return None
    return _Raw(data, size, str(path), folder)


def _eml_items(source: Path, max_bytes: int, report: ImportReport) -> Iterator[_Raw]:
    """One message per file, sorted; label = the containing folder relative to `source` (None at the top)."""
    if source.is_file():
        item = _file_item(source, None, max_bytes, report)
        if item is not None:
            yield item
        return
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(source).as_posix()
        folder = None if rel == "." else rel
        for name in sorted(n for n in filenames if not n.startswith(".")):
            path = Path(dirpath, name)
            if not path.is_file():
                report.lines += 1
                report.skip(str(path), "not a regular file", "a link to nothing, a pipe or a device")
                continue
            item = _file_item(path, folder, max_bytes, report)
            if item is not None:
                yield item


def _maildir_folders(source: Path) -> Iterator[tuple[Path, str]]:
    """(maildir, label) for `source` (INBOX when it is one) and every maildir below it, sorted.

    Maildir++ folders (".Work.Projects") are named with "/" for their "." separators.
    """
    if _is_maildir(source):
        yield source, "INBOX"
    for dirpath, dirnames, _ in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d not in ("cur", "new", "tmp"))
        for d in dirnames:
            path = Path(dirpath, d)
            if _is_maildir(path):
                parts = path.relative_to(source).parts
                label = "/".join(p[1:].replace(".", "/") if p.startswith(".") else p for p in parts)
                yield path, label


def _maildir_items(source: Path, max_bytes: int, report: ImportReport) -> Iterator[_Raw]:
    """Each maildir's new/ and cur/ messages (tmp/ holds deliveries in progress and is left alone).

    The files are listed here rather than through mailbox.Maildir, whose keys come in directory
    order and hide the file path that the report needs.
    """
    for maildir, label in _maildir_folders(source):
        for sub in ("new", "cur"):
            with os.scandir(maildir / sub) as it:
                entries = _visible(list(it))
            for entry in entries:
                item = _file_item(Path(entry.path), label, max_bytes, report)
                if item is not None:
                    yield item


# ---------------------------------------------------------------- mbox


def _mbox_items(source: Path, max_bytes: int, report: ImportReport) -> Iterator[_Raw]:
    """A single mbox (label: its stem) or a folder of them (label: relative path without suffix)."""
    if source.is_file():
        yield from _mbox_file_items(source, _mbox_label(Path(source.name)), max_bytes, report)
        return
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(n for n in filenames if not n.startswith(".")):
            path = Path(dirpath, name)
            yield from _mbox_file_items(path, _mbox_label(path.relative_to(source)), max_bytes, report)


def _mbox_label(rel: Path) -> str:
    name = rel.name
    for suffix in (".gz", ".mbox", ".mbx"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return rel.with_name(name).as_posix() if name else rel.as_posix()


def _open_maybe_gzip(path: Path) -> BinaryIO:
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    f.seek(0)
    return f


def _mbox_file_items(path: Path, label: str, max_bytes: int, report: ImportReport) -> Iterator[_Raw]:
    """Messages of one mbox file, streamed; junk before the first "From " line counted as one skip."""
    try:
        f = _open_maybe_gzip(path)
    except OSError as exc:
        report.lines += 1
        report.skip(str(path), "unreadable", f"{type(exc).__name__}: {exc.strerror or exc}")
        return
    with f:
        index = 0
        try:
            for start, data, size in _split_mbox(f, max_bytes):
                if start < 0 and not data.strip():
                    continue  # blank lines before the first message are not an item
                if start <= 0:
                    report.lines += 1
                    if start == 0:
                        report.skip(str(path), "not an mbox", "no line starts with 'From ' (a single "
                                    "message file? pass --format eml-dir)")
                    else:
                        report.skip(f"{path}:1", "junk before the first 'From ' line",
                                    f"{size} bytes before line {-start} are not part of any message")
                    continue
                yield _Raw(data, size, f"{path}#{index}", label)
                index += 1
        except (OSError, EOFError, zlib.error) as exc:  # a damaged gzip stream raises zlib.error mid-read
            report.lines += 1
            report.skip(f"{path}#{index}", "unreadable",
                        f"{type(exc).__name__}: {exc}; the messages before it were kept")


_ESCAPED_FROM = re.compile(rb"^>+From ")


def _split_mbox(f: BinaryIO, max_bytes: int) -> Iterator[tuple[int, bytes, int]]:
    """(first line, bytes cut to max_bytes, full size) per message.

    Text before the first "From " line comes as (-line of that "From " line, ...), or as
    (0, ...) when there is no "From " line at all.

    A message starts at a "From " line at the start of the file or after a blank line (before
    the first message, at any "From " line). Lines are read at most _MBOX_LINE_LIMIT bytes at a
    time and a message keeps at most max_bytes, so memory stays bounded for any file.
    """
    parts: list[bytes] = []
    kept = size = 0
    start = 0  # line of the current message's "From " line; 0: junk before the first one
    line_no, at_line_start, prev_blank = 0, True, True
    while chunk := f.readline(_MBOX_LINE_LIMIT):
        if at_line_start:
            line_no += 1
            if chunk.startswith(b"From ") and (prev_blank or start == 0):
                if start or size:
                    yield (start if start else -line_no), _strip_separator(b"".join(parts), start), size
                parts, kept, size, start = [], 0, 0, line_no
                at_line_start, prev_blank = chunk.endswith(b"\n"), False
                continue
            if _ESCAPED_FROM.match(chunk):
                chunk = chunk[1:]
            prev_blank = chunk in (b"\n", b"\r\n")
        at_line_start = chunk.endswith(b"\n")
        size += len(chunk)
        if kept < max_bytes:
            piece = chunk[: max_bytes - kept]
            parts.append(piece)
            kept += len(piece)
    if start or size:
        yield start, _strip_separator(b"".join(parts), start), size


def _strip_separator(data: bytes, start: int) -> bytes:
    """A message without the blank line that separates it from the next "From " line."""
    if start and data.endswith(b"\n\n"):
        return data[:-1]
    if start and data.endswith(b"\r\n\r\n"):
        return data[:-2]
    return data

