"""Reading real mailboxes: .eml folders, Maildir, mbox(.gz), CSV and JSONL into `Message`s.

Everything is decoded with the standard library (`email` with a policy derived from
`email.policy.default`, `html.parser`, `gzip`, `csv`, `json`), never with regular
expressions over raw mail. Real mailboxes are messy, so the rule is: one bad message is
counted in the `ImportReport` with where it was and why, and the rest of the batch is
kept; only a bad *source* (missing path, unknown format, CSV without a text column, a
CSV that is not in its encoding) raises, with the path and the fix in the message.

Body: text/plain is preferred, else HTML converted to text with a real HTML parser
(script and style dropped, newlines at block tags, entities unescaped). multipart/mixed
with several inline text parts gives their concatenation; attachments (a Content-
Disposition of attachment, or any non-text part) are counted in `notes`, never decoded.
Unknown or invalid charsets ("default", "unknown-8bit", "x-user-defined") fall back to
UTF-8, then cp1252, with a "charset fallback: NAME" note.

Bounded work per message, whatever the input:
- a message over `max_bytes` (2 MiB) is cut to its first `max_bytes` before parsing
  ("truncated from N bytes" note); files and mbox entries are read only that far, so
  a 50 MB message or a 1 GB mbox never sits in memory;
- header values are cut to `MAX_HEADER_PARSE_CHARS` before the header parser sees them,
  and parsed headers are cached: CPython's header parser is quadratic in the number of
  parameters (SpamAssassin's spam-2/00471 has a Content-Type of 7,000 ";" and took 5 s),
  and `get_body` re-parses Content-Type on every access.

`where` says where a message came from: the file path for one-message files, `path#i`
(0-based) for mbox entries and JSON lists, `path:line` for CSV and JSONL rows.

Labels (`label_from`): "folder" (the sub-folder of an .eml folder, the Maildir folder with
the top one called INBOX, the mbox file's stem; for CSV/JSONL the label column),
"gmail" (the X-Gmail-Labels header via `labels.gmail_label`; for CSV/JSONL the label
column read the same way), "header:NAME" (the decoded value of header NAME; for CSV/JSONL
the column NAME) and "column:NAME" (CSV/JSONL only). A label that cannot be found is None.

CSV: `encoding` (an addition to the agreed signature) defaults to UTF-8 with or without
a BOM; a file that is not valid in it raises before anything is read, naming the byte
offset and line. Rows with more fields than the header (commas in unquoted text, as in
the Turkish trspam set) have the surplus fields joined back into the text column; rows
whose text and subject hold no letter or digit are skipped as "empty text".

Departures from the plan, and why:
- Maildir folders are listed here (new/ then cur/, sorted), not through mailbox.Maildir,
  whose keys come in directory order and hide the file path that `where` must give.
- Message.headers values are decoded as unstructured text (RFC 2047 words still decoded by
  policy.default's parser): the address parser costs 4 x the time and re-formats From/To.
- The Turkish trspam CSV gives 824 messages (495 ham, 329 spam), not the published 825:
  one ham row (line 32071) is ",ham" with no text.
"""

from __future__ import annotations

import codecs
import csv
import functools
import gzip
import io
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from email.headerregistry import HeaderRegistry
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import EmailPolicy
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping

from trmkit.data.email import Message
from trmkit.data.email.labels import gmail_label
from trmkit.data.imports import ImportReport

MAX_MESSAGE_BYTES = 2 * 1024 * 1024  # larger messages are cut to this before parsing
MAX_HEADER_CHARS = 1000  # each value kept in Message.headers
MAX_HEADER_PARSE_CHARS = 2000  # header values are cut to this before parsing (see the docstring)
SPREADSHEET_CELL_CHARS = 32_767  # Excel's cell limit: a text of exactly this length was probably cut
FORMATS = ("auto", "eml-dir", "maildir", "mbox", "csv", "jsonl")

# Kept in Message.headers for label rules. X-Spam-* headers are left out on purpose: in
# corpora filtered by SpamAssassin they hold the verdict, which would leak the label.
HEADER_NAMES = ("From", "To", "Cc", "Reply-To", "Subject", "Date", "Return-Path", "List-Id",
                "List-Unsubscribe", "Precedence", "Auto-Submitted", "X-Gmail-Labels", "X-Folder",
                "X-Mailer", "Content-Type")
