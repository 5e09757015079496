"""Raw labels (folder names, Gmail labels, header values, CSV columns) mapped onto categories.

`mail.mailbox.iter_messages` finds each message's *raw* label with a --label-from strategy
(`LabelFrom`): "folder" (the sub-folder of an .eml folder, the Maildir folder with the top one
called INBOX, the mbox file's stem; for CSV/JSONL the label column), "gmail" (the
X-Gmail-Labels header via `gmail_label`; for CSV/JSONL the label column read the same way),
"header:NAME" (the decoded value of header NAME; for CSV/JSONL the column NAME),
"column:NAME" (CSV/JSONL only) and "filename:REGEX" (files and mboxes: the regex searched in the
file's name, its first group or the whole match, e.g. Ling-Spam's spmsg* files with
'filename:^(spm|[0-9])'); a label that cannot be found is None. A label map (YAML, see
configs/email-taxonomy.yaml) turns raw labels into the categories
the classifier learns. The map format:

    categories: [Newsletter, Work, Personal, Spam, ...]  # the classes; optional, default DEFAULT_TAXONOMY
    map:                        # raw label -> category; keys match case-insensitively, surrounding
      spam-1: Spam              # spaces ignored; a null value drops messages with that raw label
      Promotions: Promotional
      Drafts: null
    rules:                      # ordered; the first rule that matches wins
      - {header: List-Id, matches: ".", category: Newsletter}          # a header of Message.headers
      - {field: subject, matches: '\\binvoice\\b', category: Finance}  # subject | sender | body | label
      - {field: label, matches: '^spam', category: Spam, when: always} # `when: always`: before `map`
      - {header: Auto-Submitted, matches: 'auto-replied', category: null}  # null: leave these out
    default: Other              # a category, or null: messages nothing maps are left out (and counted)

Order of decision in `apply`: rules with `when: always` (in file order), then `map` on the
raw label, then the other rules (`when: unmapped`, the default), then `default`.
Regexes are Python `re`, searched (not anchored) case-insensitively; write `(?-i:...)` for a
case-sensitive part, and quote them with single quotes in YAML (in double quotes "\\b" is a
backspace). A header rule matches only when the message has that header; the reader keeps the
headers in `mail.mime.HEADER_NAMES` (From, To, Subject, List-Id, List-Unsubscribe, Precedence,
X-Gmail-Labels, X-Folder, ...; 1000 characters each) plus the one --label-from header:NAME
reads; body rules look at the first BODY_RULE_CHARS characters. Every target must be one of
`categories`; errors name the file, the key (rules by 0-based index) and the fix.
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

from trmkit.data.imports import ImportReport
from trmkit.email.mail import Message

DEFAULT_TAXONOMY = ("Newsletter", "Work", "Personal", "Spam", "Promotional", "Social", "Finance", "Travel",
                    "Shopping", "Other")
# Gmail system labels that say where a message sits or what was done with it, not what it is.
GMAIL_IGNORED = frozenset({"inbox", "unread", "opened", "important", "starred", "sent", "archived", "drafts",
                           "draft", "trash", "chat", "chats", "all mail", "snoozed", "scheduled", "muted",
                           "read", "outbox", "sent mail", "imap_notjunk", "imap_junk"})
# Gmail's default tab: a user label says more than "not a promotion".
GMAIL_DEFAULT_CATEGORIES = frozenset({"primary", "personal"})
BODY_RULE_CHARS = 10_000
RULE_FIELDS = ("subject", "sender", "body", "label")
_TOP_KEYS = ("categories", "map", "rules", "default")
_RULE_KEYS = ("header", "field", "matches", "category", "when")


class LabelMapError(ValueError):
    """A label map that cannot work; the message names the file, the key and the fix."""


def gmail_label(value: str) -> str | None:
    """The one label that says what a message is, from an X-Gmail-Labels value.

    "Spam" wins; then a Gmail category ("Category Promotions" -> "Promotions"); then the
    first user label; then the default category (Primary/Personal); system labels (Inbox,
    Unread, ...) alone give None. Labels holding commas come quoted ("\\"a,b\\"").
    """
    try:
        labels = [x.strip() for x in next(csv.reader([" ".join(value.split())], skipinitialspace=True), [])]
    except csv.Error:
        labels = [x.strip() for x in value.split(",")]
    labels = [x for x in labels if x]
    if any(x.lower() == "spam" for x in labels):
        return "Spam"
    categories = [x[len("category "):].strip() for x in labels if x.lower().startswith("category ")]
    special = [c for c in categories if c and c.lower() not in GMAIL_DEFAULT_CATEGORIES]
    if special:
        return special[0]
    users = [x for x in labels if not x.lower().startswith("category ") and x.lower() not in GMAIL_IGNORED]
    if users:
        return users[0]
    return next((c for c in categories if c), None)


@dataclass(frozen=True)
class LabelFrom:
    """A parsed --label-from: kind is folder, gmail, header or column; name for the last two."""

    kind: str
    name: str = ""


def label_strategy(label_from: str) -> LabelFrom:
    kind, _, name = label_from.partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if kind in ("folder", "gmail") and not name:
        return LabelFrom(kind)
    if kind in ("header", "column") and name:
        return LabelFrom(kind, name)
    if kind == "filename" and name:
        try:
            re.compile(name)
        except re.error as exc:
            raise ValueError(f"label_from={label_from!r}: the regex does not compile ({exc})") from None
        return LabelFrom(kind, name)
    raise ValueError(f"label_from={label_from!r}: use folder, gmail, header:NAME, column:NAME or filename:REGEX "
                     "(e.g. header:X-Folder, column:category, 'filename:^(spm|[0-9])')")


def filename_label(where: str, pattern: str) -> str | None:
    """The raw label a file's name gives under filename:REGEX: the regex's first group when it has
    one, else the whole match; a name it does not match (or matches empty) gives None."""
    name = Path(where.split("#", 1)[0]).name  # an mbox message's where is path#index
    found = re.search(pattern, name)
    if found is None:
        return None
    return (found.group(1) if found.re.groups else found.group(0)) or None


def _header_lookup(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value.strip() or None
    return None


def email_label(msg: Message, folder: str | None, strategy: LabelFrom) -> str | None:
    """The raw label of a decoded e-mail under `strategy` (`folder`: where the reader found it)."""
    if strategy.kind == "folder":
        return folder
    if strategy.kind == "gmail":
        return gmail_label(_header_lookup(msg.headers, "X-Gmail-Labels") or "")
    if strategy.kind == "filename":
        return filename_label(msg.where, strategy.name)
    return _header_lookup(msg.headers, strategy.name)


@dataclass(frozen=True)
class Rule:
    """One rule: a regex on a header or a field; `always` rules run before the map."""

    category: str | None
    pattern: re.Pattern[str]
    header: str | None = None  # a header name of Message.headers, or ...
    field: str | None = None  # ... one of RULE_FIELDS
    always: bool = False

    def matches(self, msg: Message) -> bool:
        if self.header is not None:
            value = next((v for k, v in msg.headers.items() if k.lower() == self.header.lower()), None)
        elif self.field == "body":
            value = msg.body[:BODY_RULE_CHARS]
        elif self.field == "label":
            value = msg.label
        else:
            value = getattr(msg, str(self.field))
        return value is not None and self.pattern.search(value) is not None


@dataclass
class LabelMap:
    """Categories, the raw-label map (lower-cased keys), ordered rules and the default."""

    categories: tuple[str, ...] = DEFAULT_TAXONOMY
    mapping: dict[str, str | None] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    default: str | None = None
    source: str = ""  # the file it came from, for messages


def apply(label_map: LabelMap, msg: Message) -> str | None:
    """The category of `msg`, or None (unmapped: the caller skips and counts it)."""
    for rule in label_map.rules:
        if rule.always and rule.matches(msg):
            return rule.category
    if msg.label is not None:
        key = msg.label.strip().lower()
        if key in label_map.mapping:
            return label_map.mapping[key]
    for rule in label_map.rules:
        if not rule.always and rule.matches(msg):
            return rule.category
    return label_map.default


def map_labels(label_map: LabelMap, messages: Iterable[Message],
               report: ImportReport | None = None) -> Iterator[tuple[Message, str]]:
    """(message, category) for each message the map places; the others counted in `report`.

    Use a report of its own (the label stage): it counts lines = messages seen, accepted =
    placed, and skips "no label" (no raw label, nothing matched) or "label not mapped".
    """
    for msg in messages:
        if report is not None:
            report.lines += 1
        category = apply(label_map, msg)
        if category is None:
            if report is not None:
                reason = "label not mapped" if msg.label else "no label"
                report.skip(msg.where, reason, f"raw label {msg.label!r}, map {label_map.source or '(in memory)'}")
            continue
        if report is not None:
            report.accepted += 1
        yield msg, category


# ---------------------------------------------------------------- loading


def load_label_map(path: str | Path) -> LabelMap:
    """A LabelMap from YAML (format in the module docstring); LabelMapError names the problem."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"label map {path}: no such file. Fix: pass an existing YAML, e.g. "
                                "configs/email-taxonomy.yaml (the default 10-category taxonomy)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise LabelMapError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise LabelMapError(f"{path}: not UTF-8 (byte {exc.start}). Fix: save it as UTF-8") from None
    return label_map_from_dict(data, str(path))


