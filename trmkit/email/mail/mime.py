"""One raw RFC 822 message as a `Message`: `parse_message(raw, where)`.

Everything is decoded with the standard library (`email` with a policy derived from
`email.policy.default`, `html.parser`), never with regular expressions over raw mail. A
message that cannot be read raises `ParseError`, whose `reason` groups it in the import
report (mailbox.py counts it and goes on).

Body: text/plain is preferred, else HTML converted to text with a real HTML parser
(script and style dropped, newlines at block tags, entities unescaped). multipart/mixed
with several inline text parts gives their concatenation; attachments (a Content-
Disposition of attachment, or any non-text part) are counted in `notes`, never decoded.
Unknown or invalid charsets ("default", "unknown-8bit", "x-user-defined") fall back to
UTF-8, then cp1252, with a "charset fallback: NAME" note.

Bounded work per message, whatever the input:
- a message over `max_bytes` (2 MiB) is cut to its first `max_bytes` before parsing
  ("truncated from N bytes" note); files and mbox entries are read only that far
  (mailbox.py), so a 50 MB message or a 1 GB mbox never sits in memory;
- header values are cut to `MAX_HEADER_PARSE_CHARS` before the header parser sees them,
  and parsed headers are cached: CPython's header parser is quadratic in the number of
  parameters (SpamAssassin's spam-2/00471 has a Content-Type of 7,000 ";" and took 5 s),
  and `get_body` re-parses Content-Type on every access.

Departure from the plan, and why: Message.headers values are decoded as unstructured text
(RFC 2047 words still decoded by policy.default's parser): the address parser costs 4 x the
time and re-formats From/To.
"""

from __future__ import annotations

import codecs
import functools
import re
from datetime import timezone
from email.headerregistry import HeaderRegistry
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import EmailPolicy
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from typing import Any, Mapping

from trmkit.email.mail import Message

MAX_MESSAGE_BYTES = 2 * 1024 * 1024  # larger messages are cut to this before parsing
MAX_HEADER_CHARS = 1000  # each value kept in Message.headers
MAX_HEADER_PARSE_CHARS = 2000  # header values are cut to this before parsing (see the docstring)
READ_CHUNK = 1 << 20  # files too large to read whole are read in pieces of this many bytes

# Kept in Message.headers for label rules. X-Spam-* headers are left out on purpose: in
# corpora filtered by SpamAssassin they hold the verdict, which would leak the label.
HEADER_NAMES = ("From", "To", "Cc", "Reply-To", "Subject", "Date", "Return-Path", "List-Id",
                "List-Unsubscribe", "Precedence", "Auto-Submitted", "X-Gmail-Labels", "X-Folder",
                "X-Mailer", "Content-Type", "In-Reply-To", "References", "X-Priority", "X-MSMail-Priority")
_LOWER_HEADER_NAMES = frozenset(n.lower() for n in HEADER_NAMES)
# A file is an e-mail only if it has at least one of these (a `cmds` script is not).
_EMAIL_HEADERS = frozenset({"from", "to", "subject", "date", "message-id", "received",
                            "return-path", "delivered-to", "mime-version", "content-type", "sender"})
_BODY_TYPES = ("text/plain", "text/html")


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
        text = _unstructured_text(name, value[:MAX_HEADER_PARSE_CHARS])
    except Exception as exc:  # noqa: BLE001 - the header parser has many failure modes on bad input
        text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        note = f"header fallback: {name} ({type(exc).__name__})"
    return " ".join(text.split()), note


_TEXT_HEADERS = HeaderRegistry(use_default_map=False)  # every header as UnstructuredHeader


def _unstructured_text(name: str, value: str) -> str:
    """What policy.default decodes an unstructured header `value` to, parsing only values that need it.

    Its parser (get_unstructured) changes a value only at an encoded word, which starts "=?";
    without one the decoded text is the value itself (with 8-bit bytes repaired as _parse_header
    does), so the parse - 0.05 ms a header, a third of parsing SpamAssassin - is skipped. Checked
    equal on every header of the SpamAssassin corpus (tests/email/test_mail.py).
    """
    if "=?" in value:
        return str(_parse_header(_TEXT_HEADERS, name, value))
    return _repair_8bit(value)


def date_of(value: str) -> float | None:
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


def parse_message(raw: bytes, where: str = "", max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """One RFC 822 message as a `Message` (label None); raises ParseError if it is not an e-mail."""
    size = len(raw)
    return parse_bounded(raw[:max_bytes] if size > max_bytes else raw, where, size)


def parse_bounded(raw: bytes, where: str, size: int, keep: tuple[str, ...] = ()) -> Message:
    """`raw` (already cut to max_bytes; `size` is the original length) as a Message.

    `keep`: header names kept in Message.headers beside HEADER_NAMES (the one --label-from
    header:NAME reads)."""
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
                   date=date_of(headers.get("Date", "")), message_id=message_id[:MAX_HEADER_CHARS],
                   where=where, headers=headers, notes=tuple(notes))