_LOWER_HEADER_NAMES = frozenset(n.lower() for n in HEADER_NAMES)
# A file is an e-mail only if it has at least one of these (a `cmds` script is not).
_EMAIL_HEADERS = frozenset({"from", "to", "subject", "date", "message-id", "received",
                            "return-path", "delivered-to", "mime-version", "content-type", "sender"})
_BODY_TYPES = ("text/plain", "text/html")
_MBOX_SUFFIXES = (".mbox", ".mbx", ".mbox.gz", ".mbx.gz", ".gz")
_TEXT_COLUMNS = ("text", "body", "message", "content")
_LABEL_COLUMNS = ("label", "classification", "category", "class")
_SUBJECT_COLUMNS = ("subject",)
_SENDER_COLUMNS = ("sender", "from")
_DATE_COLUMNS = ("date",)
_ID_COLUMNS = ("message_id", "message-id")
_READ_CHUNK = 1 << 20
_MBOX_LINE_LIMIT = 64 * 1024  # an mbox is read in lines of at most this many bytes


class ParseError(Exception):
    """One message that cannot be read; `reason` groups it in the report, the text says what is wrong."""

    def __init__(self, reason: str, detail: str = "", where: str = "") -> None:
        super().__init__(f"{where + ': ' if where else ''}{reason}{': ' + detail if detail else ''}")
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------- header parsing


class _BoundedPolicy(EmailPolicy):
    """policy.default, with header values cut before parsing, 8-bit bytes read, and parses cached."""

    def header_fetch_parse(self, name: str, value: Any) -> Any:
        if hasattr(value, "name"):  # already a parsed header object
            return value
        return _parse_header(self.header_factory, name, _LINE_BREAKS.sub("", value)[:MAX_HEADER_PARSE_CHARS])


_LINE_BREAKS = re.compile(r"[\r\n]")  # unfolding, as policy.default does it
_SURROGATES = re.compile("[\udc80-\udcff]")  # bytes 0x80-0xff that BytesParser could not decode


@functools.lru_cache(maxsize=2048)  # keys are cut to MAX_HEADER_PARSE_CHARS: at most a few MB
def _parse_header(factory: Any, name: str, value: str) -> Any:
    """One header value as policy.default parses it (cached: get_body asks for Content-Type often)."""
    return factory(name, _repair_8bit(value))


def _repair_8bit(value: str) -> str:
    """Raw 8-bit bytes in a header (surrogate-escaped by BytesParser): UTF-8 if they are, else cp1252."""
    if not _SURROGATES.search(value):
        return value
    data = value.encode("utf-8", "surrogateescape")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", "replace")


_POLICY = _BoundedPolicy()


def _raw_headers(msg: EmailMessage) -> dict[str, str]:
    """The first raw value of each header name (lower-cased), as BytesParser left it."""
    raw: dict[str, str] = {}
    for name, value in msg.raw_items():
        raw.setdefault(name.lower(), str(value))
    return raw


def _header_text(raw: Mapping[str, str], name: str) -> tuple[str, str | None]:
    """The decoded text of header `name` ("" if absent), and a note when decoding had to fall back.

    RFC 2047 words are decoded by policy.default's parser, but every header is read as
    unstructured text: the address parser re-formats From/To and costs 4 x the time.
    """
    value = raw.get(name.lower())
    if value is None:
        return "", None
    value = _LINE_BREAKS.sub("", value)
    note = f"header cut: {name} from {len(value)} characters" if len(value) > MAX_HEADER_PARSE_CHARS else None
    try:
        text = str(_parse_header(_TEXT_HEADERS, name, value[:MAX_HEADER_PARSE_CHARS]))
    except Exception as exc:  # noqa: BLE001 - the header parser has many failure modes on bad input
        text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        note = f"header fallback: {name} ({type(exc).__name__})"
    return " ".join(text.split()), note


_TEXT_HEADERS = HeaderRegistry(use_default_map=False)  # every header as UnstructuredHeader


