"""CSV and JSONL (or JSON list) records as `Message`s: one row or record per message.

Columns (or JSON keys) are found by name, case-insensitively: the text in text, body, message
or content, the label in label, classification, category or class, and subject, sender (or
from), date and message_id where present; --text-column, --label-column, --subject-column and
--sender-column name others. With --label-from gmail the label column is read as an
X-Gmail-Labels value; header:NAME and column:NAME read the column NAME.

CSV: `encoding` defaults to UTF-8 with or without a BOM; a file that is not valid in it
raises before anything is read, naming the byte offset and line. Rows with more fields than
the header (commas in unquoted text, as in the Turkish trspam set) have the surplus fields
joined back into the text column; rows whose text and subject hold no letter or digit are
skipped as "empty text". `where` is "path:line" for CSV and JSONL rows, "path#i" (0-based)
for the items of a JSON list.

Departure from the published count, and why: the Turkish trspam CSV gives 824 messages (495
ham, 329 spam), not the published 825: one ham row (line 32071) is ",ham" with no text.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from trmkit.data.imports import ImportReport
from trmkit.email.labels import LabelFrom, gmail_label
from trmkit.email.mail import Message
from trmkit.email.mail.mime import READ_CHUNK, ParseError, date_of

SPREADSHEET_CELL_CHARS = 32_767  # Excel's cell limit: a text of exactly this length was probably cut
_TEXT_COLUMNS = ("text", "body", "message", "content")
_LABEL_COLUMNS = ("label", "classification", "category", "class")
_SUBJECT_COLUMNS = ("subject",)
_SENDER_COLUMNS = ("sender", "from")
_DATE_COLUMNS = ("date",)
_ID_COLUMNS = ("message_id", "message-id")
NO_LABEL_COLUMN = "no label column"  # the note a CSV without one leaves in the report


def iter_records(path: Path, fmt: str, names: ColumnNames, strategy: LabelFrom, report: ImportReport,
                 max_bytes: int, encoding: str | None = None) -> Iterator[Message]:
    """Messages of a CSV (fmt "csv") or JSONL/JSON-list file; bad rows counted in `report`.

    A CSV's encoding and header are checked now, so a bad file raises before the first message."""
    encoding = encoding or "utf-8-sig"
    if fmt == "csv":
        columns = _csv_columns(path, encoding, names, strategy)
        report.notes.append(f"{path.name}: separator {SEPARATOR_NAMES[columns.delimiter]} (it splits the header "
                            f"line into the most columns: {len(columns.fields)})")
        if columns.label is None and strategy.kind != "none":
            report.notes.append(f"{path.name}: {NO_LABEL_COLUMN} (looked for {', '.join(_LABEL_COLUMNS)}, any case); "
                                f"the columns are {list(columns.fields)}. Fix: pass --label-column NAME")
        return _iter_csv(path, encoding, columns, strategy, report, max_bytes)
    return _iter_json(path, encoding, names, strategy, report, max_bytes)


@dataclass(frozen=True)
class ColumnNames:
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
    delimiter: str = ","  # the CSV's field separator, detected from its header line


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


def _columns(fields: tuple[str, ...], names: ColumnNames, strategy: LabelFrom, where: str | None) -> _Columns:
    """Resolved columns; `where` None (JSON records) never raises: a missing key reads as empty."""
    label_name = strategy.name if strategy.kind == "column" else names.label
    if where is None:
        def find(wanted: str | None, defaults: tuple[str, ...], flag: str) -> str | None:
            return _pick(fields, (wanted,) if wanted else defaults)
    else:
        def find(wanted: str | None, defaults: tuple[str, ...], flag: str) -> str | None:
            return _find_column(fields, wanted, defaults, flag, where)
    text = find(names.text, _TEXT_COLUMNS, "--text-column")
    label = find(label_name, _LABEL_COLUMNS, "--label-from column:NAME or --label-column")
    if text is None and where is not None:
        unlabelled = label is None and strategy.kind != "none"
        raise ValueError(f"{where}: no text column (looked for {', '.join(_TEXT_COLUMNS)}, any case)"
                         + (" and no label column (looked for " + ", ".join(_LABEL_COLUMNS) + ")" if unlabelled
                            else "") + f"; the columns are {list(fields)}. Fix: pass --text-column NAME"
                         + (" and --label-column NAME" if unlabelled else ""))
    return _Columns(text=text, label=label,
                    subject=find(names.subject, _SUBJECT_COLUMNS, "--subject-column"),
                    sender=find(names.sender, _SENDER_COLUMNS, "--sender-column"),
                    date=_pick(fields, _DATE_COLUMNS), message_id=_pick(fields, _ID_COLUMNS), fields=fields)


def _record_message(rec: Mapping[str, Any], cols: _Columns, strategy: LabelFrom, where: str,
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
    label = None if raw_label is None or strategy.kind == "none" else str(raw_label).strip() or None
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
    found = date_of(value)
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
            chunk = f.read(READ_CHUNK)
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


CSV_DELIMITERS = (",", ";", "\t", "|")  # the separators a header line is tried with, the comma first
SEPARATOR_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "bar"}


def header_delimiter(line: str) -> str:
    """The separator that splits a CSV header line into the most columns (ties: the earlier one)."""
    return max(CSV_DELIMITERS, key=lambda d: (len(next(csv.reader([line], delimiter=d), [])),
                                              -CSV_DELIMITERS.index(d)))


def _csv_columns(path: Path, encoding: str, names: ColumnNames, strategy: LabelFrom) -> _Columns:
    """Check the file's encoding and header now, so a bad CSV fails before the first message.
    The separator (, ; tab |) is the one that splits the header line into the most columns."""
    _check_encoding(path, encoding)
    with open(path, encoding=encoding, newline="") as f:
        first = f.readline()
    delimiter = header_delimiter(first.rstrip("\r\n"))
    header = next(csv.reader([first.rstrip("\r\n")], delimiter=delimiter), None)
    if not header or not any(h.strip() for h in header):
        raise ValueError(f"{path}: the first line must name the columns (e.g. Text,Classification); "
                         f"found {header!r}. Fix: add a header line")
    cols = _columns(tuple(header), names, strategy, str(path))
    return dataclasses.replace(cols, delimiter=delimiter)


def _iter_csv(path: Path, encoding: str, cols: _Columns, strategy: LabelFrom, report: ImportReport,
              max_bytes: int) -> Iterator[Message]:
    # Process-wide, as csv's only switch is: texts of real mail exceed the 128 KiB default.
    csv.field_size_limit(max(csv.field_size_limit(), 64 * max_bytes))
    with open(path, encoding=encoding, newline="") as f:
        reader = csv.reader(f, delimiter=cols.delimiter)
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
                notes.append(f"{extra} unquoted {SEPARATOR_NAMES[cols.delimiter]}(s) joined into the text")
                row = (row[:text_at] + [cols.delimiter.join(row[text_at:text_at + extra + 1])]
                       + row[text_at + extra + 1:])
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


def _iter_json(path: Path, encoding: str, names: ColumnNames, strategy: LabelFrom, report: ImportReport,
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