def label_map_from_dict(data: Any, source: str = "(label map)") -> LabelMap:
    """A checked LabelMap from the parsed YAML mapping (see the module docstring)."""
    if not isinstance(data, dict):
        raise LabelMapError(f"{source}: the top level must be a mapping with keys {', '.join(_TOP_KEYS)}")
    _no_unknown_keys(data, _TOP_KEYS, source, "")
    categories = _categories(data.get("categories", list(DEFAULT_TAXONOMY)), source)
    mapping_in = data.get("map") or {}
    if not isinstance(mapping_in, dict):
        raise LabelMapError(f"{source}: map: must be a mapping of raw label -> category")
    mapping: dict[str, str | None] = {}
    for raw, target in mapping_in.items():
        key = str(raw).strip().lower()
        category = _category(target, categories, source, f"map: {raw!r}", allow_null=True)
        if key in mapping and mapping[key] != category:
            raise LabelMapError(f"{source}: map: {raw!r} appears twice, as {mapping[key]!r} and {category!r} "
                                "(keys are case-insensitive). Fix: keep one")
        mapping[key] = category
    rules_in = data.get("rules") or []
    if not isinstance(rules_in, list):
        raise LabelMapError(f"{source}: rules: must be a list of {{header|field, matches, category}}")
    rules = tuple(_rule(r, i, categories, source) for i, r in enumerate(rules_in))
    default = _category(data.get("default"), categories, source, "default", allow_null=True)
    return LabelMap(categories=categories, mapping=mapping, rules=rules, default=default, source=source)