def _date_of(value: str) -> float | None:
    """POSIX seconds from a Date header (no zone means UTC), None if absent or invalid."""
    if not value:
        return None
    try:
        dt = parsedate_to_datetime(value)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


# ---------------------------------------------------------------- HTML to text

_SKIP_TAGS = frozenset({"script", "style", "template", "noscript"})
_BLOCK_TAGS = frozenset({"p", "div", "br", "li", "tr", "table", "ul", "ol", "dl", "dt", "dd", "h1", "h2",
                         "h3", "h4", "h5", "h6", "blockquote", "pre", "hr", "section", "article", "header",
                         "footer", "title", "address", "form", "center", "body", "html", "tbody", "thead"})
_CELL_TAGS = frozenset({"td", "th"})
_SPACES = re.compile(r"[ \t\r\n\f\v\xa0]+")
_BLANK_LINES = re.compile(r"\n{3,}")


class _HTMLText(HTMLParser):
    """Collects the visible text of an HTML document: data outside script/style, newlines at blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)  # entities (&amp; &#233; &nbsp;) arrive unescaped
        self.parts: list[str] = []
        self._skip = 0  # depth inside script/style
        self._pre = 0  # depth inside <pre>, where whitespace is kept

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self._break(tag)
        elif tag in _CELL_TAGS:
            self.parts.append(" ")
        if tag == "pre":
            self._pre += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:  # <br/>, <hr/>: one newline; <script/> opens nothing
            self._break(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS and tag != "br":
            self._break(tag)
        if tag == "pre":
            self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skip or (not data.strip() and self._at_break()):
            return
        self.parts.append(data if self._pre else _SPACES.sub(" ", data))

    def _at_break(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")

    def _break(self, tag: str) -> None:
        """A newline at a block boundary; <br> always adds one (two <br> make a blank line)."""
        if tag == "br" or not self._at_break():
            self.parts.append("\n")


def html_to_text(html: str) -> tuple[str, str | None]:
    """Visible text of an HTML document, and a note if the parser gave up part way."""
    parser = _HTMLText()
    note = None
    try:
        parser.feed(html)
        parser.close()
    except Exception as exc:  # noqa: BLE001 - keep what was read before a parser failure
        note = f"html parser stopped: {type(exc).__name__}"
    return _tidy_lines("".join(parser.parts).replace("\xa0", " ")), note


def _tidy_lines(text: str) -> str:
    """Each line stripped, runs of blank lines cut to one."""
    lines = (line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


# ---------------------------------------------------------------- body decoding


def _text_codec(name: str) -> str | None:
    """`name` (or an obvious alias) if Python has a text codec for it, else None."""
    name = name.strip().strip("\"'").lower()
    for candidate in (name, name.removesuffix("_charset"), name.removeprefix("x-"), name.removeprefix("chinese")):
        try:
            codecs.lookup(candidate)
            b"\0\0\0\0".decode(candidate)  # LookupError for bytes-to-bytes codecs (base64, zlib)
        except LookupError:
            continue
        except (UnicodeError, ValueError):
            pass  # a text codec that dislikes the probe bytes
        return candidate
    return None


def _decode_bytes(data: bytes, charset: str | None) -> tuple[str, str | None]:
    """Bytes of a text part as text, and a note when the declared charset could not be used."""
    codec = _text_codec(charset) if charset else None
    if codec is not None and codec not in ("us-ascii", "ascii"):
        try:
            return data.decode(codec), None
        except UnicodeDecodeError:
            if codec.replace("-", "").replace("_", "") != "utf8":
                return data.decode(codec, "replace"), f"bad bytes for charset {charset}"
    unknown = charset is not None and codec is None  # "default", "unknown-8bit", "x-user-defined", ...
    if data.isascii():
        return data.decode("ascii"), (f"charset fallback: {charset}" if unknown else None)
    try:  # unknown, invalid or missing charset (or 8-bit bytes under us-ascii): UTF-8, else cp1252
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252", "replace")
    return text, f"charset fallback: {charset or 'none'}"


def _is_attachment(part: EmailMessage) -> bool:
    return part.is_attachment() or part.get_content_type() not in _BODY_TYPES


def _part_text(part: EmailMessage, notes: list[str]) -> str:
    """One text/plain or text/html leaf as plain text (transfer encoding and charset undone)."""
    data = part.get_payload(decode=True)
    if any("Base64" in type(d).__name__ for d in part.defects):
        notes.append("base64 damaged")
    if not isinstance(data, bytes):
        return ""
    text, note = _decode_bytes(data, part.get_content_charset())
    if note:
        notes.append(note)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if part.get_content_subtype() == "html":
        text, note = html_to_text(text)
        if note:
            notes.append(note)
    return text.strip()


def _collect_text(part: EmailMessage, texts: list[str], notes: list[str]) -> None:
    """Text of `part` in reading order: one choice per multipart/alternative or related, all of mixed."""
    if part.is_attachment():
        return
    if part.is_multipart():
        if part.get_content_subtype() in ("alternative", "related"):
            for preference in (("plain",), ("html",)):  # an empty text/plain falls back to the HTML
                chosen = part.get_body(preferencelist=preference)
                found = len(texts)
                if chosen is not None:
                    _collect_text(chosen, texts, notes)
                if len(texts) > found:
                    return
            return
        for child in part.iter_parts():
            _collect_text(child, texts, notes)
    elif part.get_content_type() in _BODY_TYPES:
        text = _part_text(part, notes)
        if text:
            texts.append(text)


def _body_of(msg: EmailMessage, notes: list[str]) -> str:
    """The message's readable text; attachments and MIME defects counted in `notes`."""
    texts: list[str] = []
    _collect_text(msg, texts, notes)
    attachments = sum(1 for p in msg.walk() if not p.is_multipart() and _is_attachment(p))
    if attachments:
        notes.append(f"attachments skipped: {attachments}")
    defects = sorted({type(d).__name__ for p in msg.walk() for d in p.defects})
    if defects:
        notes.append("MIME defects: " + ", ".join(defects))
    if not texts:
        notes.append("no text body")
    return "\n\n".join(texts)