def _no_unknown_keys(data: dict, valid: tuple[str, ...], source: str, where: str) -> None:
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise LabelMapError(f"{source}: {where}unknown key {key!r}{hint}; valid keys: {', '.join(valid)}")


def _categories(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c.strip() for c in value):
        raise LabelMapError(f"{source}: categories: must be a non-empty list of names, e.g. "
                            f"[{', '.join(DEFAULT_TAXONOMY[:3])}]")
    cats = tuple(c.strip() for c in value)
    dup = sorted({c for c in cats if [x.lower() for x in cats].count(c.lower()) > 1})
    if dup:
        raise LabelMapError(f"{source}: categories: {dup} appear more than once")
    return cats


def _category(value: Any, categories: tuple[str, ...], source: str, key: str, allow_null: bool) -> str | None:
    """`value` spelled as in `categories` (matched case-insensitively), or None where allowed."""
    if value is None and allow_null:
        return None
    by_lower = {c.lower(): c for c in categories}
    if isinstance(value, str) and value.strip().lower() in by_lower:
        return by_lower[value.strip().lower()]
    close = difflib.get_close_matches(str(value), categories, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise LabelMapError(f"{source}: {key}: {value!r} is not one of the categories{hint}. Fix: use one of "
                        f"{', '.join(categories)}, or add it to categories:")


def _rule(data: Any, index: int, categories: tuple[str, ...], source: str) -> Rule:
    where = f"rules[{index}] (rule {index + 1}): "
    if not isinstance(data, dict):
        raise LabelMapError(f"{source}: {where}must be a mapping like "
                            "{header: List-Id, matches: '.', category: Newsletter}")
    _no_unknown_keys(data, _RULE_KEYS, source, where)
    if ("header" in data) == ("field" in data):
        raise LabelMapError(f"{source}: {where}give exactly one of header: NAME or field: "
                            f"{'|'.join(RULE_FIELDS)}")
    if "field" in data and data["field"] not in RULE_FIELDS:
        raise LabelMapError(f"{source}: {where}field: {data['field']!r} is not one of {', '.join(RULE_FIELDS)}")
    if "header" in data and not (isinstance(data["header"], str) and data["header"].strip()):
        raise LabelMapError(f"{source}: {where}header: must be a header name such as List-Id")
    if "category" not in data:
        raise LabelMapError(f"{source}: {where}category: is missing")
    when = data.get("when", "unmapped")
    if when not in ("always", "unmapped"):
        raise LabelMapError(f"{source}: {where}when: {when!r}; use always (before map) or unmapped (the default)")
    if not isinstance(data.get("matches"), str):
        raise LabelMapError(f"{source}: {where}matches: must be a regular expression in quotes")
    try:
        pattern = re.compile(data["matches"], re.IGNORECASE)
    except re.error as exc:
        raise LabelMapError(f"{source}: {where}matches: {data['matches']!r} is not a valid regular "
                            f"expression ({exc})") from None
    return Rule(category=_category(data["category"], categories, source, f"{where}category", allow_null=True),
                pattern=pattern, header=data.get("header"), field=data.get("field"), always=when == "always")