# ---------------------------------------------------------------- one message


def parse_bytes(raw: bytes, where: str = "", max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """One RFC 822 message as a `Message` (label None); raises ParseError if it is not an e-mail."""
    size = len(raw)
    return _parse(raw[:max_bytes] if size > max_bytes else raw, where, size)


def _parse(raw: bytes, where: str, size: int, keep: tuple[str, ...] = ()) -> Message:
    """`raw` (already cut to max_bytes; `size` is the original length) as a Message."""
    if not raw.strip():
        raise ParseError("empty message", f"{size} bytes, no text", where)
    try:
        msg = BytesParser(policy=_POLICY).parsebytes(raw)
        if not _EMAIL_HEADERS & {k.lower() for k in msg.keys()}:
            first = raw.lstrip()[:60].split(b"\n")[0].decode("utf-8", "replace")
            raise ParseError("not an e-mail", f"no From/To/Subject/Date/Received header (starts {first!r})", where)
        notes = [f"truncated from {size} bytes"] if size > len(raw) else []
        headers = {}
        raw_headers = _raw_headers(msg)
        for name in HEADER_NAMES + tuple(k for k in keep if k.lower() not in _LOWER_HEADER_NAMES):
            value, note = _header_text(raw_headers, name)
            if note:
                notes.append(note)
            if value:
                headers[name] = value[:MAX_HEADER_CHARS]
        body = _body_of(msg, notes)
        message_id, _ = _header_text(raw_headers, "Message-ID")
    except ParseError:
        raise
    except Exception as exc:  # noqa: BLE001 - one odd message must not stop a mailbox import
        raise ParseError("email package error", f"{type(exc).__name__}: {exc}"[:300], where) from exc
    return Message(subject=headers.get("Subject", ""), sender=headers.get("From", ""), body=body,
                   date=_date_of(headers.get("Date", "")), message_id=message_id[:MAX_HEADER_CHARS],
                   where=where, headers=headers, notes=tuple(notes))


# ---------------------------------------------------------------- labels


@dataclass(frozen=True)
class _LabelFrom:
    """A parsed --label-from: kind is folder, gmail, header or column; name for the last two."""

    kind: str
    name: str = ""


def _label_strategy(label_from: str) -> _LabelFrom:
    kind, _, name = label_from.partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if kind in ("folder", "gmail") and not name:
        return _LabelFrom(kind)
    if kind in ("header", "column") and name:
        return _LabelFrom(kind, name)
    raise ValueError(f"label_from={label_from!r}: use folder, gmail, header:NAME or column:NAME "
                     "(e.g. header:X-Folder, column:category)")


def _header_lookup(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value.strip() or None
    return None


def _email_label(msg: Message, folder: str | None, strategy: _LabelFrom) -> str | None:
    if strategy.kind == "folder":
        return folder
    if strategy.kind == "gmail":
        return gmail_label(_header_lookup(msg.headers, "X-Gmail-Labels") or "")
    return _header_lookup(msg.headers, strategy.name)


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
    strategy = _label_strategy(label_from)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder (check --source)")
    fmt = detect_format(source) if fmt == "auto" else fmt
    report = report if report is not None else ImportReport(source=str(source))
    report.unit = "messages"
    if fmt in ("csv", "jsonl"):
        if not source.is_file():
            raise ValueError(f"{source}: --format {fmt} needs a file, this is a folder")
        if strategy.kind == "header":  # a CSV/JSON has columns, not headers: the column of that name
            strategy = _LabelFrom("column", strategy.name)
        names = _Names(text_column, label_column, subject_column, sender_column)
        if fmt == "csv":
            columns = _csv_columns(source, encoding or "utf-8-sig", names, strategy)
            return _iter_csv(source, encoding or "utf-8-sig", columns, strategy, report, max_bytes)
        return _iter_json(source, encoding or "utf-8-sig", names, strategy, report, max_bytes)
    if strategy.kind == "column":
        raise ValueError(f"label_from={label_from!r} is for CSV/JSONL sources; for e-mail use "
                         "folder, gmail or header:NAME")
    if fmt == "maildir" and next(_maildir_folders(source), None) is None:
        raise ValueError(f"{source}: not a Maildir (no cur/ and new/ inside it or below it); "
                         "pass --format eml-dir for a plain folder of message files")
    keep = (strategy.name,) if strategy.kind == "header" else ()
    items = {"eml-dir": _eml_items, "maildir": _maildir_items, "mbox": _mbox_items}[fmt](source, max_bytes, report)
    return _iter_emails(items, strategy, keep, report)


@dataclass(frozen=True)
class _Raw:
    """One message's bytes as read (cut to max_bytes), before parsing."""

    data: bytes
    size: int  # the original length
    where: str
    folder: str | None  # the label with label_from="folder"


def _iter_emails(items: Iterator[_Raw], strategy: _LabelFrom, keep: tuple[str, ...],
                 report: ImportReport) -> Iterator[Message]:
    for item in items:
        report.lines += 1
        try:
            msg = _parse(item.data, item.where, item.size, keep)
        except ParseError as exc:
            report.skip(item.where, exc.reason, exc.detail)
            continue
        msg.label = _email_label(msg, item.folder, strategy)
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
        while chunk := f.read(_READ_CHUNK):
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
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
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


# ---------------------------------------------------------------- CSV and JSON records


@dataclass(frozen=True)
class _Names:
    """Column (or JSON key) names asked for by the caller; None: the first default found."""

    text: str | None = None
    label: str | None = None
    subject: str | None = None
    sender: str | None = None


@dataclass(frozen=True)
class _Columns:
    """The resolved column names of one CSV (None: not present)."""

    text: str | None
    label: str | None
    subject: str | None
    sender: str | None
    date: str | None
    message_id: str | None
    fields: tuple[str, ...]


def _pick(fields: tuple[str, ...], candidates: tuple[str, ...]) -> str | None:
    """The first field whose name matches a candidate (case-insensitive), else None."""
    lower = {f.strip().lower(): f for f in fields}
    return next((lower[c.strip().lower()] for c in candidates if c.strip().lower() in lower), None)


def _find_column(fields: tuple[str, ...], wanted: str | None, defaults: tuple[str, ...],
                 flag: str, where: str) -> str | None:
    """The column asked for with `flag` (an error if absent), else the first default present."""
    if wanted is None:
        return _pick(fields, defaults)
    found = _pick(fields, (wanted,))
    if found is None:
        raise ValueError(f"{where}: no column {wanted!r} (asked for with {flag}); the columns are "
                         f"{list(fields)}. Fix: pass {flag} with one of them")
    return found


def _columns(fields: tuple[str, ...], names: _Names, strategy: _LabelFrom, where: str | None) -> _Columns:
    """Resolved columns; `where` None (JSON records) never raises: a missing key reads as empty."""
    label_name = strategy.name if strategy.kind == "column" else names.label
    if where is None:
        def find(wanted: str | None, defaults: tuple[str, ...], flag: str) -> str | None:
            return _pick(fields, (wanted,) if wanted else defaults)
    else:
        def find(wanted: str | None, defaults: tuple[str, ...], flag: str) -> str | None:
            return _find_column(fields, wanted, defaults, flag, where)
    text = find(names.text, _TEXT_COLUMNS, "--text-column")
    if text is None and where is not None:
        raise ValueError(f"{where}: no text column (looked for {', '.join(_TEXT_COLUMNS)}, any case); "
                         f"the columns are {list(fields)}. Fix: pass --text-column NAME")
    return _Columns(text=text, label=find(label_name, _LABEL_COLUMNS, "--label-from column:NAME or --label-column"),
                    subject=find(names.subject, _SUBJECT_COLUMNS, "--subject-column"),
                    sender=find(names.sender, _SENDER_COLUMNS, "--sender-column"),
                    date=_pick(fields, _DATE_COLUMNS), message_id=_pick(fields, _ID_COLUMNS), fields=fields)


def _record_message(rec: Mapping[str, Any], cols: _Columns, strategy: _LabelFrom, where: str,
                    max_bytes: int, notes: list[str]) -> Message:
    """One CSV row or JSON record as a Message; ParseError for a record without text."""
    values = {}
    for key in ("text", "subject", "sender", "message_id"):
        name = getattr(cols, key)
        value = rec.get(name) if name is not None else None
        if value is not None and not isinstance(value, str):
            raise ParseError("bad field", f"{name!r} is {type(value).__name__}, not text", where)
        values[key] = (value or "").replace("\r\n", "\n")
    text, subject = values["text"], " ".join(values["subject"].split())
    if not any(ch.isalnum() for ch in text + subject):
        raise ParseError("empty text", f"no letters or digits in {cols.text!r}"
                         + (f" or {cols.subject!r}" if cols.subject else ""), where)
    if len(text) == SPREADSHEET_CELL_CHARS:
        notes.append(f"text is {SPREADSHEET_CELL_CHARS} characters: probably cut by a spreadsheet")
    if len(text) > max_bytes:
        notes.append(f"truncated from {len(text)} characters")
        text = text[:max_bytes]
    raw_label = rec.get(cols.label) if cols.label is not None else None
    label = None if raw_label is None else str(raw_label).strip() or None
    if strategy.kind == "gmail" and label is not None:
        label = gmail_label(label)
    date = rec.get(cols.date) if cols.date is not None else None
    return Message(subject=subject, sender=" ".join(values["sender"].split()), body=text.strip(),
                   label=label, date=_record_date(date), message_id=values["message_id"].strip(),
                   where=where, notes=tuple(notes))


def _record_date(value: Any) -> float | None:
    """A date field: POSIX seconds as a number, an RFC 2822 date or an ISO 8601 date; else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        return None
    found = _date_of(value)
    if found is not None:
        return found
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


# ---------------------------------------------------------------- CSV


def _check_encoding(path: Path, encoding: str) -> None:
    """Raise, naming the byte offset and line, if the file is not valid in `encoding` (read in chunks)."""
    try:
        decoder = codecs.getincrementaldecoder(encoding)()
    except LookupError:
        raise ValueError(f"encoding {encoding!r} is unknown to Python: pass e.g. utf-8, cp1254 or latin-1") from None
    offset = newlines = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_READ_CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                bad = max(0, exc.start)
                line = newlines + chunk[:bad].count(b"\n") + 1
                raise ValueError(
                    f"{path}: not valid {encoding} at byte {offset + bad} (line {line}, bytes "
                    f"{chunk[bad:bad + 4]!r}). Fix: re-save the file as UTF-8, or pass --encoding with its "
                    "real code page (e.g. --encoding cp1254 for Turkish Windows, latin-1 for Western)") from None
            if not chunk:
                return
            offset += len(chunk)
            newlines += chunk.count(b"\n")


def _csv_columns(path: Path, encoding: str, names: _Names, strategy: _LabelFrom) -> _Columns:
    """Check the file's encoding and header now, so a bad CSV fails before the first message."""
    _check_encoding(path, encoding)
    with open(path, encoding=encoding, newline="") as f:
        header = next(csv.reader(f), None)
    if not header or not any(h.strip() for h in header):
        raise ValueError(f"{path}: the first line must name the columns (e.g. Text,Classification); "
                         f"found {header!r}. Fix: add a header line")
    return _columns(tuple(header), names, strategy, str(path))


def _iter_csv(path: Path, encoding: str, cols: _Columns, strategy: _LabelFrom, report: ImportReport,
              max_bytes: int) -> Iterator[Message]:
    # Process-wide, as csv's only switch is: texts of real mail exceed the 128 KiB default.
    csv.field_size_limit(max(csv.field_size_limit(), 64 * max_bytes))
    with open(path, encoding=encoding, newline="") as f:
        reader = csv.reader(f)
        next(reader)
        text_at = cols.fields.index(cols.text)
        width = len(cols.fields)
        line = reader.line_num
        while True:
            start = line + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                line = reader.line_num
                report.lines += 1
                report.skip(f"{path}:{start}", "bad CSV row", str(exc))
                continue
            line = reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue  # a blank line is not an item
            report.lines += 1
            notes: list[str] = []
            if len(row) > width:  # unquoted commas in the text: join the surplus back into it
                extra = len(row) - width
                notes.append(f"{extra} unquoted comma(s) joined into the text")
                row = row[:text_at] + [",".join(row[text_at:text_at + extra + 1])] + row[text_at + extra + 1:]
            rec = dict(zip(cols.fields, row))
            try:
                msg = _record_message(rec, cols, strategy, f"{path}:{start}", max_bytes, notes)
            except ParseError as exc:
                report.skip(f"{path}:{start}", exc.reason, exc.detail)
                continue
            report.accepted += 1
            yield msg


# ---------------------------------------------------------------- JSONL and JSON lists


def _json_is_list(path: Path) -> bool:
    """True when the file's first non-blank character is "[" (a JSON list, not JSON lines)."""
    with open(path, "rb") as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip().lstrip(codecs.BOM_UTF8).lstrip()
            if stripped:
                return stripped.startswith(b"[")
    return False


def _json_records(path: Path, encoding: str, report: ImportReport) -> Iterator[tuple[str, Any]]:
    """(where, record) per JSON line, or per item of a JSON list; bad lines counted and skipped."""
    if _json_is_list(path):
        try:
            with open(path, encoding=encoding) as f:
                items = json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not a valid JSON list ({exc}). Fix: repair it, or write one "
                             "record per line (JSONL) so that a bad record skips only itself") from None
        for i, item in enumerate(items):
            yield f"{path}#{i}", item
        return
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                yield where, json.loads(raw.decode(encoding))
            except UnicodeDecodeError as exc:
                report.lines += 1
                report.skip(where, "not " + encoding, f"byte {exc.start} of the line")
            except ValueError as exc:
                report.lines += 1
                report.skip(where, "bad JSON", str(exc))


def _iter_json(path: Path, encoding: str, names: _Names, strategy: _LabelFrom, report: ImportReport,
               max_bytes: int) -> Iterator[Message]:
    for where, rec in _json_records(path, encoding, report):
        report.lines += 1
        if not isinstance(rec, dict):
            report.skip(where, "not a JSON object", f"found {type(rec).__name__}")
            continue
        cols = _columns(tuple(rec), names, strategy, None)
        try:
            msg = _record_message(rec, cols, strategy, where, max_bytes, [])
        except ParseError as exc:
            report.skip(where, exc.reason, exc.detail)
            continue
        report.accepted += 1
        yield msg
